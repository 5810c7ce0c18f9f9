"""Process supervision: one implementation for every runner. The core forks the sandbox's
first process, relays its stderr, forwards signals to it, waits and reports its status
(``run``); a runner whose command has no PID namespace of bwrap's keeps a reaper of its
own (Landlock), which forwards signals, waits and ends what is left with the same
pieces (``forward_signals``, ``wait_for``, ``end_descendants``, ``exit_code``).

Statuses are as a shell reports them: the command's own, 128+N when it died of signal N.

Hot path: ``os``, ``_signal`` and ``select``; ``time`` only when processes are left to end.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from .errors import REFUSED, NotStartable, Refusal, one_line

_EPIPE = 32  # errno.EPIPE, on Linux and macOS alike

# Signals passed on to the sandbox process; the rest keep their default action.
# SIGWINCH too: the command has no controlling terminal under bwrap (new session), so a
# resize of the caller's terminal reaches it only this way.
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


def block_forwarded() -> set:
    """Block the FORWARDED signals (around a fork: see ``run`` and the Landlock reaper);
    returns the mask to go back to."""
    import _signal

    return _signal.pthread_sigmask(_signal.SIG_BLOCK, [getattr(_signal, n) for n in FORWARDED])


def exit_code(status) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for signal N; 125
    (sbxc's own failure) when there is none."""
    if status is None:
        return REFUSED
    rc = os.waitstatus_to_exitcode(status)
    return 128 - rc if rc < 0 else rc


def deliver(signum: int, pid: int, group=None, alone_if_no_group: bool = False) -> None:
    """Send ``signum`` to process group ``group`` when known, else to ``pid``; a target
    that is gone (or no longer ours to signal) is no error. ``alone_if_no_group``: with no
    such group (yet), to ``pid`` itself: for a caller whose ``pid`` is its unreaped child,
    which has not made its group yet."""
    try:
        if group:
            try:
                os.killpg(group, signum)
                return
            except ProcessLookupError:
                if not alone_if_no_group:
                    return
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def forward_signals(handler) -> dict:
    """Install ``handler(signum, frame)`` for every FORWARDED signal; returns the previous
    dispositions for ``restore_signals``."""
    import _signal

    return {getattr(_signal, name): _signal.signal(getattr(_signal, name), handler) for name in FORWARDED}


def restore_signals(old: dict) -> None:
    import _signal

    for num, h in old.items():
        _signal.signal(num, h)


def default_signals() -> None:
    """Every FORWARDED signal back to its default action: in a process that must not keep a
    supervisor's handlers (the command before its exec resets them anyway, a namespace's
    idle init)."""
    import _signal

    for name in FORWARDED:
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)


def wait_for(pid: int):
    """Wait until child ``pid`` ends, reaping every other child that ends meanwhile (a
    subreaper's orphans); its wait status, or None when it was never ours to wait for."""
    for _ in range(1 << 40):  # ends with pid: every round reaps one process
        try:
            done, st = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        if done == pid:
            return st
    return None


def children() -> list:
    """PIDs of this process's children (zombies included), from
    /proc/self/task/*/children; where the kernel lacks that file (CONFIG_PROC_CHILDREN
    off), from every process's parent in /proc/*/stat."""
    out = []
    # Only a missing file leads to the slower fallback. Any other error (EMFILE: a
    # process lowered our RLIMIT_NOFILE) propagates: an empty answer would read as
    # "nothing left to end".
    try:
        tids = os.listdir("/proc/self/task")
    except FileNotFoundError:
        tids = []
    try:
        for tid in tids:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        return out
    except FileNotFoundError:
        pass
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # The command name in parentheses may hold spaces and ')': the fields follow the last ')'.
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(name))
    return out


