"""The filtering proxy that enforces host rules (``allow HOST[:PORT]``, SPEC §2 and §5).

It runs outside the sandbox for the life of one run and listens on a loopback TCP port
(Landlock lets the command connect to that port only), on a socket handed to it later
(``deferred``: bwrap's, made inside the sandbox's network namespace, ``proxy_netns``),
and/or on a Unix socket. It speaks HTTP CONNECT, absolute-URI HTTP forwarding and SOCKS5, and
connects only where a rule allows, to an address it resolved and checked itself.

    proxy = Proxy([("example.org", None, "policy.yaml:9:5: allow example.org")],
                  unix_path=path, tcp_host=None)
    proxy.start()        # before the command is forked
    ...                  # the command runs
    proxy.stop()
    proxy.refused()      # [(host, port, reason), ...] for the feedback after the run

Where it runs (``mode``): ``"process"`` (the default, what ``sbxc exec`` uses) forks a
child that serves; ``"thread"`` serves from a thread of the caller. ``sbxc exec`` is one
thread that forks the command after the proxy has started. A thread in that process would
make every later fork a fork of a multi-threaded process: the child, until it execs, runs
Python code (the runner's ``child_setup``) while another thread may have held a lock
(the allocator's, the import lock, a resolver's) at the moment of the fork. A forked
child keeps exec single-threaded and costs exec about one ``fork``: the listening sockets
are made here first, so the address is known and connections queue in the backlog while
the child imports ``socket`` and starts up in parallel with the sandbox's own set-up.

Imported on the ``exec`` path when host rules are in use: this module imports only
builtins at import time (``os``, ``sys``, ``_socket``); the rest is loaded by ``start`` (thread
mode) or in the child.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

import _socket

_REPORT_TIMEOUT = 5.0


class Limits:
    """Bounds of one proxy (defaults suit package managers and git over HTTPS)."""

    __slots__ = ("max_connections", "idle_timeout", "handshake_timeout", "connect_timeout", "max_header_bytes")

    def __init__(self, max_connections: int = 128, idle_timeout: float = 300.0, handshake_timeout: float = 30.0,
                 connect_timeout: float = 10.0, max_header_bytes: int = 32768):
        self.max_connections = max_connections
        """Client connections served at once; a few more get a refusal, the rest a reset."""
        self.idle_timeout = idle_timeout
        """Seconds without a byte in either direction before a relayed connection is cut."""
        self.handshake_timeout = handshake_timeout
        """Seconds for a client to send its whole request head (HTTP) or SOCKS handshake."""
        self.connect_timeout = connect_timeout
        """Seconds to connect upstream, over all addresses tried."""
        self.max_header_bytes = max_header_bytes
        """Largest HTTP request head; larger gets 431."""


def _loopback(host: str) -> bool:
    try:
        return _socket.inet_pton(_socket.AF_INET, host)[0] == 127
    except OSError:
        pass
    try:
        return _socket.inet_pton(_socket.AF_INET6, host) == bytes(15) + b"\x01"
    except OSError:
        return False


class Proxy:
    """One run's proxy. ``rules``: an iterable of ``(host_pattern, ports, source)``
    (ports: an iterable of ints, or None for 443 and 80; source: the rule's text and
    place, kept for feedback). A rule the proxy cannot use raises ValueError here.
    ``resolver``: a function host -> address strings, for tests; the default is
    ``getaddrinfo``."""

    def __init__(self, rules, *, unix_path: str | None = None, tcp_host: str | None = "127.0.0.1",
                 tcp_port: int = 0, limits: Limits | None = None, resolver=None, mode: str = "process",
                 deferred: bool = False):
        from .proxy_match import Rules

        if unix_path is None and tcp_host is None and not deferred:
            raise ValueError("the proxy needs a Unix socket path or a TCP host")
        if deferred and mode != "process":
            raise ValueError("a proxy whose listener comes later runs as a process")
        if tcp_host is not None and not _loopback(tcp_host):
            raise ValueError(f"the proxy listens on loopback only, not {tcp_host!r}")
        if mode not in ("process", "thread"):
            raise ValueError(f"mode {mode!r}: 'process' or 'thread'")
        self.rules = Rules(rules)
        self.limits = limits or Limits()
        self.unix_path = unix_path
        self.tcp_address: tuple[str, int] | None = None
        self.failure: str | None = None
        """None, or why the proxy stopped serving before ``stop`` (fixed text)."""
        self._tcp = (tcp_host, tcp_port) if tcp_host is not None else None
        self._resolver = resolver
        self._mode = mode
        self._deferred = deferred
        self._unix_ino = None
        self._pid = 0
        self._ctl = None
        self._server = None
        self._refused: list[tuple[str, int, str]] = []
        self.refused_count = 0
        """Refusals in all, also those beyond the distinct ones kept."""

    def _peer_uid(self):
        """The uid a TCP client must have: the caller's, for a listener of its own on the
        host's loopback (Landlock, macOS: every local user reaches it); None for one made
        in the sandbox's network namespace (``deferred``: only the sandbox reaches it)
        and where /proc/net/tcp cannot tell (not Linux)."""
        if self._deferred or not sys.platform.startswith("linux"):
            return None
        return os.getuid()

    @property
    def address(self):
        """The TCP (host, port) when listening on TCP, else the Unix socket path."""
        return self.tcp_address if self.tcp_address is not None else self.unix_path

    def _listen(self) -> list:
        out = []
        try:
            if self.unix_path is not None:
                lst = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                out.append(lst)
                # Created 0600 from the start: the umask applies to bind's socket file.
                old = os.umask(0o177)
                try:
                    lst.bind(self.unix_path)
                finally:
                    os.umask(old)
                self._unix_ino = os.lstat(self.unix_path).st_ino
                lst.listen(128)
            if self._tcp is not None:
                host, port = self._tcp
                family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
                lst = _socket.socket(family, _socket.SOCK_STREAM)
                out.append(lst)
                lst.bind((host, port))
                lst.listen(128)
                self.tcp_address = lst.getsockname()[:2]
        except BaseException:
            for lst in out:
                lst.close()
            self._unlink()
            raise
        return out

    def start(self) -> None:
        """Listen, then serve in a forked child (or a thread); returns at once. OSError
        when a listener cannot be made (the path exists, the port is taken)."""
        listeners = self._listen()
        if self._mode == "thread":
            import _thread

            from .proxy_server import Server

            import socket

            socks = [socket.socket(fileno=lst.detach()) for lst in listeners]
            self._server = Server(self.rules, socks, self.limits, self._resolver, self._peer_uid())
            _thread.start_new_thread(self._server.serve, ())
            return
        import _signal

        parent_end, child_end = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # Until the child has set its own dispositions it has the parent's: a Ctrl-C in
        # that window would end the proxy. Blocked across the fork, a signal waits until
        # the child's handlers are in place (and is then ignored or handled as theirs).
        blocked = {getattr(_signal, n) for n in _CHILD_SIGNALS if hasattr(_signal, n)}
        old_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, blocked)
        try:
            pid = os.fork()
        except BaseException:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, old_mask)
            for s in (parent_end, child_end, *listeners):
                s.close()
            self._unlink()
            raise
        if pid == 0:
            status = 70
            try:
                status = _child(child_end, listeners, self, old_mask)
            finally:
                os._exit(status)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old_mask)
        child_end.close()
        for lst in listeners:
            lst.close()
        self._pid = pid
        self._ctl = parent_end

    def give_listener(self, lst) -> None:
        """Hand the started proxy (``deferred=True``) the listening socket it serves: one
        made elsewhere, e.g. inside a sandbox's network namespace (``proxy_netns``). The
        caller keeps and closes its own descriptor. OSError when the proxy is gone."""
        if self._ctl is None or not self._deferred:
            raise OSError("the proxy does not wait for a listener")
        self._ctl.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, lst.fileno().to_bytes(4, sys.byteorder))])

    def stop(self) -> None:
        """Stop serving, cut open connections, collect the refusals. Idempotent."""
        if self._server is not None:
            self._server.stop()
            self._refused = self._server.refused()
            self.refused_count = self._server.refusal_count
            self.failure = self._server.failure
            self._server = None
        elif self._pid:
            self._stop_child()
        self._unlink()

    def refused(self) -> list[tuple[str, int, str]]:
        """Distinct (host, port, reason) refused during the run, first seen first; complete
        after ``stop``. ``host`` is an ASCII name or an address ("" when the request named
        none): never bytes of the request, so it is safe to print."""
        if self._server is not None:
            return self._server.refused()
        return list(self._refused)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _stop_child(self) -> None:
        import time

        ctl, self._ctl = self._ctl, None
        data = bytearray()
        try:
            ctl.setblocking(False)
            ready = ctl.recv(1, _socket.MSG_PEEK)
        except OSError:
            ready = b""
        if not ready:
            # The child never got to serving (a command that ended before the proxy had
            # started): nothing was accepted, so nothing was refused. It is ended rather
            # than waited for, which would cost a short command the proxy's whole start-up.
            ctl.close()
            try:
                os.kill(self._pid, 9)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._pid = 0
            return
        ctl.setblocking(True)
        try:
            ctl.shutdown(_socket.SHUT_WR)  # the child's cue: EOF
            ctl.settimeout(_REPORT_TIMEOUT)
            while True:
                chunk = ctl.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            self.failure = "the proxy did not report"
        finally:
            ctl.close()
        end = time.monotonic() + _REPORT_TIMEOUT
        status = None
        # The child exits right after its report: a pidfd says when, with no polling delay.
        try:
            pidfd = os.pidfd_open(self._pid)
        except OSError:
            pidfd = -1
        try:
            while status is None:
                try:
                    pid, st = os.waitpid(self._pid, os.WNOHANG)
                except ChildProcessError:
                    # Reaped by the caller's own wait for any child (a subreaper's loop): its
                    # status is lost; the report above decides.
                    pid, st = self._pid, 0
                if pid:
                    status = st
                elif time.monotonic() > end:
                    os.kill(self._pid, 9)
                    status = os.waitpid(self._pid, 0)[1]
                elif pidfd >= 0:
                    import select

                    poller = select.poll()
                    poller.register(pidfd, select.POLLIN)
                    poller.poll(max(1, int((end - time.monotonic()) * 1000)))
                else:
                    time.sleep(0.002)
        finally:
            if pidfd >= 0:
                os.close(pidfd)
        self._pid = 0
        self._read_report(bytes(data))
        if os.waitstatus_to_exitcode(status) != 0 and self.failure is None:
            self.failure = "the proxy process ended abnormally"

    def _read_report(self, data: bytes) -> None:
        for line in data.decode("ascii", "replace").split("\n"):
            parts = line.split("\t")
            if parts[0] == "R" and len(parts) == 4 and parts[2].isascii() and parts[2].isdigit():
                self._refused.append((parts[1], int(parts[2]), parts[3]))
            elif parts[0] == "N" and len(parts) == 2 and parts[1].isascii() and parts[1].isdigit():
                self.refused_count = int(parts[1])
            elif parts[0] == "F" and len(parts) == 2:
                self.failure = parts[1]

    def _unlink(self) -> None:
        # Only the socket this proxy made: the path may have been replaced meanwhile.
        if self._unix_ino is None:
            return
        try:
            if os.lstat(self.unix_path).st_ino == self._unix_ino:
                os.unlink(self.unix_path)
        except OSError:
            pass
        self._unix_ino = None


def _quiet_descriptors(keep: set[int]) -> None:
    """Point every inherited descriptor but ``keep`` at /dev/null. Not closed: Python
    objects inherited from the parent may still own those numbers, and a collected one
    would close whatever the number holds by then (a connection of the proxy); a
    number kept on /dev/null cannot be handed out again. The proxy must not hold the
    parent's pipes (the command's stderr relay, bwrap's status pipe): their readers wait
    for every writer to go."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")]
    except OSError:
        fds = range(3, 1024)
    for fd in fds:
        if fd != null and fd not in keep:
            try:
                os.dup2(null, fd, inheritable=fd < 3)
            except OSError:
                pass
    os.close(null)


