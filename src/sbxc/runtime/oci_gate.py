"""The OCI runner's release gate: runc reads ``config.json`` from a FIFO that sbxc fills
only once the run's last checks have passed, so those checks (and the writing of the
config itself) run while runc starts, as bwrap's do while bwrap sets its sandbox up.

runc opens ``config.json`` once, at its start, and decodes one JSON value from it (it
does not wait for end of file), before it makes any namespace, mount or process. Facts
this relies on (runc 1.1, Linux 6.x; tests/live/test_oci_gate.py checks them):

- The FIFO is opened here for reading and for writing before runc starts (neither open
  blocks then), so runc's own open for reading finds a writer and does not block, and
  its read waits for the bytes. Both ends stay open until the run is over: without a
  writer a later open for reading would block, and without any open end the bytes
  written but not read yet would be dropped.
- Nothing written (sbxc refused the run): runc is killed; it cannot have made anything
  yet, since it has not read its config. sbxc killed before writing: its ends close, runc
  reads end of file, fails to decode ("unexpected EOF") and exits 1 having made
  nothing. A part of the text is never a valid config (the closing brace is the last
  byte), so a write cut short fails the same way.
- sbxc killed before runc even opened the FIFO: runc then blocks in its open, with no
  writer left. It has made nothing, and the next run's reaper of stale per-run folders
  (``rundirs.reap``) opens every FIFO it finds there for writing and closes it again,
  which ends such a wait (runc then reads end of file and exits) before the folder goes.
- The pipe is made as large as the config (``F_SETPIPE_SZ``), so the one write that
  fills it never waits for runc; where the size cannot be had, the text is written in
  parts as runc reads, for at most 10 s, and runc is watched for an early end.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

_F_SETPIPE_SZ = 1031  # linux/fcntl.h
_WRITE_TIMEOUT = 10.0


class Gate:
    """The FIFO ``path`` (``config.json`` of a fresh bundle) with both ends held (``r``,
    ``w``: the runner closes them once the run is over). ``pid`` (runc's, set by the
    runner's ``launched``) is what ``release(False)`` kills."""

    def __init__(self, path: str):
        os.mkfifo(path, 0o600)
        self.path = path
        self.r = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.w = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            os.close(self.r)
            raise
        self.pid = 0
        self.released = False
        self.done = False

    def release(self, text_of, go: bool = True) -> bool:
        """``go``: write the config (``text_of()``: its bytes) for runc; False when runc is
        gone already or the text could not be written. Not ``go``: kill runc, which has not
        read its config, so it made nothing."""
        if self.done:
            return False
        self.done = True
        if not go:
            self._kill()
            return False
        data = text_of()
        import fcntl

        try:
            fcntl.fcntl(self.w, _F_SETPIPE_SZ, max(len(data), 4096))
        except OSError:
            pass  # the user's pipe quota: written in parts below
        view = memoryview(data)
        import time

        deadline = time.monotonic() + _WRITE_TIMEOUT
        while view:
            try:
                n = os.write(self.w, view)
            except BlockingIOError:
                n = 0
            view = view[n:]
            if not view:
                break
            if not self._alive() or time.monotonic() > deadline:
                self._kill()
                return False
            import select

            select.select([], [self.w], [], 0.01)
        self.released = True
        return True

    def _alive(self) -> bool:
        if self.pid <= 0:
            return True
        try:
            # Not reaped here (WNOWAIT): the core waits for runc and takes its status.
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def _kill(self) -> None:
        if self.pid > 0:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
