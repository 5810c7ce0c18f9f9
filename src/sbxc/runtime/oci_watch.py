"""An OCI run's container ends when its sbxc does, however sbxc ends.

bwrap has ``--die-with-parent``; runc has nothing like it. An sbxc killed with SIGKILL
(an out-of-memory kill, a CI job's timeout, ``kill -9``) would leave `runc run` and the
command running, unsupervised, with no post-run checks. So every OCI run starts a
watcher once runc was started: the system's ``sh`` running a one-line script, whose
standard input is the read end of a pipe that only sbxc holds the write end of. sbxc
ending its run stops it (``Watcher.finish``: SIGKILL while sbxc still holds the pipe, so
the script cannot be past its read; ``done`` written as well). Any
other end of sbxc closes the pipe with nothing written: the script execs
``runc delete --force ID`` for the run's container (runc checks that the container's
process is the one it started, kills it, and removes its cgroup and state). A run with
host rules makes its container with `runc create`, which takes a while: its watcher is
started before it, with a lifeline (``Watcher.start``) that only that runc holds, and
deletes only once that runc has ended, so a container that was still being made when
sbxc died is deleted too.

A spawned shell in a session of its own (``_spawn`` says why), not a fork of sbxc: a
forked Python process would cost sbxc a copy-on-write fault for every page it touches
afterwards. The script's arguments are
passed as positional parameters, never spliced into its text. Every signal is blocked
in it (a Ctrl-C to the terminal's process group reaches sbxc, which forwards it to the
command; the watcher must outlive sbxc), its stdout and stderr are /dev/null, every other
descriptor is closed in it (also any sbxc was given without close-on-exec), and its
environment is a fixed PATH alone, so it keeps no pipe, terminal or lock of the run open. It is sbxc's child: ``finish`` reaps it before the post-run
checks, which count sbxc's children still running.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

SCRIPT = ("trap '' HUP INT QUIT TSTP; "
          'read -r said; '
          'if [ "$said" = made ]; then read -r said; elif [ "$said" != done ] && [ "$1" != - ]; then read -r _ <&"$1"; fi; '
          '[ "$said" = done ] && exit 0; '
          'alive() { read -r s < "/proc/$1/stat" || return 1; s=${s##*") "}; [ "${s%% *}" != Z ]; }; '
          'n=0; while [ "$2" != - ] && [ ! -e "$2" ] && [ $n -lt 2000 ] && alive "$3" 2>/dev/null; '
          'do sleep 0.01; n=$((n+1)); done; '
          'shift 3; exec "$@"')
"""The terminal's signals are ignored first: that drops any of them that reached the
shell before its session was its own (blocked, they would wait there), and `runc delete`
keeps SIGHUP and SIGINT ignored (Go leaves those two as it finds them ignored). ``$1``:
``-``, or the descriptor of a lifeline (``Watcher.start``), waited on before the
delete unless sbxc said ``made`` (``Watcher.made``) first; ``$2`` and ``$3``: ``-``, or the
pid file of a `runc run` and that runc's pid: the delete waits until the file is there or
that runc is gone, a zombie included (at most about 20 s); the rest is the delete's argv."""
MADE = b"made\n"
DONE = b"done\n"