# Signals whose disposition the child sets: the first three ignored, the rest default.
_CHILD_SIGNALS = ("SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGTERM", "SIGCHLD")


def _child(ctl, listeners, proxy: Proxy, mask) -> int:
    """The forked proxy process: serve until the parent closes its end of ``ctl`` (also
    when the parent dies), then report the refusals on ``ctl``."""
    import _signal

    _quiet_descriptors({ctl.fileno(), *(lst.fileno() for lst in listeners)})
    # A Ctrl-C in the terminal reaches the whole foreground process group; the command
    # may still need the network to finish, and the parent ends the proxy after it.
    _signal.set_wakeup_fd(-1)
    for name in _CHILD_SIGNALS:
        num = getattr(_signal, name, None)
        if num is not None:
            _signal.signal(num, _signal.SIG_IGN if name in _CHILD_SIGNALS[:3] else _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    if proxy._deferred:
        listeners = _receive_listener(ctl)
        if listeners is None:
            return 0  # the run ended (or failed) before the sandbox had its listener
    if not _first_client(ctl, listeners):
        return 0  # the run ended before anything connected: nothing served, nothing refused
    import _thread

    from .proxy_server import Server

    server = Server(proxy.rules, listeners, proxy.limits, proxy._resolver, proxy._peer_uid())
    _thread.start_new_thread(server.serve, ())
    try:
        # Ready: from now on a refusal can happen, so the parent waits for the report.
        ctl.sendall(b"S\n")
    except OSError:
        pass
    try:
        while ctl.recv(4096):
            pass
    except OSError:
        pass
    server.stop(wait=0.2)
    proxy._unlink()
    lines = [f"R\t{_field(h)}\t{p}\t{_field(r)}\n" for h, p, r in server.refused()]
    lines.append(f"N\t{server.refusal_count}\n")
    if server.failure:
        lines.append(f"F\t{_field(server.failure)}\n")
    try:
        ctl.sendall("".join(lines).encode("ascii", "replace"))
    except OSError:
        pass
    return 0


def _first_client(ctl, listeners) -> bool:
    """Wait until a client connects (True) or the parent ends the proxy (False). The
    server's modules are imported only then: ~10 ms of CPU that would otherwise compete
    with the sandbox's start on every run, also the many whose command never connects."""
    import select

    poller = select.poll()
    for lst in listeners:
        poller.register(lst.fileno(), select.POLLIN)
    poller.register(ctl.fileno(), select.POLLIN)
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        if any(fd == ctl.fileno() for fd, _ in events):
            return False  # end of file: stop() (or the parent is gone)
        if events:
            return True


def _receive_listener(ctl):
    """The listening socket the parent sends (``give_listener``), as a list of one; None
    at end of file. Only a listening TCP socket is served."""
    try:
        data, anc, _flags, _addr = ctl.recvmsg(1, _socket.CMSG_SPACE(4))
    except OSError:
        return None
    fds = [int.from_bytes(payload[i:i + 4], sys.byteorder)
           for level, kind, payload in anc if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
           for i in range(0, len(payload) - 3, 4)]
    if data != b"L" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return None
    lst = _socket.socket(fileno=fds[0])
    if lst.type != _socket.SOCK_STREAM or not lst.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN):
        lst.close()
        return None
    return [lst]


def _field(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")
