"""The Landlock runner: the command confines its own process, then execs (runtime protocol
in ``sbxc.runtime.spec``).

``prepare`` runs in sbxc's process: checks the kernel's ABI against the plan, makes the
per-run folders that stand in for ``tmpfs`` rules (locked while the run lasts; those of
killed runs are removed), makes sbxc a child subreaper, and returns a ``LaunchSpec``
whose ``child_setup`` runs in the forked child, after the core closed every descriptor
above 2.

Processes. The forked child stays outside the sandbox as a small reaper (``supervise``):
a child subreaper, so every orphan of the command becomes its child; it forks the
command, relays sbxc's forwarded signals to the command's process group, reaps orphans
as they end, and when the command ends kills every remaining descendant and exits with
the command's status (128+N for signal N, as sbxc reports it anyway). When sbxc dies
(even by SIGKILL), its parent-death signal makes it kill them all too. sbxc itself is a
subreaper as well and, after the child ended (``after_exit``), kills whatever is still
below it (processes left when the reaper itself was killed), before the cleanups and
the policy check run.

Namespaces. Where this process may (root: CAP_SYS_ADMIN, still held before confine
drops it), the reaper unshares CLONE_NEWPID|CLONE_NEWIPC first; its first child is the
new PID namespace's idle init and the command its second (``_start_namespace_init``
says why the command is not PID 1). The command then reaches no process outside its
namespace by pid (kill, prlimit, setpriority, pidfd_open ... answer ESRCH; sbxc and the
reaper are outside) and no SysV IPC object of the host; when the init ends the kernel
ends everything in the namespace, so sbxc and the reaper killed together leave nothing.
Root without it is refused: its command would reach every root process. An
unprivileged user gets it only inside a user namespace, which this backend exists to do
without: its command shares the host's namespaces (``sbxc doctor`` says which). There
is no mount namespace, so /proc stays the host's procfs: /proc/self still names the
reader (resolved in the procfs's namespace), but with its host number, not getpid()'s.

Resource limits. A process of the same uid may lower another's limits (prlimit(2)); sbxc
and the reaper note theirs before the run and put the soft limits back before their
post-run work (``restore_limits``), so that running out of descriptors cannot turn
"cannot list the command's processes" into "none left".

In the command's process, forked by the reaper:

  0. the parent-death signal: the command is killed when the reaper dies;
  1. setsid: no controlling terminal, so TIOCSTI or TIOCLINUX could not reach the caller's
     (they are refused by seccomp as well);
  2. a fresh anonymous session keyring: the caller's keys are not reachable through
     @s (keyctl is refused by seccomp as well);
  3. capabilities: ambient cleared, bounding set emptied and securebits locked when the
     process may (root), effective/permitted/inheritable zeroed: root's exec regains
     nothing (its new permitted set is bounded by the empty bounding set);
  4. PR_SET_NO_NEW_PRIVS (required by both Landlock and unprivileged seccomp);
  5. the Landlock ruleset: landlock_restrict_self;
  6. the seccomp filter bytes (compiled at compile time; no libseccomp here).

Then the core execs the command: nothing else runs between the restriction and the exec.
Any failure raises Refusal: the child exits 125 and the command never starts.

Imports: os, _signal and ctypes (through landlock_sys); fcntl only with per-run folders,
time only when processes are left to end. This is the ``sbxc exec`` hot path.
"""
from __future__ import annotations

import os

from . import landlock_sys as ll
from .errors import Refusal

PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECUREBITS = 28
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED and their _LOCKED bits: a uid-0 exec
# does not regain capabilities, and nothing can undo that.
SECURE_BITS_LOCKED = 0x2F
SECCOMP_SET_MODE_FILTER = 1
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
# Both need CAP_SYS_ADMIN in the caller's user namespace: root has it (until confine drops
# it), an unprivileged user only inside a user namespace, which this backend does without.
NS_FLAGS = CLONE_NEWPID | CLONE_NEWIPC
# RLIMIT_CPU .. RLIMIT_RTTIME: the generic numbering, shared by x86_64 and aarch64.
_RLIMIT_NAMES = ("cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
                 "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime")
