"""The Landlock command's own confinement: everything between its fork and its exec.

In the command's process, forked by the reaper (``sbxc.runtime.landlock_reaper``):

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

Imports: os and ctypes (through landlock_sys).
"""
import os

from . import landlock_sys as ll
from .errors import Refusal
from .supervise import default_signals

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
_SIGKILL = 9

_O_PATH = os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW


def libc_handle():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return ctypes, libc


def _nr(name: str) -> int:
    return _SYSCALLS[name][0 if os.uname().machine == "x86_64" else 1]


def fail(what: str, err: int) -> Refusal:
    return Refusal(f"{what} failed ({os.strerror(err)})", "see `sbxc doctor`; the command was not started")


def drop_privileges(ctypes, libc, is_root: bool) -> None:
    if is_root:
        if libc.prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKED, 0, 0, 0) != 0:
            raise fail("locking securebits", ctypes.get_errno())
        try:
            last = int(open("/proc/sys/kernel/cap_last_cap").read())
        except (OSError, ValueError):
            last = 63
        for cap in range(last + 1):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
                raise fail(f"dropping capability {cap} from the bounding set", ctypes.get_errno())
    # Ambient capabilities survive exec for non-root too.
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
        raise fail("clearing ambient capabilities", ctypes.get_errno())
    hdr = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    if libc.syscall(ctypes.c_long(_nr("capset")), hdr, data) != 0:
        raise fail("dropping capabilities", ctypes.get_errno())


def _open_below(top: str, path: str) -> int:
    """O_PATH descriptor of ``path``, which lies at or below ``top``, reached one component
    at a time from ``top`` without following a link: a folder on the way that became a link
    is refused (Refusal), a link as the last component is returned as the link itself (its
    rule then grants nothing). ``top`` is a folder the command may have written (a
    session's workspace): a plain open would follow a link it planted there, and the
    rule would reach the link's target."""
    fd = os.open(top, _O_PATH | os.O_DIRECTORY)
    rest = path[len(top):].strip("/")
    parts = rest.split("/") if rest else []
    for i, name in enumerate(parts):
        try:
            nfd = os.open(name, _O_PATH, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nfd
        if i < len(parts) - 1 and os.fstat(fd).st_mode & 0o170000 == 0o120000:
            os.close(fd)
            where = top.rstrip("/") + "/" + "/".join(parts[:i + 1])
            raise Refusal(f"{where} is a link now, where the policy's rule for {path} needs a folder (the rule would "
                          "reach the link's target; a sandboxed command may have made it)",
                          "remove the link (in a session: from its workspace, or drop the session), then run again")
    return fd


def confine(rules, ports, fs: int, net: int, scoped: int, bpf: bytes, *, is_root: bool, parent_pid: int,
            no_links_below: str = "") -> None:
    """In the command's process: everything between fork and exec (see the module text)."""
    default_signals()  # the reaper's handlers are not the command's
    ctypes, libc = libc_handle()
    # The command dies with its reaper (SPEC §5): the death signal survives exec (not a
    # setuid one, and no-new-privileges rules those out). If the reaper died before the
    # prctl, the parent changed already: stop.
    if libc.prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
        raise fail("setting the parent-death signal", ctypes.get_errno())
    if os.getppid() != parent_pid:
        raise Refusal("sbxc ended while the sandbox was being set up", "run the command again")
    os.setsid()
    if libc.syscall(ctypes.c_long(_nr("keyctl")), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None) < 0:
        err = ctypes.get_errno()
        # ENOSYS: no keyrings in this kernel; EPERM/EACCES: an outer seccomp policy
        # refuses keyctl, and it refuses it to the command as well. Anything else: stop.
        if err not in (38, 1, 13):
            raise fail("making a fresh session keyring", err)
    drop_privileges(ctypes, libc, is_root)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise fail("setting no-new-privileges", ctypes.get_errno())

    lk = ll.Landlock(libc)
    try:
        rfd = lk.create_ruleset(fs, net, scoped)
    except OSError as e:
        raise fail("creating the Landlock ruleset", e.errno) from None
    try:
        for path, rights, kind in rules:
            if not rights:
                continue
            try:
                if no_links_below and (path == no_links_below or path.startswith(no_links_below.rstrip("/") + "/")):
                    fd = _open_below(no_links_below, path)
                else:
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
                    raise fail(f"adding the Landlock rule for {path}", e.errno) from None
            finally:
                os.close(fd)
        for port, right in ports:
            try:
                lk.add_port(rfd, port, right)
            except OSError as e:
                raise fail(f"adding the Landlock rule for TCP port {port}", e.errno) from None
        try:
            lk.restrict_self(rfd, 0)
        except OSError as e:
            raise fail("landlock_restrict_self", e.errno) from None
    finally:
        os.close(rfd)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.syscall(ctypes.c_long(_nr("seccomp")), ctypes.c_uint(SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0),
                    ctypes.byref(prog)) != 0:
        raise fail("loading the seccomp filter", ctypes.get_errno())
