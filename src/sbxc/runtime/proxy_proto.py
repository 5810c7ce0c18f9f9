"""The proxy's protocols on the wire: HTTP/1.x request heads (CONNECT and absolute-URI
forwarding), SOCKS5 and the refusal each protocol understands.

Pure byte handling, no sockets. A request head is parsed strictly and, for forwarding,
written out again by this module: the origin server sees exactly what the proxy checked
(no bare CR or LF, no folded lines, no second Host, one framing), so a request cannot mean
one host to the proxy and another to the server.
"""
from __future__ import annotations

from . import proxy_match as match

_STATUS = {
    400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 408: "Request Timeout",
    411: "Length Required", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
}
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Headers for this hop only (RFC 9110 §7.6.1), and the proxy's own: never passed on.
_HOP = frozenset((b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization",
                  b"proxy-authenticate", b"te", b"trailer", b"upgrade", b"transfer-encoding"))

CONNECT_OK = b"HTTP/1.1 200 Connection established\r\n\r\n"


class HttpError(Exception):
    """A request the proxy answers with ``status``; ``reason`` is fixed text."""

    def __init__(self, status: int, reason: str):
        super().__init__(status, reason)
        self.status = status
        self.reason = reason


def http_response(status: int, message: str) -> bytes:
    """A complete response that closes the connection; ``message`` is sbxc's own text."""
    body = f"sbxc proxy: {message}\n".encode("ascii", "replace")
    return (f"HTTP/1.1 {status} {_STATUS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii") + body


class Request:
    """One parsed request head."""

    __slots__ = ("connect", "kind", "host", "port", "forward_head", "body_length")

    def __init__(self, connect, kind, host, port, forward_head=b"", body_length=0):
        self.connect = connect            # True: a CONNECT tunnel; False: forward one request
        self.kind = kind                  # "name" or "addr" (proxy_match.parse_host)
        self.host = host
        self.port = port
        self.forward_head = forward_head  # the head to send upstream (forwarding only)
        self.body_length = body_length    # request body bytes that follow the head


def _port(text: bytes) -> int:
    if not text or len(text) > 5 or not text.isdigit():
        raise HttpError(400, "the port is not a number in 1-65535")
    port = int(text)
    if not 1 <= port <= 65535:
        raise HttpError(400, "the port is not a number in 1-65535")
    return port


def authority(text: bytes, default_port: int | None) -> tuple[str, object, int]:
    """``host[:port]`` or ``[v6][:port]`` -> (kind, host, port)."""
    if text.startswith(b"["):
        end = text.find(b"]")
        if end < 0:
            raise HttpError(400, "malformed IPv6 address")
        host, rest = text[:end + 1], text[end + 1:]
        if rest and not rest.startswith(b":"):
            raise HttpError(400, "malformed authority")
        port_text = rest[1:] if rest else None
    elif text.count(b":") > 1:
        raise HttpError(400, "an IPv6 address must be in brackets")
    else:
        host, colon, port_text = text.partition(b":")
        port_text = port_text if colon else None
    if port_text is None:
        if default_port is None:
            raise HttpError(400, "CONNECT needs host:port")
        port = default_port
    else:
        port = _port(port_text)
    if b"@" in host or not host:
        raise HttpError(400, "malformed authority")
    try:
        kind, value = match.parse_host(host.decode("utf-8"))
    except UnicodeDecodeError:
        raise HttpError(400, "the host name is not UTF-8") from None
    except match.BadTarget as e:
        raise HttpError(400, str(e)) from None
    return kind, value, port


def _same_host(a: tuple, b: tuple) -> bool:
    if a[0] != b[0] or a[2] != b[2]:
        return False
    if a[0] == "addr":
        return match.canonical_addr(*a[1]) == match.canonical_addr(*b[1])
    return a[1] == b[1]