_CAPABILITY_VERSION_3 = 0x20080522
_SYSCALLS = {
    # name: (x86_64, aarch64)
    "keyctl": (250, 219),
    "capset": (126, 91),
    "seccomp": (317, 277),
}
KEYCTL_JOIN_SESSION_KEYRING = 1

_O_PATH = os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RUN_PREFIX = "sbxc-run-"
_SIGKILL = 9
_SIGTERM = 15
# Signals sbxc forwards to its child (launch._FORWARD); the reaper passes them on.
_RELAYED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")
# Rights on the terminal the command's stdio already is (see stdio_terminals).
_TTY_RIGHTS = ll.FS_READ_FILE | ll.FS_WRITE_FILE | ll.FS_IOCTL_DEV


def _which(cmd0: str, env: dict) -> str:
    if "/" in cmd0:
        return cmd0 if cmd0.startswith("/") else os.path.abspath(cmd0)
    for d in (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":"):
        p = (d or ".") + "/" + cmd0
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return p if p.startswith("/") else os.path.abspath(p)
    return cmd0  # the core already answered 127 for a missing program


def kernel_abi() -> int:
    return ll.Landlock().abi()


def check_abi(low: dict, abi: int, warn) -> tuple[int, int, int, int]:
    """Rights to ask the kernel for; refuses (125) when the plan cannot run on ``abi``."""
    min_abi = int(low.get("min_abi", 1))
    needed = int(low.get("abi_needed", min_abi))
    if abi <= 0:
        raise Refusal("Landlock is not available on this kernel (ABI 0: missing or disabled)",
                      "boot with lsm=...,landlock, or use --backend bwrap")
    if abi < min_abi:
        raise Refusal(f"this kernel's Landlock ABI is {abi}, the policy asks for at least {min_abi} (landlock.min_abi)",
                      "run on a newer kernel, or lower landlock.min_abi")
    fs, net, scoped, _flags = ll.rights_for_abi(abi)
    want_fs, want_net, want_scoped = int(low["handled_fs"]), int(low["handled_net"]), int(low["scoped"])
    lost = ll.fs_names(want_fs & ~fs) + ll.net_names(want_net & ~net) + ll.scope_names(want_scoped & ~scoped)
    if abi < needed and lost:
        if not low.get("best_effort"):
            raise Refusal(f"this kernel's Landlock ABI is {abi}, the plan needs {needed} (for {', '.join(lost)})",
                          "run on a newer kernel, or set landlock.best_effort: true to run without them")
        warn(f"sbxc: warning: Landlock ABI {abi} (the plan uses {needed}): not enforced on this run: {', '.join(lost)}")
    return want_fs & fs, want_net & net, want_scoped & scoped, abi


def _make_run_dir(base: str) -> tuple[str, int]:
    """A fresh 0700 folder with a random name in ``base``, opened and checked without
    following symlinks (``base`` may be shared, e.g. /tmp), and locked (flock) for as long
    as the returned descriptor stays open: ``reap_run_dirs`` never takes a locked one."""
    import fcntl

    reap_run_dirs(base)
    for _ in range(16):
        name = RUN_PREFIX + os.urandom(8).hex()
        path = base.rstrip("/") + "/" + name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        try:
            fd = os.open(path, _O_DIR)
        except OSError:
            fd = -1
        st = os.fstat(fd) if fd >= 0 else None
        if st is None or st.st_uid != os.geteuid():
            if fd >= 0:
                os.close(fd)
            raise Refusal(f"the per-run folder {path} is not the folder sbxc made", "check who else writes to " + base)
        # A reaper sees the folder unlocked between the mkdir and this flock; the age rule
        # (cachedir.STALE_AFTER) covers that window.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return path, fd
    raise Refusal(f"could not make a per-run folder in {base}", "check that it is writable")


