"""The Landlock runner: the command confines its own process, then execs (runner protocol
in ``sbxc.runtime.spec``).

``prepare`` runs in sbxc's process: takes the rights this kernel's ABI gives the plan
(whether the plan can run on it at all is ``staleness.why_stale``'s question, asked
before), makes the per-run folders that stand in for ``tmpfs`` rules (``rundirs``: locked
while the run lasts; those of killed runs are removed), makes sbxc a child subreaper, and
returns a ``LaunchSpec`` whose ``child_setup`` runs in the forked child, after the core
closed every descriptor above 2: the child stays behind as the command's reaper
(``landlock_reaper``) and the command's process confines itself (``landlock_confine``).

Imports: os, _signal and ctypes (through landlock_sys); fcntl only with per-run folders,
time only when processes are left to end. This is the ``sbxc exec`` hot path.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from . import landlock_sys as ll
from .errors import Refusal
from .landlock_confine import confine
from .landlock_reaper import after_exit, fork_under_reaper, make_subreaper, namespace_errno  # noqa: F401 (doctor)
from .probe import find_command
from .rundirs import make_run_dir
from .staleness import HostNow, landlock_abi_refusal
from .trees import remove_path

# Rights on the terminal the command's stdio already is (see stdio_terminals).
_TTY_RIGHTS = ll.FS_READ_FILE | ll.FS_WRITE_FILE | ll.FS_IOCTL_DEV


def check_abi(low: dict, abi: int, warn) -> tuple[int, int, int, int]:
    """Rights to ask the kernel for, and a warning for what ``best_effort`` runs without;
    refuses (125) when the plan cannot run on ``abi`` (``staleness.landlock_abi_refusal``)."""
    refusal = landlock_abi_refusal(low, abi)
    if refusal is not None:
        raise refusal
    needed = int(low.get("abi_needed", int(low.get("min_abi", 1))))
    fs, net, scoped, _flags = ll.rights_for_abi(abi)
    want_fs, want_net, want_scoped = int(low["handled_fs"]), int(low["handled_net"]), int(low["scoped"])
    lost = ll.fs_names(want_fs & ~fs) + ll.net_names(want_net & ~net) + ll.scope_names(want_scoped & ~scoped)
    if abi < needed and lost:
        warn(f"sbxc: warning: Landlock ABI {abi} (the plan uses {needed}): not enforced on this run: {', '.join(lost)}")
    return want_fs & fs, want_net & net, want_scoped & scoped, abi


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def stdio_terminals() -> list:
    """Paths of the pseudo-terminals the command's stdin, stdout and stderr already are.
    The plan withholds /dev/pts; reopening one of these by path (`>/dev/stderr`, which
    goes through /proc/self/fd/2 to /dev/pts/N) gives nothing the open descriptor does
    not. The device number is compared so that a name reused since is not granted."""
    out = []
    for fd in (0, 1, 2):
        try:
            st = os.fstat(fd)
            if st.st_mode & 0o170000 != 0o020000:
                continue
            name = os.ttyname(fd)
            if name.startswith("/dev/pts/") and os.stat(name).st_rdev == st.st_rdev and name not in out:
                out.append(name)
        except OSError:
            continue
    return out


def prepare(planfile: dict, cmd: list, env: dict, ctx):
    from .spec import LaunchSpec

    low = planfile["lowered"]
    if low.get("network") != ctx.network:
        raise Refusal(f"the plan's Landlock rules are for network {low.get('network')}, this run asks for {ctx.network}",
                      "recompile the plan with that network setting")
    # The masked paths missing at compile time that got no rule (``low["absent"]``) are
    # among the plan's checks: staleness refused the run if one appeared since.
    fs, net, scoped, abi = check_abi(low, (ctx.host if ctx.host is not None else HostNow(ctx.environ)).landlock_abi,
                                     ctx.warn)

    relocate = ctx.cache.relocate if ctx.cache is not None else (lambda p: p)
    rules = [(relocate(p), rights & fs, kind) for p, rights, kind in low["fs_rules"]]
    start_in = None
    if ctx.workspace is not None:
        from .session_mounts import landlock_rules, start_dir

        rules = landlock_rules(rules, ctx.workspace.project, ctx.workspace.path)
        start_in = start_dir(ctx.cwd, ctx.workspace.project, ctx.workspace.path)

    plans_dir = ctx.plans_dir
    if plans_dir:
        for p, rights, _kind in rules:
            if rights & (ll.FS_WRITE_FILE | ll.FS_MAKE_REG | ll.FS_REMOVE_FILE) and (
                    plans_dir == p or plans_dir.startswith(p.rstrip("/") + "/")):
                raise Refusal(f"the plan cache {plans_dir} lies inside {p}, which the policy makes writable",
                              "move the plan cache outside the writable paths (XDG_CACHE_HOME) or narrow the policy")

    cleanups = []
    run_dirs = []
    for base in low.get("tmpfs", ()):
        try:
            d, lock_fd = make_run_dir(base)
        except (PermissionError, FileNotFoundError):
            d, lock_fd = make_run_dir("/tmp")
        # Cleanups run in reverse order: the lock is released after the folder is gone.
        cleanups.append(lambda fd=lock_fd: _close_quietly(fd))
        cleanups.append(lambda d=d: remove_path(d))  # never follows a link the command left
        run_dirs.append(d)
        rules.append((d, fs, "dir"))
    if run_dirs:
        tmp = next((d for d, b in zip(run_dirs, low["tmpfs"]) if b == "/tmp"), run_dirs[0])
        env = dict(env)
        env["TMPDIR"] = tmp

    ports = []
    for lo, hi, right in low.get("net_rules", ()):
        if right & net:
            for port in range(int(lo), int(hi) + 1):
                ports.append((port, right & net))
    if low.get("proxy_port"):
        proxy = getattr(ctx, "proxy", None)
        if proxy is None or not proxy.port:
            raise Refusal("the plan has host rules but no proxy was started for it", "report this")
        if not net & ll.NET_CONNECT_TCP:
            raise Refusal("this kernel's Landlock cannot limit TCP connections (ABI 4 needed) for the host rules",
                          "use --backend bwrap, or a newer kernel")
        # The proxy's loopback port is the only TCP connect the ruleset allows (beside the
        # plan's own port rules): Landlock checks ports, not addresses.
        ports.append((int(proxy.port), ll.NET_CONNECT_TCP))
    bpf = bytes.fromhex(low["seccomp"]) if low.get("seccomp") else b""
    if not bpf:
        raise Refusal("the plan has no seccomp filter", "recompile the plan")

    sbxc_pid = os.getpid()
    limits = make_subreaper()

    def child_setup():
        # Root must get the namespaces: without them its command reaches every root
        # process by pid, and every SysV IPC object of the host.
        if start_in is not None:
            os.chdir(start_in)  # a session's command starts in its workspace (no mount namespace here)
        parent = fork_under_reaper(sbxc_pid, namespaces=True, required=ctx.is_root)  # returns in the command only
        # Asked here, in the command's own process: its stderr may be sbxc's relay
        # pseudo-terminal (supervise, ttyrelay), not sbxc's terminal.
        ttys = [(name, _TTY_RIGHTS & fs, "file") for name in stdio_terminals()] if low.get("stdio_ttys") else []
        # Below the folder the command's runs write (the session's workspace, else the
        # project) no rule path may pass through a link: the plan's paths are real ones,
        # and a link there is one a command (a run of this project still going) made since.
        confine(rules + ttys, ports, fs, net, scoped, bpf, is_root=ctx.is_root, parent_pid=parent,
                no_links_below=ctx.workspace.path if ctx.workspace is not None else
                ctx.project if ctx.project not in ("", "/") else "")

    # The command's own process execs it, so the name is looked up as its shell would;
    # the core answered 127 already for a program not on PATH.
    # A relative name is from the folder the command starts in: a session's is in the
    # workspace (``./build.sh`` is the workspace's copy, not the host project's).
    look = env
    if ctx.workspace is not None:
        from .session_mounts import lookup_env

        look = lookup_env(env, ctx.cwd, ctx.workspace, mounted=False)
    cmd0 = cmd[0] if "/" in cmd[0] else find_command(cmd[0], look)
    if cmd0 and not cmd0.startswith("/"):
        cmd0 = start_in.rstrip("/") + "/" + cmd0 if start_in is not None else os.path.abspath(cmd0)
    argv = [cmd0 or cmd[0]] + list(cmd[1:])
    return LaunchSpec(argv, env, child_setup=child_setup, exec_is_command=True, cleanups=cleanups,
                      after_exit=lambda: _after_exit(limits, getattr(ctx, "proxy", None)))


def _after_exit(limits, proxy) -> None:
    # The proxy is a child of sbxc, which is a subreaper: stopped (and its report read)
    # before every remaining child is killed.
    if proxy is not None:
        proxy.stop()
    after_exit(limits)