def end_descendants(limit: float = 5.0) -> int:
    """SIGKILL every process below this one and reap it, until none remain.

    Needs PR_SET_CHILD_SUBREAPER on this process: an orphan is reparented to the nearest
    subreaper, and the kernel does that (exit_notify) before the dying parent becomes a
    zombie, so once a child is reaped its own children are already ours. Killing only
    our own unreaped children is free of PID-reuse races (a zombie keeps its PID). A
    process that forks in the meantime adds a child that the next round finds. Bounded:
    rounds and ``limit`` seconds (a process in uninterruptible sleep does not die at
    once). Returns how many children remain."""
    import time

    deadline = time.monotonic() + limit
    for _ in range(100000):
        kids = children()
        if not kids:
            return 0
        for pid in kids:
            try:
                os.kill(pid, 9)  # SIGKILL
            except ProcessLookupError:
                pass
        reaped = 0
        for pid in kids:
            try:
                done, _st = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # reaped elsewhere, or not ours after all
            reaped += done != 0
        if time.monotonic() > deadline:
            break
        if not reaped:
            time.sleep(0.002)
    return len(children())


def processes_left() -> int:
    """Children of sbxc still running once the sandbox's own process was waited for: on
    Landlock sbxc is a child subreaper, so a process of the command that its reaper could
    not end comes here. Zombies are reaped on the way."""
    left = 0
    for _ in range(1 << 16):
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return left
        if pid == 0:
            return 1
    return left


_LINE_OPEN = [False]
"""Whether what was relayed of the command's stderr ended in the middle of a line."""


def own_line(text: str, to_fd: bool = False) -> None:
    """Write sbxc's own ``text`` (whole lines) to stderr, starting on a line of its own
    also when the command's relayed output ended mid-line (a sandbox tool's message cut
    short, a command's ``printf x``): the first of them then gets a newline before it.
    Every line sbxc writes after the command's output goes through here. ``to_fd``:
    written to the descriptor itself, as the relay writes (the feedback after a run),
    and handed to --format json's record of sbxc's lines (``runstatus``), which sees
    only what passes through ``sys.stderr``."""
    cut, _LINE_OPEN[0] = _LINE_OPEN[0], False
    if not to_fd:
        sys.stderr.write(("\n" if cut else "") + text)
        return
    _write_all(2, (("\n" if cut else "") + text).encode("utf-8", "replace"))
    note = getattr(sys.stderr, "sbxc_note", None)
    if note is not None:
        note(text)


def _take(chunk: bytes, first: bytearray, scan) -> int:
    """A chunk of the command's stderr, once it is known to be the command's: relayed to
    sbxc's stderr, its start kept in ``first`` (256 bytes in all), read by ``scan``. The
    errno of a failed write, else 0."""
    if len(first) < 256:
        first += chunk[: 256 - len(first)]
    failed = _write_all(2, chunk)
    _LINE_OPEN[0] = not chunk.endswith(b"\n")
    if scan is not None:
        scan.feed(chunk)
    return failed


def _write_all(fd: int, data: bytes) -> int:
    """0, or the errno of the write that failed (the rest is dropped)."""
    while data:
        try:
            n = os.write(fd, data)
        except OSError as e:
            return e.errno or -1
        data = data[n:]
    return 0