def reap_run_dirs(base: str, now: float | None = None) -> int:
    """Remove this user's per-run folders in ``base`` that no run holds (unlocked) and that
    are older than ``cachedir.STALE_AFTER``: left by an sbxc that was killed. Best effort;
    returns how many were removed."""
    import fcntl
    import time

    from .cachedir import STALE_AFTER
    from .trees import remove_tree

    now = time.time() if now is None else now
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    n = 0
    try:
        try:
            with os.scandir(base_fd) as it:
                names = [e.name for e in it if e.name.startswith(RUN_PREFIX) and len(e.name) == len(RUN_PREFIX) + 16]
        except OSError:
            return 0
        for name in names:
            try:
                fd = os.open(name, _O_DIR, dir_fd=base_fd)
            except OSError:
                continue  # a link, a file, gone: not a folder we made
            try:
                st = os.fstat(fd)
                if st.st_uid != os.geteuid() or now - st.st_mtime < STALE_AFTER:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a running sbxc holds it
                # Holding the lock while deleting: a run starting now makes a new name.
                try:
                    remove_tree(base_fd, name)
                    n += 1
                except OSError:
                    pass
            finally:
                os.close(fd)
    finally:
        os.close(base_fd)
    return n


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


def _children() -> list:
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
        kids = _children()
        if not kids:
            return 0
        for pid in kids:
            try:
                os.kill(pid, _SIGKILL)
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
    return len(_children())


def own_limits(ctypes, libc) -> list:
    """This process's (soft, hard) resource limits, by RLIMIT number (None: unreadable)."""
    lim = (ctypes.c_uint64 * 2)()
    out = []
    for res in range(len(_RLIMIT_NAMES)):
        out.append((lim[0], lim[1]) if libc.prlimit64(0, res, None, lim) == 0 else None)
    return out


def restore_limits(ctypes, libc, saved: list, who: str) -> str:
    """Put this process's soft limits back to ``saved`` (``own_limits`` before the run), as
    far as the current hard limits allow, and return a warning line if any limit had
    changed ("" if none). A process of the same uid may lower another's limits with
    prlimit(2), hard ones included (lowering needs no capability): a post-run check that
    runs out of descriptors or memory could otherwise report "nothing to do". A lowered
    hard limit cannot be raised back without CAP_SYS_RESOURCE."""
    lim = (ctypes.c_uint64 * 2)()
    changed, stuck = [], []
    for res, was in enumerate(saved):
        if was is None or libc.prlimit64(0, res, None, lim) != 0:
            continue
        soft, hard = lim[0], lim[1]
        if (soft, hard) == was:
            continue
        changed.append(_RLIMIT_NAMES[res])
        want = min(was[0], hard)
        if want != soft:
            new = (ctypes.c_uint64 * 2)(want, hard)
            libc.prlimit64(0, res, new, None)
        if hard < was[0]:
            stuck.append(_RLIMIT_NAMES[res])
    if not changed:
        return ""
    line = (f"sbxc: warning: a process changed the resource limits of {who} while the command ran "
            f"({', '.join(changed)}); soft limits were put back")
    if stuck:
        line += f", except where the hard limit was lowered ({', '.join(stuck)}): post-run checks may be incomplete"
    return line + "\n"


def _after_exit(limits=None) -> None:
    import sys

    if limits is not None:
        ctypes, libc = _libc()
        warning = restore_limits(ctypes, libc, limits, "sbxc")
        if warning:
            sys.stderr.write(warning)
    left = end_descendants()
    if left:
        sys.stderr.write(f"sbxc: warning: {left} process(es) the command started could not be ended\n")


def namespace_errno() -> int:
    """0 when this process may give the command new PID and IPC namespaces (NS_FLAGS),
    else the errno unshare(2) gives. Tried in a forked child: unshare(CLONE_NEWPID) here
    would send this process's later children into a namespace that ends with the first."""
    ctypes, libc = _libc()
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            code = 0 if libc.unshare(NS_FLAGS) == 0 else min(ctypes.get_errno() or 255, 254)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 255


def _remove_tree(path: str) -> None:
    """Remove a folder the command wrote to, never following a symlink it left there."""
    from .trees import remove_path

    remove_path(path)


