"""Host names and addresses as sbxc reads them in `allow` rules and the proxy reads them in
requests: one reading for the compiler (which checks a rule when the policy is compiled)
and the proxy (which checks it again, and every request, at run time).

A leaf: imports only ``_socket`` (to parse and print addresses), so the proxy stays free
of ``re``, ``json`` and ``ipaddress``; the ``idna`` codec (which imports ``re``) is loaded
only when a name is not plain ASCII or holds an ``xn--`` label.
"""
import _socket

DEFAULT_PORTS = (443, 80)
"""Ports a rule admits when it names none (SPEC §2)."""

_LDH = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
# IDNA 2003 (the only IDNA in the standard library) maps these away or to other letters,
# where IDNA 2008, which clients use, keeps them: the same Unicode name would mean two
# different hosts, so a name holding one is refused rather than guessed.
_DEVIATIONS = frozenset("\u00df\u03c2\u200c\u200d")


class BadTarget(ValueError):
    """The request names no valid host or address; the text is fixed, safe to print."""


# --- addresses -----------------------------------------------------------------------

def _nets(family: int, entries: tuple[tuple[str, int], ...]) -> tuple[tuple[int, int], ...]:
    bits = 32 if family == _socket.AF_INET else 128
    out = []
    for text, length in entries:
        value = int.from_bytes(_socket.inet_pton(family, text), "big")
        out.append((value >> (bits - length), bits - length))
    return tuple(out)


# Not public: reached only when an address rule names the address (DNS rebinding defence).
# IPv4: this-network, RFC 1918, CGNAT, loopback, link-local (cloud metadata at
# 169.254.169.254), IETF protocol block, documentation, benchmarking, multicast,
# reserved and broadcast.
_V4_SPECIAL = _nets(_socket.AF_INET, (
    ("0.0.0.0", 8), ("10.0.0.0", 8), ("100.64.0.0", 10), ("127.0.0.0", 8),
    ("169.254.0.0", 16), ("172.16.0.0", 12), ("192.0.0.0", 24), ("192.0.2.0", 24),
    ("192.88.99.0", 24), ("192.168.0.0", 16), ("198.18.0.0", 15), ("198.51.100.0", 24),
    ("203.0.113.0", 24), ("224.0.0.0", 4), ("240.0.0.0", 4),
))
# IPv6: unspecified, loopback and the deprecated IPv4-compatible block (::/96), the
# translated forms ::ffff:0:0:0/96, NAT64 local use, discard, the IETF protocol block
# (Teredo, ORCHID, ...), documentation, unique-local, site-local, link-local, multicast.
# IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address and are
# judged by it.
_V6_SPECIAL = _nets(_socket.AF_INET6, (
    ("::", 96), ("::ffff:0:0:0", 96), ("64:ff9b:1::", 48), ("100::", 64),
    ("2001::", 23), ("2001:db8::", 32), ("3fff::", 20), ("5f00::", 16),
    ("fc00::", 7), ("fec0::", 10), ("fe80::", 10), ("ff00::", 8),
))
_MAPPED = int.from_bytes(_socket.inet_pton(_socket.AF_INET6, "::ffff:0:0"), "big") >> 32
_NAT64 = int.from_bytes(_socket.inet_pton(_socket.AF_INET6, "64:ff9b::"), "big") >> 32
_6TO4 = 0x2002


def canonical_addr(family: int, packed: bytes) -> tuple[int, bytes]:
    """IPv4-mapped IPv6 (``::ffff:a.b.c.d``) becomes the IPv4 address it stands for: the
    kernel connects it to that address, so rules and checks must see it as one."""
    if family == _socket.AF_INET6 and int.from_bytes(packed[:12], "big") == _MAPPED:
        return _socket.AF_INET, packed[12:]
    return family, packed


def is_public(family: int, packed: bytes) -> bool:
    """False for every address a name must not lead to unless a rule names it."""
    family, packed = canonical_addr(family, packed)
    value = int.from_bytes(packed, "big")
    if family == _socket.AF_INET:
        return not any(value >> shift == net for net, shift in _V4_SPECIAL)
    if value >> 32 == _NAT64:
        return is_public(_socket.AF_INET, packed[12:])
    if value >> 112 == _6TO4:
        return is_public(_socket.AF_INET, packed[2:6])
    return not any(value >> shift == net for net, shift in _V6_SPECIAL)


def addr_text(family: int, packed: bytes) -> str:
    return _socket.inet_ntop(family, packed)


