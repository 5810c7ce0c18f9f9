"""Copy bytes both ways between a client and its upstream until both sides are done, one
side fails, or nothing moved for the idle timeout.

One thread per connection runs ``relay``; both sockets are non-blocking and one ``poll``
waits for whichever side can move, so the idle timeout covers both directions at once (a
download keeps its silent upload direction alive). Two ways to move the bytes:

- copy (the default): ``recv_into`` a 1 MiB buffer per direction and ``send`` from it;
- splice (Linux, ``use_splice=True``): socket -> pipe -> socket with ``splice(2)``, no
  copy through user space.

Measured with bench/proxy.py (docs/proxy.md): on the reference machine (kernel 6.x,
loopback) the splice path costs more CPU per byte than the copy (about 1.15 against
0.8-1.0 CPU-seconds per GB, both ends and the proxy together), so the copy is the
default; splice stays selectable to measure it on other kernels.
"""
from __future__ import annotations

import os
import select

PIPE_BYTES = 1 << 20
"""Requested pipe capacity (``F_SETPIPE_SZ``); the default 64 KiB when refused."""
COPY_BYTES = 1 << 20
"""Buffer per direction for the copy loop (smaller buffers measured slower)."""

_F_SETPIPE_SZ = 1031  # linux/fcntl.h: F_LINUX_SPECIFIC_BASE + 7
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
HAVE_SPLICE = hasattr(os, "splice")
USE_SPLICE = False
"""The default of ``relay(use_splice=)``; bench/proxy.py sets it to compare both."""
_IN = select.POLLIN | select.POLLHUP
_OUT = select.POLLOUT
_BAD = select.POLLERR | select.POLLNVAL


class _Direction:
    __slots__ = ("src", "dst", "pipe_r", "pipe_w", "cap", "pending", "budget", "eof", "full", "done",
                 "half_close", "buf", "view", "off")

    def __init__(self, src, dst, budget, half_close):
        self.src = src            # socket objects
        self.dst = dst
        self.budget = budget      # bytes still to pass, None for no limit
        self.half_close = half_close
        self.pending = 0          # bytes taken from src and not yet given to dst
        self.eof = False          # nothing more comes from src (or the budget is spent)
        self.full = False         # the pipe took no more: read again once dst took some
        self.done = False
        self.pipe_r = self.pipe_w = -1
        self.cap = COPY_BYTES
        self.buf = self.view = None
        self.off = 0