def prepare(planfile: dict, cmd: list, env: dict, ctx):
    from .spec import LaunchSpec

    low = planfile["lowered"]
    if low.get("network") != ctx.network:
        raise Refusal(f"the plan's Landlock rules are for network {low.get('network')}, this run asks for {ctx.network}",
                      "recompile the plan with that network setting")
    fs, net, scoped, abi = check_abi(low, kernel_abi(), ctx.warn)

    for path in low.get("absent", ()):
        # A masked path that was missing at compile time got no rule (nothing to hide,
        # nothing could create it); if it exists now, the plan no longer hides it.
        if os.path.lexists(path):
            raise Refusal(f"{path} is masked by the policy and appeared after the plan was compiled",
                          "compile the plan again (sbxc compile), then run")

    relocate = ctx.cache.relocate if ctx.cache is not None else (lambda p: p)
    rules = [(relocate(p), rights & fs, kind) for p, rights, kind in low["fs_rules"]]

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
            d, lock_fd = _make_run_dir(base)
        except (PermissionError, FileNotFoundError):
            d, lock_fd = _make_run_dir("/tmp")
        # Cleanups run in reverse order: the lock is released after the folder is gone.
        cleanups.append(lambda fd=lock_fd: _close_quietly(fd))
        cleanups.append(lambda d=d: _remove_tree(d))
        run_dirs.append(d)
        rules.append((d, fs, "dir"))
    if low.get("stdio_ttys"):
        for name in stdio_terminals():
            rules.append((name, _TTY_RIGHTS & fs, "file"))
    if run_dirs:
        tmp = next((d for d, b in zip(run_dirs, low["tmpfs"]) if b == "/tmp"), run_dirs[0])
        env = dict(env)
        env["TMPDIR"] = tmp

    ports = []
    for lo, hi, right in low.get("net_rules", ()):
        if right & net:
            for port in range(int(lo), int(hi) + 1):
                ports.append((port, right & net))
    bpf = bytes.fromhex(low["seccomp"]) if low.get("seccomp") else b""
    if not bpf:
        raise Refusal("the plan has no seccomp filter", "recompile the plan")

    sbxc_pid = os.getpid()
    ctypes, libc = _libc()
    # Orphans of the command's processes come to sbxc when its reaper is gone (see the
    # module text); set before the fork, so nothing escapes to init in between.
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise _fail("making sbxc a child subreaper", ctypes.get_errno())
    limits = own_limits(ctypes, libc)

    def child_setup():
        # Root must get the namespaces: without them its command reaches every root
        # process by pid, and every SysV IPC object of the host.
        parent = supervise(sbxc_pid, namespaces=True, required=ctx.is_root)  # returns in the command only
        confine(rules, ports, fs, net, scoped, bpf, is_root=ctx.is_root, parent_pid=parent)

    argv = [_which(cmd[0], env)] + list(cmd[1:])
    return LaunchSpec(argv, env, child_setup=child_setup, exec_is_command=True, cleanups=cleanups,
                      after_exit=lambda: _after_exit(limits))


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return ctypes, libc


def _nr(name: str) -> int:
    return _SYSCALLS[name][0 if os.uname().machine == "x86_64" else 1]


def _fail(what: str, err: int) -> Refusal:
    return Refusal(f"{what} failed ({os.strerror(err)})", "see `sbxc doctor`; the command was not started")


def drop_privileges(ctypes, libc, is_root: bool) -> None:
    if is_root:
        if libc.prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKED, 0, 0, 0) != 0:
            raise _fail("locking securebits", ctypes.get_errno())
        try:
            last = int(open("/proc/sys/kernel/cap_last_cap").read())
        except (OSError, ValueError):
            last = 63
        for cap in range(last + 1):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
                raise _fail(f"dropping capability {cap} from the bounding set", ctypes.get_errno())
    # Ambient capabilities survive exec for non-root too.
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
        raise _fail("clearing ambient capabilities", ctypes.get_errno())
    hdr = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    if libc.syscall(ctypes.c_long(_nr("capset")), hdr, data) != 0:
        raise _fail("dropping capabilities", ctypes.get_errno())