class Watcher:
    """The watcher of one run's container (``start``), ended by ``finish``."""

    def __init__(self):
        self.pid = 0
        self._w = -1

    def start(self, sh: str, delete_argv: list, lifeline: int = -1, made_when: tuple = ()) -> None:
        """Start ``sh`` watching; ``delete_argv`` is the whole `runc ... delete --force ID`.
        ``lifeline``: the read end of a pipe whose write end a runc that makes the container
        holds (`runc create`, started after this): once sbxc is gone the watcher waits for
        its end of file, so that the delete comes after the container exists, not while
        runc still makes it. ``made_when``: (pid file, pid) of a `runc run`, which, once it
        has its config, goes on making and starting the container after sbxc is gone and
        writes the pid file last: the delete waits for that file (or for that runc's end).
        Run while runc still makes the container, it finds none, or removes runc's state
        of half of one and leaves the rest waiting. OSError when it cannot be started."""
        import _signal

        r, w = os.pipe()  # both close-on-exec: runc and the command never get them
        null = -1
        old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())  # inherited by sh
        try:
            null = os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
            wait = [made_when[0], str(made_when[1])] if made_when else ["-", "-"]
            self.pid = _spawn([sh, "-c", SCRIPT, "sh", str(lifeline) if lifeline >= 0 else "-", *wait, *delete_argv], r,
                              null, keep=(lifeline,) if lifeline >= 0 else ())
        except BaseException:
            os.close(w)
            raise
        finally:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
            os.close(r)
            if null >= 0:
                os.close(null)
        self._w = w

    def made(self) -> None:
        """The runc that made the container has ended: from here on the watcher deletes at
        once, without waiting for its lifeline. Some runc versions (before 1.1.12) leave
        inherited descriptors open in the container's waiting init, which would hold the
        lifeline for as long as the container lives."""
        if self._w >= 0:
            try:
                os.write(self._w, MADE)
            except OSError:
                pass

    def finish(self, stand_down: bool = True) -> None:
        """``stand_down``: the run ended as sbxc meant, the watcher exits without touching
        the container. Else it deletes the container now, as if sbxc were gone. Reaped
        here either way, so it is never taken for a process the command left."""
        w, self._w = self._w, -1
        pid, self.pid = self.pid, 0
        if stand_down and pid and w >= 0:
            # Ended, not asked: while sbxc holds the pipe open the script cannot have got
            # past its read, so SIGKILL stops it before anything, at once (a short run
            # would otherwise wait for the shell's own start to hear "done").
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if w >= 0:
            if stand_down:
                try:
                    os.write(w, DONE)  # the kill failed: the script still hears it
                except OSError:
                    pass
            os.close(w)
        if pid:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
"""The watcher's whole environment: neither the command's nor sbxc's (runc is named by path)."""


def _spawn(argv: list, stdin: int, null: int, keep: tuple = ()) -> int:
    """``argv`` started with ``stdin`` as its standard input, /dev/null as its output, no
    other descriptor but ``keep`` (every other one is closed in the child, as the core's
    spawn does: sbxc may have been given descriptors without close-on-exec), in a session
    of its own. OSError when it failed.

    The session: in sbxc's, the watcher was in the terminal's foreground process group,
    and an sbxc that was the terminal's session leader (ssh -t, a tmux window, a shell
    that exec'd it) killed with SIGKILL makes the kernel send that group SIGHUP. Blocked
    in the shell, it stayed pending across the exec of `runc delete`, whose Go runtime
    unblocked it and died of it before deleting anything: the container ran on. A
    session of its own also keeps it out of a kill of sbxc's process group (a CI job's
    timeout), which it is there to outlive."""
    env = [k.encode() + b"=" + v.encode() for k, v in ENV.items()]
    r, w = os.pipe()
    try:
        try:
            from _posixsubprocess import fork_exec

            # The argument list of Python 3.11-3.13's private function (as supervise._spawn).
            pid = fork_exec(list(argv), [os.fsencode(argv[0])], True, tuple(sorted(keep)), None, env, stdin, -1, -1,
                            null, -1, null, r, w, True, True, -1, None, None, None, -1, None, True)
        except (ImportError, TypeError):
            closes = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable(stdin, null, *keep)]
            for fd in keep:
                os.set_inheritable(fd, True)
            try:
                pid = os.posix_spawn(argv[0], list(argv), ENV, file_actions=[
                    *closes, (os.POSIX_SPAWN_DUP2, stdin, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                    (os.POSIX_SPAWN_DUP2, null, 2)], setsid=True)
            finally:
                for fd in keep:
                    os.set_inheritable(fd, False)
            return pid
        os.close(w)
        w = -1
        failed = os.read(r, 256)  # end of file: the exec worked
        if failed:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            code = failed.split(b":")[1] if failed.count(b":") >= 1 else b""
            try:
                errno_ = int(code, 16)
            except ValueError:
                errno_ = 0
            raise OSError(errno_, os.strerror(errno_) if errno_ else "could not start it")
        return pid
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def _inheritable(*keep: int) -> list:
    """This process's descriptors above stdio that an exec would pass on, but ``keep``."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                out.append(fd)
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return out