def one_stream() -> bool:
    """Whether sbxc's stdout and stderr are one file, pipe or socket (a caller's ``2>&1``,
    or a program that reads both through one pipe), and not a terminal or a device such
    as /dev/null: the command then gets the relay as both (``run``), so that what it
    writes to either keeps its order, as it would have in that one stream."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    if (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino):
        return False
    kind = out.st_mode & 0o170000
    return kind in (0o100000, 0o010000, 0o140000)  # a regular file, a FIFO or a pipe, a socket


def _close_fds_except(keep) -> None:
    """Close every descriptor from 3 up except ``keep``: one the caller left open (a
    socket, a secret file) must not reach the sandbox."""
    keep = sorted(k for k in keep if k > 2)
    lo = 3
    for k in keep:
        if k > lo:
            os.closerange(lo, k)
        lo = k + 1
    os.closerange(lo, 1 << 20)


def _ignore_signal(_signum, _frame) -> None:
    return None


def _relay_chunks(pid: int, err_r: int, wake_r: int):
    """Yield what arrives on ``err_r`` (bytes) and, once, the child's wait status (int).

    After the child has ended, only what is already in the pipe is taken (non-blocking):
    a background process of the command that keeps stderr open does not keep sbxc waiting.
    """
    import select

    while True:
        ready = select.select([err_r, wake_r], [], [])[0]
        if err_r in ready:
            try:
                chunk = os.read(err_r, 65536)
            except OSError:  # EIO: a pseudo-terminal's master once every slave is closed
                chunk = b""
            if not chunk:
                return  # every writer is gone; the caller waits for the status
            yield chunk
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                os.set_blocking(err_r, False)
                try:
                    while True:
                        chunk = os.read(err_r, 65536)
                        if not chunk:
                            break
                        yield chunk
                except BlockingIOError:
                    pass
                except OSError:  # EIO (pseudo-terminal, every slave closed): all was read
                    pass
                yield status
                return


def run(spec, network_off: bool, state=None, feedback=None, before_release=None) -> int:
    """Fork, exec ``spec.argv``, relay stderr, wait, clean up. ``state`` (a ``RunState``)
    learns that the command's process was started. ``feedback``: None, or a callable
    ``(rc, scan) -> str`` called once the command ran (``scan``: its stderr's
    ``hint.StderrScan``, None when stderr was not read), giving the lines to print
    (``hint.Feedback``). ``before_release``: None, or the run's last checks, called once
    before the command can start; with a ``spec.release`` that is after the child was
    started, while it sets the sandbox up (a check that raises kills the child, which
    never reached the command, and the exception goes on to the caller).

    stderr is always read by sbxc: through a pipe, or, when sbxc's stderr is a terminal,
    through a pseudo-terminal of sbxc's (``ttyrelay``), so the command still writes to a
    terminal. Where no pseudo-terminal can be had, the command gets the terminal itself."""
    import _signal

    if spec.release is None and before_release is not None:
        try:
            before_release()
        except BaseException:
            _cleanups(spec)
            raise
    interpose = True
    relay = None
    if os.isatty(2):
        from .ttyrelay import open_relay

        relay = open_relay(2)
        interpose = relay is not None
    err_r = err_w = -1
    merged = False
    if relay is not None:
        err_r, err_w = relay
    elif interpose:
        err_r, err_w = os.pipe()  # both O_CLOEXEC; err_w becomes fd 2 in the child
        # stdout and stderr one stream (``2>&1``): the pipe is the child's fd 1 too, so
        # the two keep the order they were written in (two ways to one file would not).
        merged = one_stream()
    # Reports from the child between fork and exec (child_setup refusal, exec errno).
    rep_r, rep_w = os.pipe()

    child = [0]
    # Signals held, not forwarded: until the child exists (handled here, a timeout's SIGTERM
    # or a Ctrl-C right as the run starts no longer ends sbxc by its own action, and would
    # be lost) and, with a release (spec.release), until the release. The child gets them
    # then; a signal held at the release ends the run before the command (a sandbox set-up
    # killed half-way can hang, _end_unreleased).
    holding = [True]
    held: list = []
    master = [err_r if relay is not None else -1]  # -1 once closed: its number may be reused

    def forward(signum, _frame):
        if master[0] >= 0 and signum == _signal.SIGWINCH:
            from .ttyrelay import copy_size

            copy_size(2, master[0])
        if holding[0]:
            if signum != _signal.SIGWINCH and signum not in held:
                held.append(signum)
            return
        if child[0] <= 0:
            return
        if spec.deliver is not None:
            spec.deliver(signum, child[0])
            return
        group = None
        if spec.signal_target is not None:
            try:
                group = spec.signal_target()
            except OSError:
                group = None
        deliver(signum, child[0], group)

    old = forward_signals(forward)
    # SIGCHLD wakes the relay loop (through the wakeup descriptor), so sbxc returns when
    # the command ends even if something it started in the background keeps stderr open.
    wake_r = wake_w = -1
    old_wakeup = None
    if interpose:
        wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        old[_signal.SIGCHLD] = _signal.signal(_signal.SIGCHLD, _ignore_signal)
        old_wakeup = _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        spawned = spec.child_setup is None
        out_w = err_w if merged else -1
        pid = _spawn(spec, err_w, rep_r, rep_w, out_w) if spawned else -1
        mask = None
        if pid < 0:
            spawned = False
            # The forwarded signals are held while the child is made: one that came in
            # between would reach the child's copy of ``forward`` (it has no child) and be
            # lost. The parent gets any held one below, once ``child`` is set; the child
            # lets them through only with their default actions back (``_child``).
            mask = block_forwarded()
            try:
                pid = os.fork()
            except BaseException:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
                raise
            if pid == 0:
                _child(spec, err_w, rep_w, mask, out_w)  # never returns
        child[0] = pid
        if state is not None and spec.release is None:
            state.started = True  # from here on, no message may say the command did not run
        if spec.release is None:
            _stop_holding(holding, held, forward)  # as if they had come a moment later
        if mask is not None:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)  # a held one is forwarded now
        os.close(rep_w)
        if err_w >= 0:
            os.close(err_w)
        report = b""
        while True:
            chunk = os.read(rep_r, 4096)
            if not chunk:
                break
            report += chunk
        os.close(rep_r)
        if spawned and report and not report.startswith((b"exec:", b"refused:")):
            report = _spawn_report(report, spec.argv[0])
        if pid and not report and spec.launched is not None:
            waited = spec.launched(pid)
            if waited is not None:
                # The runner reaped the started process itself (runc create) and names the
                # one to wait for from here on (the container's, sbxc's child as subreaper);
                # 0: none, the runner ended the run before its command (setup_failed says why).
                pid = child[0] = waited
        if spec.release is not None and pid and not report:
            try:
                if before_release is not None and not held:
                    before_release()
            except BaseException:
                _end_unreleased(pid, spec)
                child[0] = 0
                if interpose:
                    master[0] = -1
                    os.close(err_r)
                raise
            if held:
                # A signal came before the release: the command never starts, and the run
                # ends with that signal's status, as its default action would end a command.
                _end_unreleased(pid, spec)
                child[0] = 0
                if interpose:
                    master[0] = -1
                    os.close(err_r)
                return 128 + held[0]
            if state is not None:
                state.started = True  # set before the release: no later message may deny the run
            released = spec.release()
            if not released and state is not None:
                state.started = False  # the child was gone: it never read the program
            if released:
                _stop_holding(holding, held, forward)  # one that came during the release

        first = bytearray()  # the first 256 bytes of the command's stderr, for command_status
        status = None
        scan = None
        _LINE_OPEN[0] = False  # what was relayed to stderr ended in the middle of a line
        if not pid:
            # The exec failed (_spawn): no child, nothing to relay; the report says why.
            if interpose:
                os.close(err_r)
            interpose = False
            status = 0
        if interpose:
            held = []
            started = spec.started is None
            if feedback is not None:
                from .hint import StderrScan  # after the release: while the sandbox starts the command

                scan = StderrScan(network_off, getattr(feedback, "landlock", False))
            for chunk in _relay_chunks(pid, err_r, wake_r):
                if isinstance(chunk, int):
                    status = chunk  # the child ended (its wait status)
                    continue
                if not started:
                    if not spec.started():
                        held.append(chunk)
                        continue
                    started = True
                    chunk = b"".join(held) + chunk  # the command's own, first: taken as the rest
                    held = []
                failed = _take(chunk, first, scan)
                if failed == _EPIPE and merged:
                    # The one stream's reader is gone (``sbxc exec -- yes 2>&1 | head``):
                    # the pipe's read end is closed, so the command's next write gets
                    # SIGPIPE, as it would have writing there itself. A stderr of its own
                    # that went away is drained instead, so the command is not blocked.
                    break
            master[0] = -1
            os.close(err_r)
            early = b"".join(held)  # read once the runner says whose it was (below)
        else:
            early = b""
        while status is None:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = 0
        child[0] = 0
        rc = exit_code(status)

        if report:
            kind, _, text = report.decode("utf-8", "replace").partition(":")
            if kind == "refused":
                cause, _, fix = text.partition("\x00")
                sys.stderr.write(Refusal(cause, fix).line() + "\n")
                return REFUSED
            if kind == "exec":
                errno_, _, what = text.partition(":")
                if spec.exec_is_command:
                    code = 127 if errno_ == "2" else 126
                    sys.stderr.write(f"sbxc: {one_line(what)}: {'command not found' if code == 127 else 'cannot execute'}\n")
                    return code
                sys.stderr.write(Refusal(f"could not start {what} (errno {errno_})",
                                         "check the backend is installed (sbxc doctor)").line() + "\n")
                return REFUSED
        if spec.setup_failed is not None:
            refusal = spec.setup_failed(rc, early.decode("utf-8", "replace"))
            if refusal is not None:
                own_line(refusal.line() + "\n")  # on a line of its own, also after output cut mid-line
                return refusal.code if isinstance(refusal, NotStartable) else REFUSED
        if early:
            # The runner judged it the command's own output, all of it held: nothing was
            # taken before it.
            _take(early, first, scan)
        if scan is not None:
            scan.finish()
        if spec.command_status is not None:
            rc = spec.command_status(rc, bytes(first))
        if feedback is not None:
            # The command ran (a refusal or a failed exec returned above): the plan's
            # warnings, then what its stderr calls for, after all of its output.
            lines = feedback(rc, scan)
            if lines:
                own_line(lines, to_fd=True)
        return rc
    finally:
        if old_wakeup is not None:
            _signal.set_wakeup_fd(old_wakeup)
        restore_signals(old)
        for fd in (wake_r, wake_w):
            if fd >= 0:
                os.close(fd)
        if spec.after_exit is not None:
            try:
                spec.after_exit()
            except Exception as e:
                own_line(f"sbxc: warning: ending the command's processes failed: {one_line(str(e))}\n")
        _cleanups(spec)


def _stop_holding(holding: list, held: list, forward) -> None:
    """Forward from here on, the held signals first."""
    holding[0] = False
    while held:
        forward(held.pop(0), None)


def _cleanups(spec) -> None:
    for fn in reversed(spec.cleanups):
        try:
            fn()
        except Exception as e:  # a failed cleanup is reported, never hidden
            own_line(f"sbxc: warning: cleanup failed: {one_line(str(e))}\n")


def _end_unreleased(pid: int, spec) -> None:
    """End a child that was never released (its command cannot have started) and reap it.
    Not by a signal at once: bwrap killed half-way through its set-up can leave its
    sandbox child waiting forever for a parent that is gone. The child is refused the
    release instead (``spec.release(False)``) and ends by itself; SIGKILL only after 5 s."""
    spec.release(False)
    reap_within(pid, 5.0)


def reap_within(pid: int, seconds: float, step: float = 0.001) -> None:
    """Wait for child ``pid`` to end by itself, reaping it; SIGKILL after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        if time.monotonic() > deadline:
            try:
                os.kill(pid, 9)  # SIGKILL
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            return
        time.sleep(step)