def supervise(sbxc_pid: int, namespaces: bool = False, required: bool = False) -> int:
    """In sbxc's forked child, before any confinement: fork the command's process and
    stay behind as its reaper (see the module text). With ``namespaces``, the command
    gets new PID and IPC namespaces where this process may make them (``required``: or
    the run is refused). Returns, in the command's process only, what its getppid()
    must say while the reaper lives (the reaper's PID; 0 when the reaper is outside the
    command's PID namespace); the reaper itself never returns (it must never reach the
    exec, which would run the command unconfined)."""
    import _signal

    ctypes, libc = _libc()
    me = os.getpid()
    limits = own_limits(ctypes, libc)
    state = {"cmd": 0}

    def relay(signum, _frame):
        if os.getpid() != me:
            return  # the command's process between fork and exec: its exec resets this
        if os.getppid() != sbxc_pid:
            # sbxc is gone (the parent-death signal): nothing may outlive it.
            end_descendants()
            os._exit(128 + _SIGKILL)
        if state["cmd"] > 0:
            try:
                os.killpg(state["cmd"], signum)  # the command's session: as bwrap's runner does
            except (ProcessLookupError, PermissionError):
                pass

    # Handlers first, then the death signal, then the check: sbxc dying at any point
    # is either seen by getppid() here or delivered to a handler that acts on it.
    for name in _RELAYED:
        _signal.signal(getattr(_signal, name), relay)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # SIGCHLD: sbxc's wake-up handler is not ours
    try:
        _signal.set_wakeup_fd(-1)  # sbxc's wake-up pipe was closed with the other descriptors
    except (ValueError, OSError):
        pass
    if libc.prctl(PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0) != 0:
        raise _fail("setting the parent-death signal", ctypes.get_errno())
    if os.getppid() != sbxc_pid:
        raise Refusal("sbxc ended while the sandbox was being set up", "run the command again")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise _fail("making the sandbox's reaper a child subreaper", ctypes.get_errno())
    # Out of the caller's terminal's process group: Ctrl-C reaches sbxc, which forwards.
    os.setsid()
    hold = -1
    if namespaces:
        if libc.unshare(NS_FLAGS) == 0:
            hold = _start_namespace_init()
        elif required:
            err = ctypes.get_errno()
            raise Refusal(f"new PID and IPC namespaces for the root command could not be made ({os.strerror(err)}), "
                          "and without them it would reach every root process and the host's IPC objects",
                          "give sbxc CAP_SYS_ADMIN (a container may withhold it), or run it as an unprivileged user")
    pid = os.fork()
    if pid == 0:
        if hold >= 0:
            os.close(hold)
            return 0  # the reaper is in the parent namespace: getppid() is 0 while it lives
        return me
    code = 125
    try:
        state["cmd"] = pid
        # The reaper holds nothing of the command's: not the report pipe (sbxc reads it
        # to its end), not the per-run locks, not stdin/stdout (a reader downstream must
        # see the end of the output when the command's processes are gone). It keeps
        # ``hold``, whose other end tells the namespace's init that the reaper lives.
        if hold >= 0:
            os.closerange(3, hold)
            os.closerange(hold + 1, 1 << 20)
        else:
            os.closerange(3, 1 << 20)
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        if null > 2:
            os.close(null)
        status = None
        for _ in range(1 << 40):  # ends with the command: every round reaps one of its processes
            try:
                done, st = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if done == pid:
                status = st
                break
        if status is not None:
            rc = os.waitstatus_to_exitcode(status)
            code = 128 - rc if rc < 0 else rc
        warning = restore_limits(ctypes, libc, limits, "the sandbox's reaper")
        if warning:
            os.write(2, warning.encode())
        try:
            left = end_descendants()
        except OSError as e:
            # The orphans come to sbxc, a subreaper too, which tries again (after_exit).
            os.write(2, f"sbxc: warning: the sandbox's reaper could not list the command's processes ({e.strerror})\n"
                     .encode())
            left = 0
        if left:
            os.write(2, f"sbxc: warning: {left} process(es) the command started could not be ended\n".encode())
    finally:
        try:
            end_descendants()
        finally:
            os._exit(code)
    raise AssertionError("unreachable")


