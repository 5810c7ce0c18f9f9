"""An OCI run's container ends when its sbxc does, however sbxc ends.

bwrap has ``--die-with-parent``; runc has nothing like it. An sbxc killed with SIGKILL
(an out-of-memory kill, a CI job's timeout, ``kill -9``) would leave `runc run` and the
command running, unsupervised, with no post-run checks. So every OCI run starts a
watcher once runc was started: the system's ``sh`` running a one-line script, whose
standard input is the read end of a pipe that only sbxc holds the write end of. sbxc
ending its run writes ``done`` and a newline (``Watcher.finish``): the script exits. Any
other end of sbxc closes the pipe with nothing written: the script execs
``runc delete --force ID`` for the run's container (runc checks that the container's
process is the one it started, kills it, and removes its cgroup and state).

A spawned shell, not a fork of sbxc: a forked Python process would cost sbxc a
copy-on-write fault for every page it touches afterwards. The script's arguments are
passed as positional parameters, never spliced into its text. Every signal is blocked
in it (a Ctrl-C to the terminal's process group reaches sbxc, which forwards it to the
command; the watcher must outlive sbxc), its stdout and stderr are /dev/null, and it
inherits no other descriptor (sbxc's are close-on-exec), so it keeps no pipe, terminal
or lock of the run open. It is sbxc's child: ``finish`` reaps it before the post-run
checks, which count sbxc's children still running.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

SCRIPT = 'read -r said; [ "$said" = done ] || exec "$@"'
DONE = b"done\n"


class Watcher:
    """The watcher of one run's container (``start``), ended by ``finish``."""

    def __init__(self):
        self.pid = 0
        self._w = -1

    def start(self, sh: str, delete_argv: list, env: dict) -> None:
        """Start ``sh`` watching; ``delete_argv`` is the whole `runc ... delete --force ID`.
        OSError when it cannot be started."""
        import _signal

        r, w = os.pipe()  # both close-on-exec: runc and the command never get them
        try:
            pid = os.posix_spawn(sh, [sh, "-c", SCRIPT, "sh", *delete_argv], env, file_actions=[
                (os.POSIX_SPAWN_DUP2, r, 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ], setsigmask=_signal.valid_signals())
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        self.pid, self._w = pid, w

    def finish(self) -> None:
        """The run ended as sbxc meant: the watcher exits without touching the container.
        Reaped here, so it is never taken for a process the command left."""
        w, self._w = self._w, -1
        if w >= 0:
            try:
                os.write(w, DONE)
            except OSError:
                pass
            os.close(w)
        pid, self.pid = self.pid, 0
        if pid:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
