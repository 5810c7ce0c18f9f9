"""The proxy's server: accepts connections, speaks HTTP or SOCKS5 with each client, checks
the target against the rules, connects to an address it checked, relays.

Runs in the process that ``proxy.Proxy`` forks (or in a thread of the caller's process).
One thread per connection (``_thread``: no ``threading`` machinery is needed); the accept
loop polls the listeners and a wake-up pipe. Nothing of the traffic is logged or kept:
only refusals, as (host, port, reason) with sbxc's own wording.

Sockets are ``_socket.socket`` objects (``socket.socket`` is a subclass, so callers may pass
either): the ``socket`` module imports ``enum``, ``selectors`` and ``collections``, about
7 ms of CPU in the proxy process at every start, on CPUs the sandbox's start needs too.
"""
from __future__ import annotations

import _socket
import _thread
import os
import select
import sys
import time

from . import proxy_match as match
from . import proxy_proto as proto
from .proxy_relay import relay, tunnel

MAX_REFUSALS = 256
"""Distinct refusals kept for the report; further distinct ones are only counted."""


class Timeout(Exception):
    pass


class Closed(Exception):
    pass


class Failure(Exception):
    """The target cannot be reached; ``kind``: "rules", "resolve", "refused", "timeout",
    "unreachable", "busy" (the reply code each protocol gives depends on it)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(kind, reason)
        self.kind = kind
        self.reason = reason


_HTTP_STATUS = {"rules": 403, "busy": 503, "resolve": 502, "refused": 502, "unreachable": 502, "timeout": 504}
_SOCKS_CODE = {"rules": proto.S_NOT_ALLOWED, "busy": proto.S_FAILURE, "resolve": proto.S_HOST_UNREACHABLE,
               "refused": proto.S_REFUSED, "unreachable": proto.S_NET_UNREACHABLE,
               "timeout": proto.S_HOST_UNREACHABLE}


class _Reader:
    """Bytes from a client within one deadline for the whole handshake (a client that
    sends one byte a minute cannot hold a connection slot for longer)."""

    __slots__ = ("sock", "deadline", "buf")

    def __init__(self, sock, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()

    def _fill(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise Timeout from None
        if not data:
            raise Closed
        self.buf += data

    def first_byte(self) -> int:
        """Peek: the byte that tells the protocol, left in the buffer."""
        while not self.buf:
            self._fill()
        return self.buf[0]

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def head(self, limit: int) -> bytes:
        start = 0
        while True:
            end = self.buf.find(b"\r\n\r\n", start)
            if end >= 0:
                if end + 4 > limit:
                    break
                out = bytes(self.buf[:end])
                del self.buf[:end + 4]
                return out
            if len(self.buf) > limit:
                break
            start = max(0, len(self.buf) - 3)
            self._fill()
        raise proto.HttpError(431, f"the request head is larger than {limit} bytes")

    def rest(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


def _answer(conn, response: bytes) -> None:
    """Send a refusal the client can read: it may have sent more than was read (a
    pipelined TLS hello, the rest of an oversized head)."""
    conn.sendall(response)
    _lingering_close(conn)


def _lingering_close(conn) -> None:
    """End a forwarded request's client connection without losing the response. Bytes
    the client sent after its request (a pipelined next one) are still unread, and
    closing a socket with unread bytes sends a reset, which can make the client's kernel
    drop the response it has not read yet. So: send FIN, read and drop what comes until
    the client closes, for a bounded time and amount."""
    try:
        conn.shutdown(_socket.SHUT_WR)
        end = time.monotonic() + 2.0
        dropped = 0
        while dropped < (1 << 20):
            left = end - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            chunk = conn.recv(65536)
            if not chunk:
                break
            dropped += len(chunk)
    except OSError:
        pass


def default_resolver(host: str) -> list[str]:
    """The host's own resolver (getaddrinfo), once per request: the proxy connects to an
    address it got here and checked, never to the name again."""
    out = []
    for family, _, _, _, sockaddr in _socket.getaddrinfo(host, None, type=_socket.SOCK_STREAM):
        if family in (_socket.AF_INET, _socket.AF_INET6) and sockaddr[0] not in out:
            out.append(sockaddr[0])
    return out


def peer_uid(conn) -> int | None:
    """The uid owning the other end of a TCP connection on this host's loopback; None
    when it is not found (the client is gone). Asked of the kernel by the connection's
    exact addresses (sock_diag: one lookup, whatever the number of sockets), else read
    from /proc/net/tcp or tcp6."""
    try:
        peer, me = conn.getpeername(), conn.getsockname()
    except OSError:
        return None
    fam = conn.family
    praw = _socket.inet_pton(fam, peer[0].split("%", 1)[0])
    mraw = _socket.inet_pton(fam, me[0].split("%", 1)[0])
    uid = _diag_uid(fam, praw, peer[1], mraw, me[1])
    if uid is not None:
        return uid if uid >= 0 else None
    return _proc_uid(fam, praw, peer[1], mraw, me[1])


_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2


def _diag_uid(fam: int, src: bytes, sport: int, dst: bytes, dport: int) -> int | None:
    """The uid of the TCP socket bound to (src, sport) and connected to (dst, dport), from
    NETLINK_SOCK_DIAG: -1 when the kernel has none, None when the lookup cannot be made."""
    pad = bytes(16 - len(src))
    sockid = (sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + src + pad + dst + pad
              + bytes(4) + b"\xff" * 8)  # any interface; INET_DIAG_NOCOOKIE
    # inet_diag_req_v2: family, protocol, ext, pad, states (all), the socket's id.
    req = bytes((fam, 6, 0, 0)) + (0xFFFFFFFF).to_bytes(4, "little") + sockid
    msg = ((16 + len(req)).to_bytes(4, sys.byteorder) + _SOCK_DIAG_BY_FAMILY.to_bytes(2, sys.byteorder)
           + (1).to_bytes(2, sys.byteorder) + bytes(8) + req)  # NLM_F_REQUEST: one exact lookup
    try:
        nl = _socket.socket(16, _socket.SOCK_DGRAM, 4)  # AF_NETLINK, NETLINK_SOCK_DIAG
    except OSError:
        return None
    try:
        nl.settimeout(1.0)
        nl.send(msg)
        data = nl.recv(8192)
    except OSError:
        return None
    finally:
        nl.close()
    if len(data) < 16:
        return None
    kind = int.from_bytes(data[4:6], sys.byteorder)
    if kind == _NLMSG_ERROR:
        return -1
    if kind != _SOCK_DIAG_BY_FAMILY or len(data) < 16 + 72 + 4:
        return None
    # inet_diag_msg: family, state, timer, retrans, the id (48), expires, rqueue, wqueue, uid.
    return int.from_bytes(data[16 + 64:16 + 68], sys.byteorder)


def _proc_uid(fam: int, src: bytes, sport: int, dst: bytes, dport: int) -> int | None:
    def key(raw: bytes, port: int) -> str:
        # The kernel prints each 32-bit word of the address in host byte order.
        words = "".join(f"{int.from_bytes(raw[i:i + 4], sys.byteorder):08X}" for i in range(0, len(raw), 4))
        return f"{words}:{port:04X}"

    want = (key(src, sport), key(dst, dport))
    try:
        with open("/proc/net/tcp6" if fam == _socket.AF_INET6 else "/proc/net/tcp", "rb") as f:
            table = f.read().decode("ascii", "replace")
    except OSError:
        return None
    for line in table.split("\n")[1:]:
        fields = line.split()
        if len(fields) > 7 and (fields[1], fields[2]) == want:
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None


def own_address(family: int, packed: bytes) -> bool:
    """Is a connection to this address delivered to this host itself? Yes for an address
    that can be bound (EADDRNOTAVAIL otherwise), and for one the kernel routes as local
    or anycast without its being assigned (a local route over a whole IPv6 prefix, which
    some hosts use to answer for it; bind() refuses those): both asked of the kernel,
    nothing is sent. A host that allows binding foreign addresses
    (net.ipv4.ip_nonlocal_bind) makes every address look local: then only address rules
    reach any address, which narrows, never widens."""
    fam, raw = match.canonical_addr(family, packed)
    try:
        s = _socket.socket(fam, _socket.SOCK_DGRAM)
    except OSError:
        return False
    try:
        s.bind((match.addr_text(fam, raw), 0))
        return True
    except OSError:
        pass
    finally:
        s.close()
    return route_type(fam, raw) in (_RTN_LOCAL, _RTN_ANYCAST)


_RTM_NEWROUTE, _RTM_GETROUTE, _NLM_F_REQUEST, _RTA_DST = 24, 26, 1, 1
_RTN_LOCAL, _RTN_ANYCAST = 2, 4


def route_type(fam: int, raw: bytes) -> int:
    """The type of the route the kernel would take to ``raw`` (RTM_GETROUTE on a netlink
    socket: RTN_UNICAST 1, RTN_LOCAL 2, RTN_ANYCAST 4 ...), or -1 when there is none or
    the question cannot be asked."""
    attr = (4 + len(raw)).to_bytes(2, "little") + _RTA_DST.to_bytes(2, "little") + raw
    body = bytes([fam, len(raw) * 8, 0, 0, 0, 0, 0, 0]) + bytes(4) + attr
    msg = (16 + len(body)).to_bytes(4, "little") + _RTM_GETROUTE.to_bytes(2, "little") \
        + _NLM_F_REQUEST.to_bytes(2, "little") + (1).to_bytes(4, "little") + bytes(4) + body
    try:
        s = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    except OSError:
        return -1
    try:
        s.settimeout(2.0)
        s.sendto(msg, (0, 0))
        reply = s.recv(65536)
    except OSError:
        return -1
    finally:
        s.close()
    if len(reply) < 16 + 12 or int.from_bytes(reply[4:6], "little") != _RTM_NEWROUTE:
        return -1  # NLMSG_ERROR: no route (ENETUNREACH), or anything else
    return reply[16 + 7]


class Server:
    def __init__(self, rules: match.Rules, listeners: list, limits, resolver=None, peer_uid: int | None = None):
        self.rules = rules
        self.listeners = listeners
        self.peer_uid = peer_uid
        """With a uid: a TCP client is served only when its socket is that user's (the
        caller's; a listener on the host's loopback, which every local user reaches)."""
        self.foreign = 0
        """TCP clients of other users, closed unserved."""
        self.limits = limits
        self.resolver = resolver or default_resolver
        self.lock = _thread.allocate_lock()
        self.active = 0
        self.conns: set = set()
        self.refusals: dict[tuple[str, int, str], None] = {}
        self.refusal_count = 0
        self.failure: str | None = None
        self.stopping = False
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # Held from here until the accept loop has returned: stop() waits on it, also when
        # it comes before the loop's thread has started.
        self.serving = _thread.allocate_lock()
        self.serving.acquire()

    # --- bookkeeping ---------------------------------------------------------------

    def note(self, host: str, port: int, reason: str) -> None:
        with self.lock:
            self.refusal_count += 1
            key = (host, port, reason)
            if key not in self.refusals and len(self.refusals) < MAX_REFUSALS:
                self.refusals[key] = None

    def refused(self) -> list[tuple[str, int, str]]:
        with self.lock:
            return list(self.refusals)

    # --- accepting -----------------------------------------------------------------

    def serve(self) -> None:
        """The accept loop; run it once, in a thread of its own."""
        try:
            if not self.stopping:
                self._accept_loop()
        except BaseException as e:  # noqa: BLE001 - reported to the caller, not logged
            self.failure = f"the proxy's accept loop failed ({type(e).__name__})"
        finally:
            self.serving.release()

    def _accept_loop(self) -> None:
        poller = select.poll()
        by_fd = {}
        for lst in self.listeners:
            lst.setblocking(False)
            poller.register(lst.fileno(), select.POLLIN)
            by_fd[lst.fileno()] = lst
        poller.register(self.wake_r, select.POLLIN)
        while not self.stopping:
            for fd, _ in poller.poll():
                if fd in by_fd and not self.stopping:
                    self._accept(by_fd[fd])

    def _accept(self, lst) -> None:
        limit = self.limits.max_connections
        # A few connections over the limit still get a proper refusal (HTTP 503, a SOCKS
        # failure reply) within a short deadline; beyond those they are reset at once.
        overflow = max(4, limit // 8)
        while True:
            try:
                fd, _ = lst._accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE and the like: the client sees a reset; the loop goes on
            conn = _socket.socket(lst.family, lst.type, lst.proto, fd)
            if self.peer_uid is not None and lst.family != _socket.AF_UNIX and \
                    peer_uid(conn) != self.peer_uid:
                # Another user's process (or one that is gone already): it gets nothing of
                # this run's rules, takes no slot, and leaves nothing in the run's report.
                with self.lock:
                    self.foreign += 1
                conn.close()
                continue
            with self.lock:
                n = self.active
                if n < limit + overflow:
                    self.active += 1
                    self.conns.add(conn)
            if n >= limit + overflow:
                self.note("", 0, f"too many connections (limit {limit})")
                conn.setsockopt(_socket.SOL_SOCKET, _socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
                continue
            try:
                _thread.start_new_thread(self._serve_conn, (conn, n >= limit))
            except RuntimeError:
                self._done(conn)

    def _done(self, conn) -> None:
        conn.close()
        with self.lock:
            self.active -= 1
            self.conns.discard(conn)

    def stop(self, wait: float = 2.0) -> None:
        """Stop accepting, cut every connection; wait up to ``wait`` s for the threads."""
        self.stopping = True
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass
        with self.serving:  # the accept loop has returned
            pass
        for lst in self.listeners:
            lst.close()
        with self.lock:
            conns = list(self.conns)
        for conn in conns:
            try:
                conn.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass
        end = time.monotonic() + wait
        while self.active and time.monotonic() < end:
            time.sleep(0.005)
        os.close(self.wake_r)
        os.close(self.wake_w)

    # --- one connection ------------------------------------------------------------

    def _serve_conn(self, conn, busy: bool) -> None:
        upstream = None
        try:
            limits = self.limits
            deadline = time.monotonic() + (min(2.0, limits.handshake_timeout) if busy else limits.handshake_timeout)
            reader = _Reader(conn, deadline)
            if conn.family != _socket.AF_UNIX:
                conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            first = reader.first_byte()
            if first == proto.SOCKS_VERSION:
                upstream = self._socks(conn, reader, busy)
            elif first == 4:
                conn.sendall(proto.SOCKS4_REJECTED)
                self.note("", 0, "SOCKS4 is not supported (use SOCKS5 or HTTP)")
            else:
                upstream = self._http(conn, reader, busy)
        except (Timeout, Closed, OSError):
            pass
        finally:
            if upstream is not None:
                upstream.close()
            self._done(conn)

    def _http(self, conn, reader: _Reader, busy: bool):
        try:
            req = proto.parse_request(reader.head(self.limits.max_header_bytes))
        except proto.HttpError as e:
            self.note("", 0, f"HTTP {e.status}: {e.reason}")
            _answer(conn, proto.http_response(e.status, e.reason))
            return None
        except Timeout:
            _answer(conn, proto.http_response(408, "the request head did not arrive in time"))
            return None
        try:
            upstream = self.open(req.kind, req.host, req.port, busy)
        except Failure as e:
            shown = f"{match.display(req.kind, req.host)}:{req.port}"
            _answer(conn, proto.http_response(_HTTP_STATUS[e.kind], f"{shown}: {e.reason}"))
            return None
        conn.settimeout(self.limits.idle_timeout)
        early = reader.rest()
        if req.connect:
            conn.sendall(proto.CONNECT_OK)
            if early:
                upstream.sendall(early)
            tunnel(conn, upstream, self.limits.idle_timeout)
        else:
            body = early[:req.body_length]
            upstream.sendall(req.forward_head + body)
            relay(conn, upstream, self.limits.idle_timeout, upload_budget=req.body_length - len(body),
                  end_with_download=True)
            _lingering_close(conn)
        return upstream

    def _socks(self, conn, reader: _Reader, busy: bool):
        _, count = reader.exact(2)
        if proto.NO_AUTH not in reader.exact(count):
            conn.sendall(proto.NO_ACCEPTABLE)
            self.note("", 0, "the SOCKS5 client offers no method without authentication")
            return None
        conn.sendall(proto.CHOSEN_NO_AUTH)
        version, command, _, atyp = reader.exact(4)
        try:
            if atyp == proto.ATYP_V4:
                kind, host = "addr", (_socket.AF_INET, reader.exact(4))
            elif atyp == proto.ATYP_V6:
                kind, host = "addr", match.canonical_addr(_socket.AF_INET6, reader.exact(16))
            elif atyp == proto.ATYP_NAME:
                kind, host = match.parse_host(reader.exact(reader.exact(1)[0]).decode("utf-8"))
            else:
                conn.sendall(proto.socks_reply(proto.S_ATYP))
                self.note("", 0, "SOCKS5 address type not supported")
                return None
        except (match.BadTarget, UnicodeDecodeError) as e:
            reader.exact(2)
            conn.sendall(proto.socks_reply(proto.S_HOST_UNREACHABLE))
            reason = str(e) if isinstance(e, match.BadTarget) else "the host name is not UTF-8"
            self.note("", 0, reason)  # no host to name (as for HTTP): counted, not shown
            return None
        port = int.from_bytes(reader.exact(2), "big")
        if version != proto.SOCKS_VERSION or command != 1:
            conn.sendall(proto.socks_reply(proto.S_COMMAND))
            self.note(match.display(kind, host), port, "only the SOCKS5 CONNECT command is supported")
            return None
        try:
            upstream = self.open(kind, host, port, busy)
        except Failure as e:
            conn.sendall(proto.socks_reply(_SOCKS_CODE[e.kind]))
            return None
        conn.settimeout(self.limits.idle_timeout)
        conn.sendall(proto.socks_reply(proto.S_OK))
        early = reader.rest()
        if early:
            upstream.sendall(early)
        tunnel(conn, upstream, self.limits.idle_timeout)
        return upstream

    # --- the decision and the connection -------------------------------------------

    def open(self, kind: str, host, port: int, busy: bool = False):
        """A connected socket to (kind, host, port), or Failure (refusals are noted)."""
        shown = match.display(kind, host)
        if busy:
            reason = f"too many connections (limit {self.limits.max_connections})"
            self.note(shown, port, reason)
            raise Failure("busy", reason)
        rule, why = self.rules.admit(kind, host, port)
        if rule is None:
            self.note(shown, port, f"{why}; to allow it: {match.rule_hint(kind, host, port)}")
            raise Failure("rules", why)
        if kind == "addr":
            addrs = [host]
        else:
            try:
                found = [match.parse_addr(a) for a in self.resolver(host)]
            except (OSError, UnicodeError):
                raise Failure("resolve", "the name does not resolve") from None
            found = [a for a in found if a is not None]
            if not found:
                raise Failure("resolve", "the name does not resolve")
            addrs = [a for a in found if self.rules.usable(a[0], a[1], port)]
            # A public address of this host itself (an interface's) reaches the host's own
            # services as loopback would: only an address rule opens it.
            own = [a for a in addrs if not self.rules.address_allowed(a[0], a[1], port) and own_address(*a)]
            if own:
                addrs = [a for a in addrs if a not in own]
            if not addrs and own:
                first = match.display("addr", own[0])
                why = f"resolves only to this host's own addresses ({first})"
                hint = match.rule_hint("addr", own[0], port)
                self.note(shown, port, f"{why}; if that is meant, add: {hint}")
                raise Failure("rules", why)
            if not addrs:
                first = match.display("addr", found[0])
                why = f"resolves only to non-public addresses ({first})"
                hint = match.rule_hint("addr", found[0], port)
                self.note(shown, port, f"{why}; if that is meant, add: {hint}")
                raise Failure("rules", why)
        return self._connect(addrs, port)

    def _connect(self, addrs, port: int):
        end = time.monotonic() + self.limits.connect_timeout
        kind = "unreachable"
        for family, packed in addrs:
            left = end - time.monotonic()
            if left <= 0:
                kind = "timeout"
                break
            sock = _socket.socket(family, _socket.SOCK_STREAM)
            sock.settimeout(left)
            address = (match.addr_text(family, packed), port)
            try:
                sock.connect(address)
            except TimeoutError:
                sock.close()
                kind = "timeout"
                continue
            except ConnectionRefusedError:
                sock.close()
                kind = "refused"
                continue
            except OSError:
                sock.close()
                continue
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            sock.settimeout(self.limits.idle_timeout)
            return sock
        raise Failure(kind, {"timeout": "the connection timed out", "refused": "the connection was refused",
                             "unreachable": "the host is unreachable"}[kind])