def _start_namespace_init() -> int:
    """After unshare(CLONE_NEWPID): fork the new PID namespace's init (PID 1) and return
    the write end of a pipe that it reads until the reaper is gone.

    The init is the namespace, not the command's parent: the command is the reaper's
    second child (PID 2), so it keeps ordinary signal semantics. A PID 1 ignores every
    signal it has no handler for, also the command's own `kill -TERM $$` or a forwarded
    Ctrl-C, which a command that is PID 1 would not see. Orphans of the command's
    processes go to this init (a subreaper in the parent namespace is not asked); with
    SIGCHLD ignored the kernel reaps them. When the init ends (the reaper kills it after
    the command, or the reaper dies: the pipe's end, or the parent-death signal, which a
    signal from the parent namespace delivers), the kernel kills every process in the
    namespace and waits for them before the init can be reaped: nothing the command
    started outlives the run, even when sbxc and the reaper are killed together. The
    command can reach this init (it is PID 1 there), but it has no handler, holds no
    descriptor but the pipe and does no post-run work; ending it ends the sandbox."""
    import _signal

    r, w = os.pipe()
    pid = os.fork()
    if pid != 0:
        os.close(r)
        return w
    try:
        for name in _RELAYED:
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
        ctypes, libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        # Everything else is sbxc's: above all the report pipe, which sbxc reads to its end.
        os.closerange(0, r)
        os.closerange(r + 1, 1 << 20)
        # The reaper holds w for as long as it lives, so this read ends only with it (the
        # parent-death signal is only armed now: this also covers a reaper that died before).
        while os.read(r, 64):
            pass
    finally:
        os._exit(0)
    raise AssertionError("unreachable")


def confine(rules, ports, fs: int, net: int, scoped: int, bpf: bytes, *, is_root: bool, parent_pid: int) -> None:
    """In the command's process: everything between fork and exec (see the module text)."""
    import _signal

    for name in _RELAYED:
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)  # the reaper's handlers are not the command's
    ctypes, libc = _libc()
    # The command dies with its reaper (SPEC §5): the death signal survives exec (not a
    # setuid one, and no-new-privileges rules those out). If the reaper died before the
    # prctl, the parent changed already: stop.
    if libc.prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
        raise _fail("setting the parent-death signal", ctypes.get_errno())
    if os.getppid() != parent_pid:
        raise Refusal("sbxc ended while the sandbox was being set up", "run the command again")
    os.setsid()
    if libc.syscall(ctypes.c_long(_nr("keyctl")), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None) < 0:
        err = ctypes.get_errno()
        # ENOSYS: no keyrings in this kernel; EPERM/EACCES: an outer seccomp policy
        # refuses keyctl, and it refuses it to the command as well. Anything else: stop.
        if err not in (38, 1, 13):
            raise _fail("making a fresh session keyring", err)
    drop_privileges(ctypes, libc, is_root)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("setting no-new-privileges", ctypes.get_errno())

    lk = ll.Landlock(libc)
    try:
        rfd = lk.create_ruleset(fs, net, scoped)
    except OSError as e:
        raise _fail("creating the Landlock ruleset", e.errno) from None
    try:
        for path, rights, kind in rules:
            if not rights:
                continue
            try:
                fd = os.open(path, _O_PATH)
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since compile time: it gets nothing (less access, never more)
            except OSError as e:
                raise Refusal(f"cannot open {path} for its Landlock rule ({e.strerror})", "check the path") from None
            try:
                st = os.fstat(fd)
                is_dir = st.st_mode & 0o170000 == 0o040000
                if st.st_mode & 0o170000 == 0o120000:
                    continue  # became a symlink: a rule on the link inode grants nothing
                if not is_dir:
                    rights &= ll.FS_EXECUTE | ll.FS_WRITE_FILE | ll.FS_READ_FILE | ll.FS_TRUNCATE | ll.FS_IOCTL_DEV
                    if not rights:
                        continue
                try:
                    lk.add_path(rfd, fd, rights)
                except OSError as e:
                    raise _fail(f"adding the Landlock rule for {path}", e.errno) from None
            finally:
                os.close(fd)
        for port, right in ports:
            try:
                lk.add_port(rfd, port, right)
            except OSError as e:
                raise _fail(f"adding the Landlock rule for TCP port {port}", e.errno) from None
        try:
            lk.restrict_self(rfd, 0)
        except OSError as e:
            raise _fail("landlock_restrict_self", e.errno) from None
    finally:
        os.close(rfd)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.syscall(ctypes.c_long(_nr("seccomp")), ctypes.c_uint(SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0),
                    ctypes.byref(prog)) != 0:
        raise _fail("loading the seccomp filter", ctypes.get_errno())
