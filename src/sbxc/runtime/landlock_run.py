"""The Landlock runner: the command confines its own process, then execs (runtime protocol
in ``sbxc.runtime.launch``).

``prepare`` runs in sbxc's process: checks the kernel's ABI against the plan, makes the
per-run folders that stand in for ``tmpfs`` rules, and returns a ``LaunchSpec`` whose
``child_setup`` runs in the forked child, after the core closed every descriptor above 2:

  0. the parent-death signal: the command is killed when sbxc dies;
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

Imports: os and ctypes (through landlock_sys) only; this is the ``sbxc exec`` hot path.
"""
from __future__ import annotations

import os

from . import landlock_sys as ll
from .errors import Refusal

PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECUREBITS = 28
# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED and their _LOCKED bits: a uid-0 exec
# does not regain capabilities, and nothing can undo that.
SECURE_BITS_LOCKED = 0x2F
SECCOMP_SET_MODE_FILTER = 1
_CAPABILITY_VERSION_3 = 0x20080522
_SYSCALLS = {
    # name: (x86_64, aarch64)
    "keyctl": (250, 219),
    "capset": (126, 91),
    "seccomp": (317, 277),
}
KEYCTL_JOIN_SESSION_KEYRING = 1

_O_PATH = os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW


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


def _make_run_dir(base: str) -> str:
    """A fresh 0700 folder with a random name in ``base``, opened and checked without
    following symlinks (``base`` may be shared, e.g. /tmp)."""
    for _ in range(16):
        name = "sbxc-run-" + os.urandom(8).hex()
        path = base.rstrip("/") + "/" + name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        st = os.lstat(path)
        if not (st.st_mode & 0o170000 == 0o040000) or st.st_uid != os.geteuid():
            raise Refusal(f"the per-run folder {path} is not the folder sbxc made", "check who else writes to " + base)
        return path
    raise Refusal(f"could not make a per-run folder in {base}", "check that it is writable")


def _remove_tree(path: str) -> None:
    """Remove a folder the command wrote to, never following a symlink it left there."""
    parent, _, name = path.rpartition("/")
    try:
        pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        _remove_entry(pfd, name)
    finally:
        os.close(pfd)


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    try:
        try:
            os.fchmod(fd, 0o700)  # the command may have made it read-only
        except OSError:
            pass
        for entry in os.listdir(fd):
            _remove_entry(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def prepare(planfile: dict, cmd: list, env: dict, ctx):
    from .launch import LaunchSpec

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
            d = _make_run_dir(base)
        except (PermissionError, FileNotFoundError):
            d = _make_run_dir("/tmp")
        cleanups.append(lambda d=d: _remove_tree(d))
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
    bpf = bytes.fromhex(low["seccomp"]) if low.get("seccomp") else b""
    if not bpf:
        raise Refusal("the plan has no seccomp filter", "recompile the plan")

    sbxc_pid = os.getpid()

    def child_setup():
        confine(rules, ports, fs, net, scoped, bpf, is_root=ctx.is_root, sbxc_pid=sbxc_pid)

    argv = [_which(cmd[0], env)] + list(cmd[1:])
    return LaunchSpec(argv, env, child_setup=child_setup, exec_is_command=True, cleanups=cleanups)


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


def confine(rules, ports, fs: int, net: int, scoped: int, bpf: bytes, *, is_root: bool, sbxc_pid: int) -> None:
    """In the forked child: everything between fork and exec (see the module text)."""
    ctypes, libc = _libc()
    # The command dies with sbxc (SPEC §5): the death signal survives exec (not a setuid
    # one, and no-new-privileges rules those out). If sbxc died before the prctl, the
    # parent changed already: stop.
    if libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0:
        raise _fail("setting the parent-death signal", ctypes.get_errno())
    if os.getppid() != sbxc_pid:
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