def _spawn(spec, err_w: int, rep_r: int, rep_w: int, out_w: int = -1) -> int:
    """Start ``spec.argv`` through the interpreter's own fork-and-exec (the one
    ``subprocess`` uses) when no Python code has to run in the child. On Linux it uses
    vfork: none of sbxc's page tables are copied and no copy-on-write fault follows in
    either process (0.6 ms on every run, see bench/README.md). The child gets what
    ``_child`` gives it: stderr into the relay, SIGPIPE and SIGXFSZ back at their default
    action (every other disposition as inherited: glibc's ``posix_spawn`` would leave its
    two internal signals ignored in the command), its own process group or session if asked, the
    pass_fds and no other descriptor from 3 up; stdout ``out_w`` too unless it is -1. The pid; 0 when the exec failed (its
    report is on ``rep_w``, as ``_child`` writes it); -1 when this interpreter's call
    does not fit (the caller forks instead)."""
    try:
        from _posixsubprocess import fork_exec
    except ImportError:
        return -1
    try:
        argv0 = os.fsencode(spec.argv[0])
        env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in spec.env.items()]
        if any(b"=" in os.fsencode(k) for k in spec.env):
            return -1  # the fork path words it
        keep = tuple(sorted({int(fd) for fd in spec.pass_fds} | {rep_w}))
        # The argument list of Python 3.11-3.13's private function; any other raises
        # TypeError before anything is started.
        pid = fork_exec(list(spec.argv), [argv0], True, keep, None, env, -1, -1, -1, out_w, -1, err_w, rep_r, rep_w,
                        True, spec.own_session, 0 if spec.own_pgrp else -1, None, None, None, -1, None, True)
    except (TypeError, ValueError):
        return -1
    except OSError as e:
        os.write(rep_w, f"exec:{e.errno}:{spec.argv[0]}".encode("utf-8", "replace"))
        return 0
    return pid