def parse_request(head: bytes) -> Request:
    """Parse a head (everything before the blank line) or raise HttpError."""
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        raise HttpError(400, "bare CR or LF in the request head")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(505 if version.startswith(b"HTTP/") else 400, "only HTTP/1.0 and HTTP/1.1")
    if not method or not _TOKEN.issuperset(method):
        raise HttpError(400, "malformed method")
    headers = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise HttpError(400, "folded header lines are not accepted")
        name, colon, value = line.partition(b":")
        if not colon or not name or not _TOKEN.issuperset(name):
            raise HttpError(400, "malformed header line")
        value = value.strip(b" \t")
        if b"\x00" in value:
            raise HttpError(400, "malformed header value")
        headers.append((name.lower(), name, value))
    hosts = [v for n, _, v in headers if n == b"host"]
    if len(hosts) > 1:
        raise HttpError(400, "more than one Host header")
    if method == b"CONNECT":
        kind, host, port = authority(target, None)
        # A Host without a port stands for the target's port: only the name must agree.
        if hosts and not _same_host(authority(hosts[0], port), (kind, host, port)):
            raise HttpError(400, "the Host header names another host than the CONNECT target")
        return Request(True, kind, host, port)
    if method in (b"TRACE", b"TRACK"):
        raise HttpError(405, "TRACE is not forwarded")
    if target[:7].lower() != b"http://":
        if target.startswith(b"/") or target == b"*":
            raise HttpError(400, "not a proxy request (the target must be an absolute http:// URI)")
        raise HttpError(400, "only http:// URIs are forwarded; use CONNECT for others")
    rest = target[7:]
    cut = len(rest)
    for sep in (b"/", b"?", b"#"):
        i = rest.find(sep)
        if 0 <= i < cut:
            cut = i
    kind, host, port = authority(rest[:cut], 80)
    path = rest[cut:].split(b"#", 1)[0]
    if not path.startswith(b"/"):
        path = b"/" + path
    if hosts:
        if not _same_host(authority(hosts[0], 80), (kind, host, port)):
            raise HttpError(400, "the Host header does not agree with the request URI")
    elif version == b"HTTP/1.1":
        raise HttpError(400, "an HTTP/1.1 request needs a Host header")
    return Request(False, kind, host, port, *_forward_head(method, path, version, headers, rest[:cut]))


_FRAMING = frozenset((b"host", b"content-length", b"transfer-encoding"))
"""Headers that say where a request goes and where its body ends: never hop-by-hop."""


def _forward_head(method, path, version, headers, authority_text) -> tuple[bytes, int]:
    lengths = set()
    listed = set()
    for name, _, value in headers:
        if name == b"transfer-encoding":
            raise HttpError(411, "request bodies need a Content-Length (no transfer coding)")
        if name == b"content-length":
            lengths.update(v.strip(b" \t") for v in value.split(b","))
        elif name == b"connection":
            listed.update(v.strip(b" \t").lower() for v in value.split(b","))
    if len(lengths) > 1 or any(not v.isdigit() or len(v) > 15 for v in lengths):
        raise HttpError(400, "malformed Content-Length")
    if listed & _FRAMING:
        # Dropped as hop-by-hop, the origin server would frame the body (or find the host)
        # otherwise than the proxy did: the body read as another request, never checked.
        raise HttpError(400, "the Connection header names Host, Content-Length or Transfer-Encoding")
    body = int(lengths.pop()) if lengths else 0
    out = [method, b" ", path, b" ", version, b"\r\n"]
    if not any(n == b"host" for n, _, _ in headers):
        out += [b"Host: ", authority_text, b"\r\n"]
    length_sent = False
    for name, raw, value in headers:
        if name == b"content-length":
            if not length_sent:
                # One Content-Length, the length the proxy forwards (``3, 3`` goes as ``3``).
                out += [raw, b": ", str(body).encode(), b"\r\n"]
                length_sent = True
        elif name not in _HOP and name not in listed:
            out += [raw, b": ", value, b"\r\n"]
    # One request per connection: every request on a proxy connection is checked, and
    # a second request on the same upstream connection would skip the check.
    out.append(b"Connection: close\r\n\r\n")
    return b"".join(out), body


# --- SOCKS5 (RFC 1928) ----------------------------------------------------------------

SOCKS_VERSION = 5
NO_AUTH = 0
NO_ACCEPTABLE = b"\x05\xff"
CHOSEN_NO_AUTH = b"\x05\x00"
# Reply codes.
S_OK, S_FAILURE, S_NOT_ALLOWED, S_NET_UNREACHABLE, S_HOST_UNREACHABLE = 0, 1, 2, 3, 4
S_REFUSED, S_TTL, S_COMMAND, S_ATYP = 5, 6, 7, 8
ATYP_V4, ATYP_NAME, ATYP_V6 = 1, 3, 4
# SOCKS4 "request rejected or failed": the reply a SOCKS4 client understands.
SOCKS4_REJECTED = b"\x00\x5b\x00\x00\x00\x00\x00\x00"


def socks_reply(code: int) -> bytes:
    """A reply with a zero bound address: the proxy's own outbound address is not told."""
    return bytes((5, code, 0, ATYP_V4, 0, 0, 0, 0, 0, 0))
