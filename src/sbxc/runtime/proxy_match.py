"""Host rules for the filtering proxy: what a request names, which rule admits it, and
which resolved addresses may be used.

Pure: no sockets are opened here (``_socket`` is used only to parse and print addresses).
Imported when the proxy is built, so it stays free of ``re``, ``json`` and ``ipaddress``;
the ``idna`` codec (which imports ``re``) is loaded only when a name is not plain ASCII or
holds an ``xn--`` label.

Decisions (docs/proxy.md):
- A name rule ``example.org`` admits that name only. ``*.files.example.org`` admits
  exactly one more label (``a.files.example.org``), never the parent itself and never
  ``a.b.files.example.org``: the narrower reading, as TLS certificates use it.
- Names compare in their ASCII (punycode) form, lower-case, without a trailing dot.
- An address literal is admitted only by an address rule for that address; a name rule
  never admits a literal, however the literal is spelt.
- A resolved address that is not public (loopback, private, link-local, ...) is used only
  when an address rule names that exact address and the port.
"""
import _socket

# The reading of names and addresses is shared with the compiler (sbxc.hostnames); the
# names are re-exported here, where the proxy and its tests look for them.
from ..hostnames import (DEFAULT_PORTS, BadTarget, addr_text, canonical_addr, is_public,  # noqa: F401
                         is_unspecified, display, normalize_name, parse_addr, parse_host, parse_pattern)


# --- rules ---------------------------------------------------------------------------

class Rule:
    """One ``allow`` rule: what it names, its ports, and its source for feedback."""

    __slots__ = ("kind", "host", "ports", "source")

    def __init__(self, kind: str, host, ports: frozenset[int], source: str):
        self.kind = kind      # "name", "wild" (host is the parent after "*."), or "addr"
        self.host = host      # ASCII name, parent name, or (family, packed)
        self.ports = ports
        self.source = source  # the rule's text and place, e.g. "sandbox.policy.yaml:9:5: allow x"


def parse_rule(pattern: str, ports=None, source: str = "") -> Rule:
    """A rule from plain data; ValueError (with the reason) for one the proxy cannot use.
    ``pattern``: ``example.org``, ``*.files.example.org``, ``127.0.0.2``, ``[::1]`` or
    ``::1``; ``ports``: an iterable of ports, or None / empty for 443 and 80."""
    if not isinstance(pattern, str):
        raise ValueError("a host rule's host must be a string")
    ports = tuple(ports) if ports else DEFAULT_PORTS
    for port in ports:
        if type(port) is not int or not 1 <= port <= 65535:
            raise ValueError(f"port {port!r} is not in 1-65535")
    portset = frozenset(ports)
    try:
        kind, value = parse_pattern(pattern)
    except BadTarget as e:
        raise ValueError(f"{pattern!r}: {e}") from None
    return Rule(kind, value, portset, source)


class Rules:
    """The allow rules of one run, indexed for a lookup per request."""

    __slots__ = ("_names", "_wild", "_addrs")

    def __init__(self, rules):
        self._names: dict[str, list[Rule]] = {}
        self._wild: dict[str, list[Rule]] = {}
        self._addrs: dict[tuple[int, bytes], list[Rule]] = {}
        for item in rules:
            rule = item if isinstance(item, Rule) else parse_rule(*item)
            table = {"name": self._names, "wild": self._wild, "addr": self._addrs}[rule.kind]
            table.setdefault(rule.host, []).append(rule)

    def _candidates(self, kind: str, value) -> list[Rule]:
        if kind == "addr":
            return self._addrs.get(canonical_addr(*value), [])
        found = list(self._names.get(value, ()))
        dot = value.find(".")
        if dot > 0:
            found.extend(self._wild.get(value[dot + 1:], ()))
        return found

    def admit(self, kind: str, value, port: int) -> tuple[Rule | None, str]:
        """The rule that admits (kind, value) on ``port``, or None and a fixed reason."""
        candidates = self._candidates(kind, value)
        for rule in candidates:
            if port in rule.ports:
                return rule, ""
        if candidates:
            allowed = ", ".join(str(p) for p in sorted(set().union(*(r.ports for r in candidates))))
            return None, f"port {port} is not allowed for this host (allowed: {allowed})"
        if kind == "addr":
            return None, "no address rule allows this address (a name rule never admits an address)"
        return None, "no rule allows this host"

    def address_allowed(self, family: int, packed: bytes, port: int) -> bool:
        """Does an address rule name this exact address and port?"""
        return any(port in r.ports for r in self._addrs.get(canonical_addr(family, packed), ()))

    def usable(self, family: int, packed: bytes, port: int) -> bool:
        """May a name's resolved address be connected to?"""
        return is_public(family, packed) or self.address_allowed(family, packed, port)


def rule_hint(kind: str, value, port: int) -> str:
    """The rule a person would add to admit this target ('' for the unspecified address,
    which no rule may name: see ``hostnames.parse_pattern``)."""
    if kind == "addr" and is_unspecified(*value):
        return ""
    host = display(kind, value)
    return f"allow {host}" if port in DEFAULT_PORTS else f"allow {host}:{port}"
