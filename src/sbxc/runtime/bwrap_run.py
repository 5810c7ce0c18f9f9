"""Runner for the bwrap backend (see the runner protocol in ``sbxc.runtime.spec``).

Knowing whether bwrap failed or the command did: bwrap exits 1 for its own failures, as a
command may, and the command's stderr can hold any text, bwrap's messages included. So
the decision comes from bwrap's own channel, never from stderr: ``--json-status-fd``.
bwrap 0.8 writes ``{ "child-pid": N, ... }`` there right after it cloned its child (before
the child's mounts), and ``{ "exit-code": N }`` when that child ended, but only if the
child got as far as exec'ing the command: bwrap tells so through a close-on-exec pipe of
its own, which the command never holds. Checked on bwrap 0.8.0: no ``exit-code`` after a
failed mount, chdir, seccomp load, or ``execvp`` of a missing command; ``exit-code`` after
every command that ran, whatever it printed or however it ended. Hence:

- ``exit-code`` reported: the command ran; its status passes through untouched.
- no ``exit-code`` and bwrap exited non-zero: the command never ran and all of stderr is
  bwrap's. An ``execvp`` failure becomes 127/126 as in a shell; anything else is a
  refusal (125, one ``sbxc:`` line with the cause mapped from bwrap's message).
- no ``exit-code`` and bwrap died of a signal: passed through (128+N); sbxc does not claim
  the command never ran when bwrap itself was killed.

stderr is held back while bwrap sets up (the seccomp program, written into a pipe up front,
is still unread: bwrap reads it after every mount, right before it execs), so that a set-up
failure shows as one ``sbxc:`` line and not raw.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from ..layout import BWRAP_EMPTY_FD as EMPTY_FD
from .errors import Refusal, bwrap_failure, one_line
from .safeopen import read_proc
from .spec import LaunchSpec, drain
from .staleness import HostNow, deepest_check
_FIONREAD = 0x541B  # asm-generic/ioctls.h; the same on x86_64 and aarch64
_PIPE_MAX = 65536  # the default pipe buffer: the whole program must fit before bwrap reads
_PIPE_ATOMIC = 4096  # PIPE_BUF: a write of at most this many bytes to a pipe is never split


def _unread(fd: int) -> int:
    import fcntl

    buf = bytearray(4)
    fcntl.ioctl(fd, _FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def _shared_mounts() -> bool:
    """Whether a mount of this process's namespace is shared (a ``shared:N`` tag in
    /proc/self/mountinfo), so that bwrap's copies of it would receive what the host mounts
    there later; True when the file cannot be read."""
    data = read_proc("/proc/self/mountinfo", 1 << 26)
    return data is None or b" shared:" in data


def _deepest(checks, path: str) -> tuple[str, str]:
    """(rule path, access) of the deepest rule containing ``path``; ("", "none") if none."""
    check = deepest_check(checks, path)
    return (check[0], check[2]) if check is not None else ("", "none")


def prepare(planfile: dict, cmd: list, env: dict, ctx) -> LaunchSpec:
    data = planfile.get("lowered") or {}
    # The trusted lookup, read once per run (a bwrap other than the plan's: staleness).
    found, why = (ctx.host if ctx.host is not None else HostNow(ctx.environ)).bwrap
    if not found and why:
        raise Refusal(f"no bwrap that sbxc may start: {why}",
                      "install bubblewrap in a system folder (apt install bubblewrap), or set SBXC_BWRAP "
                      "to its absolute path in a folder only you or root can write")
    if not found:
        raise Refusal("bwrap is not installed (not in the system program folders on PATH)",
                      "install bubblewrap (apt install bubblewrap), or use --backend landlock")
    net = (planfile.get("runtime") or {}).get("network", "on")
    if data.get("network", net) != net:
        raise Refusal("the plan's bwrap options and its network setting disagree", "recompile the plan")
    bpf = bytes.fromhex(data.get("seccomp") or "")
    if not bpf or len(bpf) % 8 or len(bpf) >= _PIPE_MAX:
        raise Refusal("the plan has no usable seccomp filter", "recompile the plan (sbxc compile -o PLAN)")

    # The command runs in the caller's folder or not at all. bwrap alone would fall back to
    # $HOME or / when the folder is not in the sandbox: `rm -rf build` would then run
    # somewhere the caller did not mean.
    cwd = ctx.cwd
    where, access = _deepest((planfile.get("runtime") or {}).get("checks") or (), cwd)
    if access in ("none", "mask") or (access == "tmpfs" and where != cwd):
        raise Refusal(f"the current folder {cwd} is not in the sandbox (policy: {access})",
                      "run sbxc from a folder the policy shows, e.g. the project")

    opts = list(data.get("argv") or ())
    if net != "on" and ("--unshare-net" not in opts or "--share-net" in opts):
        # Only a namespace of its own keeps the network off or narrowed, and the host's
        # abstract sockets away (no Landlock scope is made for them then, see below).
        raise Refusal("the plan's bwrap options share the host's network although its network setting does not",
                      "recompile the plan")
    cache = ctx.cache
    if cache is not None and getattr(cache, "relocate_argv", None) is not None:
        opts = cache.relocate_argv(opts)
    if ctx.workspace is not None:
        from .session_mounts import bwrap_argv

        ws = ctx.workspace
        opts = bwrap_argv(opts, ws.project, ws.path,
                          _deepest((planfile.get("runtime") or {}).get("checks") or (), ws.project)[1])

    # The plan cache must stay out of every sandbox's reach: an empty read-only folder on
    # top of it, mounted before the masks are made read-only (it may sit inside one).
    plans = ctx.plans_dir
    if plans and os.path.isdir(plans) and not os.path.islink(plans):
        extra = ["--tmpfs", plans]
        try:
            at = opts.index("--remount-ro")
        except ValueError:
            at = len(opts)
        opts[at:at] = extra
        opts += ["--remount-ro", plans]

    proxy = getattr(ctx, "proxy", None)
    if net == "hosts" and (proxy is None or not proxy.in_sandbox):
        raise Refusal("the plan has host rules but no proxy was started for it", "report this")

    fds: list[int] = []
    cleanups = []
    # The seccomp pipe's write end while the program is not written yet, and whether it
    # was: bwrap sets the sandbox up, then reads the program to end of file, and only then
    # execs the command. An end of file with nothing written (sbxc gone before release)
    # makes it fail: the kernel refuses an empty filter (EINVAL), so the command never
    # runs. A program of at most PIPE_BUF bytes is written by one atomic write: never a
    # part of it, which could be a shorter valid filter.
    gate = [-1]
    released = [False]

    def close_all():
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if gate[0] >= 0:
            os.close(gate[0])
            gate[0] = -1

    cleanups.append(close_all)
    wanted = opts.count(EMPTY_FD)
    if wanted > 256:
        # One descriptor per masked file until bwrap has read them: a policy with
        # thousands of masks needs more than the usual soft limit of 1024.
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need = wanted + 64
        if soft != resource.RLIM_INFINITY and soft < need:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))
            except (ValueError, OSError):
                pass  # the open below then fails and refuses, naming the limit
    try:
        for i, a in enumerate(opts):
            if a == EMPTY_FD:
                fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
                fds.append(fd)
                opts[i] = str(fd)
        r, w = os.pipe()
        fds.append(r)
        if len(bpf) <= _PIPE_ATOMIC:
            # The gate (see release below): written once the run's last checks passed.
            gate[0] = w
        else:
            try:
                os.write(w, bpf)  # fits the pipe buffer (checked above): never blocks
            finally:
                os.close(w)  # bwrap reads to end of file
        # bwrap's status channel (see the module docstring): {"child-pid": N} right after
        # the clone (N leads the session and process group the command runs in, where
        # signals should go), {"exit-code": N} once the command ran and ended.
        info_r, info_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        fds += [info_r, info_w]
        block = None
        if net == "hosts":
            # bwrap waits on it before it execs the command, until the proxy's listener
            # is in the sandbox (``launched``). The write end stays with sbxc alone.
            block = list(os.pipe())
            fds.append(block[0])
            cleanups.append(lambda: _close_block(block))
    except OSError as e:
        close_all()
        raise Refusal(f"could not prepare bwrap's descriptors ({e.strerror})", "check the open-files limit (ulimit -n)") from None
    seccomp_fd = r

    wait = ["--block-fd", str(block[0])] if block is not None else []
    argv = [found] + opts + wait + ["--chdir", cwd, "--seccomp", str(seccomp_fd), "--json-status-fd", str(info_w)]
    if data.get("private_mounts") and _shared_mounts():
        # In a mount namespace whose mounts are private, made by unshare(1), which then
        # execs bwrap in the same process (same pid, same descriptors). Only where a mount
        # of this namespace is shared: bwrap's copies of private mounts are private, and no
        # mount the host makes can reach them; only root on the host can make one shared.
        from .bwrap_scope import private_mounts_prefix
        from .probe import host_program

        unshare, why = host_program("unshare", ctx.environ)
        if not unshare:
            close_all()
            raise Refusal("the plan runs bwrap in a private mount namespace through unshare(1), and there is no "
                          + (f"unshare that sbxc may start: {why}" if why else "unshare in the system program folders"),
                          "install util-linux, or recompile the plan on this host (sbxc compile -o PLAN)")
        argv = private_mounts_prefix(unshare, os.geteuid()) + argv
    # bwrap itself runs on the host, outside the sandbox, until it execs the command: its
    # own environment is empty (BWRAP_ENV), and the command's reaches the command alone,
    # through --setenv. Started with the command's, bwrap's dynamic loader would take a
    # policy's LD_PRELOAD or LD_LIBRARY_PATH (env.set), pointing at files an earlier
    # sandboxed run wrote, and run them with the caller's rights.
    for k, v in env.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            close_all()
            raise Refusal(f"the command's environment holds a variable no program can be given ({k[:40]!r})",
                          "remove it from env.set or from the environment sbxc is started with")
        argv += ["--setenv", k, v]
    argv += ["--"] + list(cmd)
    info = bytearray()

    def read_info() -> bytes:
        # Also called from a signal handler. sbxc holds a write end too, so the pipe never
        # reports end of file.
        drain(info_r, info, 65536, 4096)
        return bytes(info)

    def reported(key: bytes):
        """The integer bwrap reported for ``key`` on its status channel, or None."""
        text = read_info()
        at = text.find(b'"' + key + b'":')
        if at < 0:
            return None
        value = text[at + len(key) + 3:].lstrip()
        n = 0
        while n < len(value) and 48 <= value[n] <= 57:
            n += 1
        return int(value[:n]) if n else None

    def signal_target():
        pid = reported(b"child-pid")
        return pid if pid and pid > 1 else None  # not written yet: the caller signals bwrap itself

    def release(go: bool = True) -> bool:
        """``go``: let the command start, writing the seccomp program; False when bwrap
        is already gone (it failed while setting up; its status and message tell why).
        Not ``go``: close the pipe with nothing written, so bwrap ends on its own once it
        reads the program (an empty filter is refused) and the command never starts."""
        fd, gate[0] = gate[0], -1
        if fd < 0:
            return False
        try:
            if go:
                os.write(fd, bpf)
        except BrokenPipeError:
            return False
        finally:
            os.close(fd)
        released[0] = go
        return go

    def started() -> bool:
        return (gate[0] < 0 and (released[0] or release_fn is None)) and _unread(seccomp_fd) == 0

    def ran() -> bool:
        return reported(b"exit-code") is not None

    refused = []

    def launched(pid: int) -> None:
        # bwrap runs, blocked before the command: the proxy's listener goes into the
        # sandbox's network namespace, then bwrap goes on. Any failure kills bwrap first
        # (end of file on the block pipe would let the command run without its proxy).
        joiner = None
        child = None
        try:
            joiner = proxy.joiner()
            child = _child_pid(pid, info_r, reported)
            if child is not None:
                proxy.listen_in(joiner, pid, child)
                os.write(block[1], b"x")  # bwrap goes on
        except BaseException as e:  # noqa: BLE001 - every failure refuses the run
            from .proxy_netns import NetnsError

            why = str(e) if isinstance(e, NetnsError) else f"{type(e).__name__}: {e}"
            refused.append(Refusal(f"the network proxy could not be put into the sandbox ({one_line(why, 200)})",
                                   "check that bwrap may create user and network namespaces (sbxc doctor)"))
            _kill_sandbox(pid, child)
        finally:
            if joiner is not None:
                joiner.close()
            _close_block(block)

    def setup_failed(status: int, early: str):
        if refused:
            return refused[0]
        if status > 128 or ran():
            return None  # the command ran (its status), or bwrap was killed (passed through)
        if status == 0:
            # bwrap reports an exit code for every command that ran, 0 included: a "bwrap"
            # that exits 0 without one started nothing (SBXC_BWRAP naming another program),
            # and no status 0 may say a command ran that did not.
            return Refusal("bwrap exited with status 0 before the command started, without reporting it",
                           "check that SBXC_BWRAP (or the bwrap on PATH) is bubblewrap (sbxc doctor)")
        if started():
            return None  # bwrap's last steps or execvp failed: command_status decides, with the text
        cause, fix = bwrap_failure(early)
        return Refusal(cause, fix)

    def command_status(status: int, first: bytes) -> int:
        if status == 0 or status > 128 or ran():
            return status
        from .supervise import own_line  # bwrap's words before, maybe cut mid-line

        # bwrap got through its mounts but the command never ran: every byte on stderr is
        # bwrap's. "bwrap: execvp NAME: <strerror>" is a shell's 127/126.
        lines = first.split(b"\n")
        for line in lines:
            if line.startswith(b"bwrap: execvp "):
                code = 127 if line.endswith(b"No such file or directory") else 126
                # sbxc's own line, as the other runners write it: the command never ran
                # (a --format json status reads it so), and the reason is sbxc's words.
                own_line(f"sbxc: {one_line(str(cmd[0]), 200)}: "
                         f"{'command not found' if code == 127 else 'cannot execute'}\n")
                return code
        cause, fix = bwrap_failure(first.decode("utf-8", "replace"))
        own_line(Refusal(cause, fix).line() + "\n")
        return 125

    setup = None
    if net == "on":
        # Only the host's network namespace holds the host's abstract sockets: with per-port
        # or host rules the command has a namespace of its own (--unshare-net), where no
        # socket of the host's is bound, and the report claims no scope there.
        from .bwrap_scope import child_setup

        setup = child_setup(int((planfile.get("host") or {}).get("landlock_abi") or 0))
    release_fn = release if gate[0] >= 0 else None
    # The pass_fds exclude the read end of the status pipe: only bwrap's write end goes over.
    return LaunchSpec(argv, dict(BWRAP_ENV), pass_fds=[fd for fd in fds if fd != info_r], exec_is_command=False,
                      child_setup=setup, release=release_fn,
                      started=started, setup_failed=setup_failed, command_status=command_status,
                      cleanups=cleanups, own_pgrp=True, signal_target=signal_target,
                      launched=launched if block is not None else None)


BWRAP_ENV: dict = {}
"""bwrap's own environment: nothing (the command's variables go by --setenv). bwrap needs
none: the command is named by the path sbxc found, messages come in the C locale (which
``bwrap_failure`` reads)."""


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _close_block(block: list) -> None:
    # Closed once: by then the number may belong to a descriptor opened since (the journal's).
    fd, block[1] = block[1], -1
    if fd >= 0:
        _close_quietly(fd)


def _kill_sandbox(bwrap_pid: int, child) -> None:
    """Kill bwrap and its child, and return once both have ended: only then may the block
    pipe close (bwrap's child reads its end of file as the go-ahead). bwrap is sbxc's own
    child, not waited for yet, so its pid cannot have been reused; the child is signalled
    through a pidfd opened while its parent is bwrap."""
    import select
    import signal

    fds = []
    try:
        for pid in (child, bwrap_pid):
            if pid is None:
                continue
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            if pid == child:
                try:
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        mine = int(f.read().rpartition(b")")[2].split()[1]) == bwrap_pid
                except (OSError, ValueError, IndexError):
                    mine = False
                if not mine:
                    # Gone (bwrap's death signal kills it too): not another process.
                    os.close(fd)
                    continue
            fds.append(fd)
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        import time

        end = time.monotonic() + 5.0
        waiting = set(fds)
        while waiting and time.monotonic() < end:
            for fd, _ in poller.poll(100):
                waiting.discard(fd)
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _child_pid(bwrap_pid: int, info_r: int, reported, timeout: float = 10.0):
    """The pid of bwrap's child once bwrap wrote it on its status channel; None when bwrap
    ended first (its own failure, worded as usual by ``setup_failed``). bwrap writes it
    right after clone(2), so the child's namespaces exist by then."""
    import select
    import time

    pidfd = os.pidfd_open(bwrap_pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(info_r, select.POLLIN)
        end = time.monotonic() + timeout
        while True:
            child = reported(b"child-pid")
            if child is not None:
                return child
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("bwrap did not report its child")
            if any(fd == pidfd for fd, _ in poller.poll(int(left * 1000) + 1)) and reported(b"child-pid") is None:
                return None
    finally:
        os.close(pidfd)
