"""Host probing: the facts a plan assumes (``HostFacts``). The only place that asks the OS.

Cheap facts (uid, home, Landlock ABI, where bwrap is) cost no subprocess; the ones that do
(bwrap's version, whether it can make namespaces) are asked for explicitly.
"""
from __future__ import annotations

import os

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}


def arch() -> str:
    return os.uname().machine


def home_of(environ) -> str:
    """The caller's home as a shell expands ``~``: ``$HOME``, else the password database."""
    home = environ.get("HOME")
    if home:
        return home
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    nr = _SYS_LANDLOCK_CREATE_RULESET.get(arch())
    if nr is None:
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(nr), None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return abi if abi > 0 else 0


def which(name: str, environ) -> str:
    for d in (environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":"):
        if d.startswith("/"):
            p = os.path.join(d, name)
            if os.access(p, os.X_OK) and not os.path.isdir(p):
                return os.path.realpath(p)
    return ""


def seccomp_available() -> bool:
    return os.path.exists("/proc/sys/kernel/seccomp/actions_avail")


def bwrap_version(bwrap: str) -> str:
    import subprocess

    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().split()[-1] if out.strip() else ""


def userns_works(bwrap: str) -> tuple[bool, str]:
    """Whether bwrap can make its namespaces here; with the reason when it cannot."""
    import subprocess

    if not bwrap:
        return False, "bwrap is not installed"
    try:
        r = subprocess.run(
            [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"bwrap could not start: {e}"
    if r.returncode == 0:
        return True, "bwrap made user, mount, PID, IPC and network namespaces"
    return False, (r.stderr.strip().splitlines() or ["bwrap failed"])[-1]


def dir_listings(dirs) -> tuple:
    """Entries of each folder as ``(name, kind)`` (kind: dir, file, symlink, socket, other),
    without following symlinks; a folder that cannot be read lists as empty (its entries
    then get no rights: less access, never more)."""
    out = []
    for d in sorted(set(dirs)):
        entries = []
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_symlink():
                            kind = "symlink"
                        elif e.is_dir(follow_symlinks=False):
                            kind = "dir"
                        elif e.is_file(follow_symlinks=False):
                            kind = "file"
                        else:
                            import stat

                            mode = e.stat(follow_symlinks=False).st_mode
                            kind = "socket" if stat.S_ISSOCK(mode) else "other"
                    except OSError:
                        continue
                    entries.append((e.name, kind))
        except OSError:
            pass
        out.append((d, tuple(sorted(entries))))
    return tuple(out)


def probe_host(environ=None, *, full: bool = True):
    """Gather HostFacts. ``full=False`` skips the subprocesses (bwrap version, namespace test)."""
    from ..hostfacts import HostFacts

    environ = os.environ if environ is None else environ
    uname = os.uname()
    bwrap = which("bwrap", environ) if uname.sysname == "Linux" else ""
    return HostFacts(
        platform="darwin" if uname.sysname == "Darwin" else "linux",
        arch=uname.machine,
        uid=os.getuid(),
        gid=os.getgid(),
        home=home_of(environ),
        landlock_abi=landlock_abi() if uname.sysname == "Linux" else 0,
        bwrap=bwrap,
        bwrap_version=bwrap_version(bwrap) if (full and bwrap) else "",
        userns=userns_works(bwrap)[0] if full else bool(bwrap),
        seccomp=seccomp_available() if uname.sysname == "Linux" else False,
    )
