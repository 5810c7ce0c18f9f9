"""The proxy's listening socket, made inside a sandbox's network namespace (host rules):
bwrap's (below) and runc's (``oci_run``: between `runc create` and `runc start` the
container's first process waits on runc's exec fifo with its namespaces made, and sbxc,
a subreaper, is its parent; ``listen_in`` is called with sbxc's own pid as the launcher).

bwrap runs with ``--block-fd``: its child has made the namespaces (``--unshare-user``,
``--unshare-net``) and waits before it execs the command. sbxc learns the child's pid
from bwrap's status channel, and a short-lived process forked from sbxc joins that
child's user and network namespaces (``setns`` on a pidfd, Linux 5.8+), makes a TCP socket
bound to 127.0.0.1:PORT there, listens, and hands the socket back (SCM_RIGHTS). sbxc gives
it to the proxy, which accepts on it from outside; only then is bwrap let go. The command
finds the port listening from its first instruction, and the namespace still has loopback
alone: the proxy is the only way out, with no socket file or folder of the host bound in.

Kernel facts this relies on (checked on 6.x with bwrap 0.8.0, as root and unprivileged):

- bwrap is not setuid here: it makes a user namespace owned by the caller's euid. A
  process of the parent namespace with that euid has every capability in it
  (user_namespaces(7)), which ``setns(CLONE_NEWUSER)`` needs; the caller must be
  single-threaded (sbxc's process is: the proxy serves from a child process) and must
  not share its filesystem information (a forked process does not).
- Entering a user namespace cannot be undone, hence a process of its own, which exits
  once the socket is handed over. A socket stays in the network namespace it was made
  in, whichever process holds it later: the proxy's own connections upstream are made
  in the host's namespace.
- bwrap's child reads ``--block-fd`` after its mounts and after bringing ``lo`` up (seen
  on 0.8.0: while it waits, its root is the sandbox's and ``lo`` has IFF_UP). bind(2) to
  127.0.0.1 would succeed even with ``lo`` still down (the 127.0.0.0/8 local route exists
  in a new namespace from the start); ::1 would not (EADDRNOTAVAIL until ``lo`` is up),
  so only 127.0.0.1 is used, and the command's proxy variables name it.
- bwrap reads ``--block-fd`` to the first byte *or end of file*: closing it without a
  byte lets the command run. On any failure here bwrap (sbxc's own child, not yet
  waited for, so its pid cannot have been reused) is killed first.

Pid reuse: the child's pid comes from bwrap itself. The pidfd is opened first, then the
pid's parent is checked to be bwrap while the pidfd shows the process alive: the pidfd
then names bwrap's child, and setns on it enters exactly that process's namespaces.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

import _socket

_CLONE_NEWUSER = 0x10000000  # linux/sched.h
_CLONE_NEWNET = 0x40000000
_HANDOVER_TIMEOUT = 10.0


class NetnsError(Exception):
    """Why the listener could not be made (fixed text, safe to print)."""


def _setns(fd: int, kinds: int) -> None:
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        setns(fd, kinds)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, kinds) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        # The name, in parentheses, may itself hold ") ": the fields after the last one.
        return int(f.read().rpartition(b")")[2].split()[1])


def _alive(pidfd: int) -> bool:
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return not poller.poll(0)  # a pidfd becomes readable when its process has exited


class Joiner:
    """The helper process: forked by ``start`` (before bwrap has reported its child, so that
    its start-up, and on Python before 3.12 the ``ctypes`` import for setns, overlap
    bwrap's), then ``listen_in`` gives it the child's pidfd and gets the listener back.
    ``close`` ends it when it is not used."""

    def __init__(self):
        self._pid = 0
        self._conn = None

    def start(self) -> None:
        import _signal

        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # The helper runs none of sbxc's signal handlers (they forward signals into the
        # sandbox): every signal stays blocked in it until it exits.
        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
        try:
            pid = os.fork()
            if pid == 0:
                ours.close()
                _helper(theirs)  # never returns
        except OSError as e:
            ours.close()
            raise NetnsError(f"cannot fork ({e.strerror})") from None
        finally:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
            theirs.close()
        self._pid, self._conn = pid, ours

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # the helper reads end of file and exits
        if self._pid:
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass
            self._pid = 0

    def listen_in(self, launcher_pid: int, child_pid: int, port: int):
        """A listening ``_socket.socket`` on 127.0.0.1:``port`` in the network namespace of
        ``child_pid``, which must be a child of ``launcher_pid`` (bwrap; for runc, sbxc
        itself). NetnsError when not. The helper has ended when this returns."""
        try:
            pidfd = os.pidfd_open(child_pid)
        except OSError as e:
            raise NetnsError(f"the sandbox's first process is gone ({e.strerror})") from None
        try:
            try:
                if _parent_of(child_pid) != launcher_pid or not _alive(pidfd):
                    raise NetnsError("the sandbox's first process is not the launcher's child")
                kinds = _CLONE_NEWNET
                own, theirs = os.stat("/proc/self/ns/user"), os.stat(f"/proc/{child_pid}/ns/user")
                if (own.st_dev, own.st_ino) != (theirs.st_dev, theirs.st_ino):
                    kinds |= _CLONE_NEWUSER  # joining one's own user namespace is EINVAL
            except OSError as e:
                raise NetnsError(f"cannot read the sandbox's namespaces ({e.strerror})") from None
            conn = self._conn
            request = f"{kinds} {port}".encode()
            try:
                conn.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, pidfd.to_bytes(4, sys.byteorder))])
                conn.settimeout(_HANDOVER_TIMEOUT)
                data, anc, _flags, _addr = conn.recvmsg(256, _socket.CMSG_SPACE(4))
            except OSError:
                data, anc = b"", []
        finally:
            os.close(pidfd)
            self.close()
        fds = _fds(anc)
        if data != b"L" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            why = data[1:].decode("ascii", "replace") if data[:1] == b"E" else "no answer"
            raise NetnsError(f"cannot listen in the sandbox's network namespace ({why})")
        return _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fds[0])


def _fds(anc) -> list:
    return [int.from_bytes(payload[i:i + 4], sys.byteorder)
            for level, kind, payload in anc if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
            for i in range(0, len(payload) - 3, 4)]


def _helper(conn) -> None:
    status = 1
    try:
        try:
            if getattr(os, "setns", None) is None:
                import ctypes  # noqa: F401 - loaded now, while bwrap starts

            data, anc, _flags, _addr = conn.recvmsg(64, _socket.CMSG_SPACE(4))
            fds = _fds(anc)
            if len(fds) != 1 or not data:
                os._exit(0)  # not needed after all
            kinds, port = (int(x) for x in data.split())
            _setns(fds[0], kinds)
            lst = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            lst.bind(("127.0.0.1", port))
            lst.listen(128)
            conn.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, lst.fileno().to_bytes(4, sys.byteorder))])
            status = 0
        except OSError as e:
            conn.sendall(b"E" + (e.strerror or type(e).__name__).encode("ascii", "replace")[:200])
    except BaseException:
        pass
    os._exit(status)