def parse_addr(text: str) -> tuple[int, bytes] | None:
    """A canonical IPv4 dotted quad or an IPv6 address (no zone), else None."""
    if ":" in text:
        if "%" in text:
            return None
        try:
            return canonical_addr(_socket.AF_INET6, _socket.inet_pton(_socket.AF_INET6, text))
        except (OSError, ValueError):
            return None
    try:
        packed = _socket.inet_pton(_socket.AF_INET, text)
    except (OSError, ValueError):
        return None
    # inet_pton takes only the dotted quad; the check below also refuses leading zeros,
    # which some resolvers read as octal.
    return (_socket.AF_INET, packed) if _socket.inet_ntop(_socket.AF_INET, packed) == text else None


# --- names ---------------------------------------------------------------------------

def _idna_label(label: str) -> str:
    """One label in its ASCII form, or BadTarget."""
    if label.isascii():
        label = label.lower()
        if label.startswith("xn--"):
            try:
                # The codec decodes the A-label and checks that it encodes back to itself.
                label.encode("ascii").decode("idna")
            except UnicodeError:
                raise BadTarget("invalid IDNA name") from None
        return label
    if any(ch in _DEVIATIONS for ch in label):
        raise BadTarget("IDNA name with a character IDNA 2003 and 2008 read differently")
    try:
        return label.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise BadTarget("invalid IDNA name") from None


def normalize_name(host: str) -> str:
    """The ASCII, lower-case form of a DNS name without its trailing dot; BadTarget when it
    is no valid name (empty labels, characters outside letters, digits, ``-`` and ``_``,
    labels over 63 or names over 253 characters, a numeric last label)."""
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 1024:
        raise BadTarget("not a valid host name")
    if not host.isascii():
        # IDNA separators (ideographic and full-width full stops) split labels as '.' does.
        for dot in ("\u3002", "\uff0e", "\uff61"):
            host = host.replace(dot, ".")
    labels = [_idna_label(label) for label in host.split(".")]
    name = ".".join(labels)
    if len(name) > 253:
        raise BadTarget("not a valid host name")
    for label in labels:
        if not label or len(label) > 63 or not _LDH.issuperset(label):
            raise BadTarget("not a valid host name")
    # A numeric last label is an address in some spelling ("127.1", "2130706433"), which
    # resolvers read as one; no top-level domain is numeric. inet_aton catches the rest
    # ("0x7f000001", "0x7f.0x0.0x0.0x1").
    if labels[-1].isdigit():
        raise BadTarget("an address spelt as a name")
    try:
        _socket.inet_aton(name)
    except OSError:
        return name
    raise BadTarget("an address spelt as a name")


def parse_host(host: str) -> tuple[str, object]:
    """``("addr", (family, packed))`` for an address literal (IPv6 with or without
    brackets), ``("name", ascii_name)`` for a name; BadTarget otherwise."""
    if host.startswith("[") and host.endswith("]"):
        addr = parse_addr(host[1:-1])
        if addr is None or ":" not in host:
            raise BadTarget("not a valid IPv6 address")
        return "addr", addr
    addr = parse_addr(host)
    if addr is not None:
        return "addr", addr
    if ":" in host:
        raise BadTarget("not a valid host name or address")
    return "name", normalize_name(host)


def display(kind: str, value) -> str:
    """Printable text for a host: an ASCII name or an address; never client bytes."""
    if kind == "addr":
        family, packed = value
        text = addr_text(family, packed)
        return f"[{text}]" if family == _socket.AF_INET6 else text
    return value


def parse_pattern(pattern: str) -> tuple[str, object]:
    """What an ``allow`` rule's host names: ``("name", ascii)``, ``("wild", parent)`` for
    ``*.parent`` (exactly one label more than ``parent``), or ``("addr", (family, packed))``;
    BadTarget with the reason for a host no rule may name."""
    if pattern.startswith("*."):
        parent = normalize_name(pattern[2:])
        if "." not in parent:
            raise BadTarget("it covers a whole top-level domain")
        return "wild", parent
    if "*" in pattern:
        raise BadTarget("'*' may only be the whole first label, as in *.example.org")
    kind, value = parse_host(pattern)
    if kind == "addr" and is_unspecified(*value):
        # A connection to 0.0.0.0 or :: goes to this host itself: such a rule would open
        # every local service on the port, whatever address it listens on.
        raise BadTarget("the unspecified address stands for this host itself, not for any address; "
                        "name the local address a service listens on, e.g. 127.0.0.1")
    return kind, value


def is_unspecified(family: int, packed: bytes) -> bool:
    """0.0.0.0, :: or ::ffff:0.0.0.0: what connect() takes for this host itself."""
    return not any(canonical_addr(family, packed)[1])