def _spawn_report(report: bytes, argv0: str) -> bytes:
    """The child's report in ``_child``'s words: the interpreter's child writes
    ``OSError:<errno in hex>:<where>`` when the exec (or the set-up before it) failed."""
    kind, _, rest = report.partition(b":")
    if kind == b"OSError":
        code = rest.partition(b":")[0]
        try:
            errno_ = int(code, 16)
        except ValueError:
            errno_ = 0
        return f"exec:{errno_}:{argv0}".encode("utf-8", "replace")
    return f"refused:could not set up the sandbox ({report.decode('utf-8', 'replace')})\x00please report this".encode()


def _child(spec, err_w: int, rep_w: int, mask=None, out_w: int = -1) -> None:
    """In the forked child: stderr into the relay, close stray descriptors, set up, exec.
    ``mask``: the signal mask to go back to, once the forwarded signals have their default
    actions again (the supervisor's handlers are no use here: this process has no child of
    theirs; a signal forwarded to it before its own set-up installs others ends it, as it
    would any process that early)."""
    code = REFUSED
    try:
        import _signal

        if mask is not None:
            default_signals()
            _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
        # Python ignores SIGPIPE and SIGXFSZ for itself; an ignored signal stays ignored
        # across exec, so `yes | head` inside would see EPIPE instead of dying as in a shell.
        for name in ("SIGPIPE", "SIGXFSZ"):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
        if spec.own_session:
            os.setsid()
        elif spec.own_pgrp:
            os.setpgid(0, 0)
        if out_w >= 0:
            os.dup2(out_w, 1)
        if err_w >= 0:
            os.dup2(err_w, 2)  # dup2 clears O_CLOEXEC on fd 2
        for fd in spec.pass_fds:
            os.set_inheritable(fd, True)
        _close_fds_except(tuple(spec.pass_fds) + (rep_w,))
        if spec.child_setup is not None:
            spec.child_setup()
        try:
            try:
                os.execve(spec.argv[0], spec.argv, spec.env)
            except OSError as e:
                if e.errno != 8 or not spec.exec_is_command:  # ENOEXEC
                    raise
                # An executable file with no #! line is a shell script, as execvp (which
                # bwrap and runc use) and a shell take it.
                try:
                    os.execve("/bin/sh", ["/bin/sh", spec.argv[0]] + list(spec.argv[1:]), spec.env)
                except OSError:
                    raise e from None
        except OSError as e:
            os.write(rep_w, f"exec:{e.errno}:{spec.argv[0]}".encode("utf-8", "replace"))
            code = 127 if e.errno == 2 else 126
    except Refusal as r:
        os.write(rep_w, f"refused:{r.cause}\x00{r.fix}".encode("utf-8", "replace"))
    except BaseException as e:  # anything else before the exec is a refusal, not a crash
        try:
            os.write(rep_w, f"refused:could not set up the sandbox ({e!r})\x00please report this".encode("utf-8", "replace"))
        except BaseException:
            pass
    os._exit(code)