def _open_pipe(d: _Direction) -> None:
    import fcntl

    d.pipe_r, d.pipe_w = os.pipe2(os.O_CLOEXEC)
    try:
        d.cap = fcntl.fcntl(d.pipe_w, _F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        # Over the user's pipe-buffer quota (fs.pipe-user-pages-soft) or an old kernel:
        # the default capacity still works, with more round trips.
        d.cap = 65536


def _finish(d: _Direction) -> None:
    d.done = True
    if d.half_close:
        try:
            d.dst.shutdown(1)  # SHUT_WR: the peer reads EOF and may still answer
        except OSError:
            pass


def _room(d: _Direction, free: int) -> int:
    return free if d.budget is None else min(free, d.budget)


# Both pumps read while there is room and write while there is something to write, so
# the upstream keeps sending while the client is still taking the previous bytes: reading
# only into an empty buffer halves the window and, on loopback, the throughput.

def _pump_splice(d: _Direction) -> None:
    while not d.done:
        moved = False
        if not d.eof and not d.full:
            want = _room(d, d.cap - d.pending)
            if d.budget == 0:
                d.eof = True
            elif want == 0:
                d.full = True
            else:
                try:
                    n = os.splice(d.src.fileno(), d.pipe_w, want, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    # Either src has nothing, or the pipe has no free slot (a slot holds
                    # one page reference, whatever its size, so "cap - pending" is not
                    # the free space): with bytes pending, wait until dst took some.
                    d.full = d.pending > 0
                else:
                    moved = _took(d, n) or moved
        if d.pending:
            try:
                d.pending -= os.splice(d.pipe_r, d.dst.fileno(), d.pending, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                pass
            else:
                d.full = False
                moved = True
        if d.eof and not d.pending:
            _finish(d)
        if not moved:
            break


def _took(d: _Direction, n: int) -> bool:
    """Account for ``n`` bytes read from ``d.src`` (0: its end); True when bytes moved."""
    if n == 0:
        d.eof = True
        return False
    d.pending += n
    if d.budget is not None:
        d.budget -= n
    return True


def _pump_copy(d: _Direction) -> None:
    while not d.done:
        moved = False
        if d.pending == 0:
            d.off = 0
        end = d.off + d.pending
        if not d.eof:
            want = _room(d, d.cap - end)
            if d.budget == 0:
                d.eof = True
            elif want:
                try:
                    n = d.src.recv_into(d.view[end:end + want])
                except (BlockingIOError, InterruptedError):
                    pass
                else:
                    moved = _took(d, n) or moved
        if d.pending:
            try:
                sent = d.dst.send(d.view[d.off:d.off + d.pending])
            except (BlockingIOError, InterruptedError):
                pass
            else:
                d.pending -= sent
                d.off += sent
                moved = True
        if d.eof and not d.pending:
            _finish(d)
        if not moved:
            break


def relay(client, upstream, idle_timeout: float, *, upload_budget: int | None = None,
          end_with_download: bool = False, use_splice: bool | None = None) -> str:
    """Relay until done; returns why it ended: ``"done"``, ``"idle"`` or ``"error"``.

    ``upload_budget``: pass at most this many bytes client -> upstream, then stop reading
    the client (forwarded HTTP: the request body; what follows it is not another request
    for this upstream). ``end_with_download``: the relay ends once upstream -> client has
    ended (forwarded HTTP: the response is complete when the server closes).
    """
    if use_splice is None:
        use_splice = USE_SPLICE and HAVE_SPLICE
    up = _Direction(client, upstream, upload_budget, half_close=upload_budget is None)
    down = _Direction(upstream, client, None, half_close=not end_with_download)
    dirs = (up, down)
    client.setblocking(False)
    upstream.setblocking(False)
    try:
        if use_splice:
            for d in dirs:
                _open_pipe(d)
            pump = _pump_splice
        else:
            for d in dirs:
                d.buf = bytearray(COPY_BYTES)
                d.view = memoryview(d.buf)
            pump = _pump_copy
        return _loop(dirs, pump, idle_timeout, end_with_download)
    except OSError:
        return "error"
    finally:
        for d in dirs:
            for fd in (d.pipe_r, d.pipe_w):
                if fd >= 0:
                    os.close(fd)
            if d.view is not None:
                d.view.release()


def _loop(dirs, pump, idle_timeout: float, end_with_download: bool) -> str:
    up, down = dirs
    cfd, ufd = up.src.fileno(), down.src.fileno()
    poller = select.poll()
    registered = {}
    idle_ms = max(1, int(idle_timeout * 1000))
    for d in dirs:
        pump(d)
    while True:
        if down.done and (end_with_download or up.done):
            return "done"
        want = {cfd: 0, ufd: 0}
        for d, src, dst in ((up, cfd, ufd), (down, ufd, cfd)):
            if not d.done:
                if d.pending:
                    want[dst] |= _OUT
                if not d.eof and not d.full and (d.view is None or d.off + d.pending < d.cap):
                    want[src] |= _IN
        for fd, mask in want.items():
            if registered.get(fd, 0) != mask:
                # A socket nothing waits on is dropped from the set: poll reports a hang-up
                # whatever the mask, and a registered, finished side would wake it forever.
                if not mask:
                    poller.unregister(fd)
                    del registered[fd]
                elif fd in registered:
                    poller.modify(fd, mask)
                    registered[fd] = mask
                else:
                    poller.register(fd, mask)
                    registered[fd] = mask
        events = poller.poll(idle_ms)
        if not events:
            return "idle"
        for _fd, ev in events:
            if ev & _BAD:
                return "error"
        for d in dirs:
            pump(d)


# --- tunnels: one blocking splice loop per direction ------------------------------------

TUNNEL = "poll"
"""How ``tunnel`` moves an established CONNECT/SOCKS tunnel's bytes: ``"poll"`` (the
default: ``relay``'s loop, copy or splice per USE_SPLICE) or ``"splice-threads"``;
bench/proxy.py sets it to compare (docs/proxy.md has the numbers: on the reference
machine the threads were no faster, and the default stayed)."""

_SPLICE_MOVE = getattr(os, "SPLICE_F_MOVE", 1)
_SO_RCVTIMEO = 20  # asm-generic/socket.h (x86_64 and aarch64)
_SO_SNDTIMEO = 21


class _Tunnel:
    __slots__ = ("last", "cut", "idle", "why")

    def __init__(self, idle: float):
        import time

        self.last = time.monotonic()
        self.cut = False
        self.idle = idle
        self.why = "done"


def tunnel(client, upstream, idle_timeout: float) -> str:
    """Relay an established tunnel (no budget, half-close both ways) until both directions
    ended; ``"done"``, ``"idle"`` or ``"error"``, as ``relay``.

    Each direction is a thread of its own doing blocking ``splice(2)`` socket -> pipe ->
    socket: two system calls per chunk of whatever arrived, no ``poll`` between them, and
    no byte copied through user space (the poll loop spends most of its CPU in the calls
    around each move, measured with bench/proxy.py). The idle timeout is the kernel's
    (``SO_RCVTIMEO``/``SO_SNDTIMEO``, which ``splice`` honours on a blocking socket): a
    direction that timed out ends only when the other one was idle too, so a download
    keeps its silent upload direction alive. Falls back to ``relay`` where splice is
    missing or refused (no ``os.splice``, a pipe that cannot be had), and where ``TUNNEL``
    is ``"poll"``."""
    if TUNNEL != "splice-threads" or not HAVE_SPLICE:
        return relay(client, upstream, idle_timeout)
    import _thread

    up, down = _Direction(client, upstream, None, True), _Direction(upstream, client, None, True)
    try:
        for d in (up, down):
            _open_pipe(d)
    except OSError:
        for d in (up, down):
            for fd in (d.pipe_r, d.pipe_w):
                if fd >= 0:
                    os.close(fd)
        return relay(client, upstream, idle_timeout)
    state = _Tunnel(idle_timeout)
    # A quarter of the idle time: a silent direction notices within 1.25 idle timeouts.
    timeo = _timeval(max(0.05, min(idle_timeout / 4, 15.0)))
    done = _thread.allocate_lock()
    done.acquire()
    try:
        for s in (client, upstream):
            s.setblocking(True)  # settimeout's O_NONBLOCK would make splice return EAGAIN
            s.setsockopt(1, _SO_RCVTIMEO, timeo)
            s.setsockopt(1, _SO_SNDTIMEO, timeo)

        def upload():
            try:
                _splice_loop(up, state)
            finally:
                done.release()

        _thread.start_new_thread(upload, ())
    except (OSError, RuntimeError):
        for d in (up, down):
            os.close(d.pipe_r)
            os.close(d.pipe_w)
        return relay(client, upstream, idle_timeout)
    try:
        _splice_loop(down, state)
    finally:
        done.acquire()  # the upload direction has ended too (it is cut when this one failed)
        for d in (up, down):
            os.close(d.pipe_r)
            os.close(d.pipe_w)
    return state.why


def _timeval(seconds: float) -> bytes:
    import sys

    whole = int(seconds)
    micro = int((seconds - whole) * 1e6)
    return whole.to_bytes(8, sys.byteorder) + micro.to_bytes(8, sys.byteorder)


def _splice_loop(d: _Direction, state: _Tunnel) -> None:
    import time

    src, dst = d.src.fileno(), d.dst.fileno()
    cap = d.cap
    try:
        while not state.cut:
            try:
                n = os.splice(src, d.pipe_w, cap, flags=_SPLICE_MOVE)
            except BlockingIOError:
                # SO_RCVTIMEO ran out: the tunnel is idle only if the other way was too.
                if time.monotonic() - state.last >= state.idle:
                    state.why = "idle"
                    break
                continue
            if n == 0:
                try:
                    d.dst.shutdown(1)  # SHUT_WR: the peer reads EOF and may still answer
                except OSError:
                    pass
                return
            while n:
                try:
                    n -= os.splice(d.pipe_r, dst, n, flags=_SPLICE_MOVE)
                except BlockingIOError:
                    if time.monotonic() - state.last >= state.idle:
                        state.why = "idle"
                        raise
                    continue
            state.last = time.monotonic()
    except OSError:
        if state.why == "done":
            state.why = "error"
    # Failed, idle or cut: end both directions (the other thread is woken by the shutdown).
    state.cut = True
    for s in (d.src, d.dst):
        try:
            s.shutdown(2)
        except OSError:
            pass

