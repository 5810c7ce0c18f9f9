"""Host probing: the facts a plan assumes (``HostFacts``). The only place that asks the OS.

Cheap facts (uid, home, Landlock ABI, where bwrap is) cost no subprocess; the ones that do
(bwrap's version, whether it can make namespaces) are asked for explicitly.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

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


# The folders sbxc starts its own tools (bwrap) from, in the order a root shell's PATH
# lists them. A sandboxed command can write its project, its cache, its /tmp, and what its
# policy grants; a program found anywhere like that (an activated project venv's bin/ on
# PATH, ~/.local/bin under `home: writable`) would run unsandboxed on the next miss or
# probe. Ownership alone does not tell: for a root caller the project's own folders are
# root's too. So only these folders count, and only when they and every folder above them
# belong to root and nobody else can write them.
SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _untrusted_owner(uid: int, trusted: tuple, system: bool) -> bool:
    if uid in trusted:
        return False
    if not system:
        return True
    from .cachedir import nested_overflow_uid  # only when an owner is not root

    # In a user namespace that maps only the caller, root's files show as the overflow
    # uid. For the system folders that is root on any real host (the same reasoning as
    # for the throwaway cache's /var/tmp); never for a configured path, which may lie in
    # another user's folder that shows as the same uid.
    return uid != nested_overflow_uid()


def _place_problem(real: str, trusted: tuple, system: bool) -> str:
    """Why the program at the real path ``real`` may not be started ('' when it may): the
    file and every folder up to / must be owned by a ``trusted`` uid and writable by no
    one else (for a configured path, a folder writable by others when sticky); none of
    them may be a symlink (``real`` is resolved: one found now was swapped in since)."""
    import stat

    try:
        st = os.lstat(real)
    except OSError as e:
        return f"{real} cannot be checked ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"{real} is not a regular file"
    if _untrusted_owner(st.st_uid, trusted, system):
        return f"{real} is owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"{real} is writable by its group or others"
    folder = real
    while folder != "/":
        folder = folder.rsplit("/", 1)[0] or "/"
        try:
            st = os.lstat(folder)
        except OSError as e:
            return f"{folder} cannot be checked ({e.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{folder} (on the way to {real}) is not a folder"
        if _untrusted_owner(st.st_uid, trusted, system):
            return f"{folder} (on the way to {real}) is owned by uid {st.st_uid}"
        if st.st_mode & 0o022 and not (not system and st.st_mode & stat.S_ISVTX):
            return f"{folder} (on the way to {real}) is writable by its group or others"
    return ""


def host_program(name: str, environ) -> tuple[str, str]:
    """The one lookup of a program sbxc itself starts on the host (bwrap): (real path, note).

    ``SBXC_<NAME>`` (``SBXC_BWRAP``), when set, is the only candidate: an absolute path the
    person chose, accepted when the file and every folder up to / are owned by root or the
    caller and writable by no one else (folders: unless sticky). Otherwise the folders of
    ``PATH`` that are system program folders (``SYSTEM_BIN_DIRS``) are searched in order,
    and a program is taken only from a real path in one of them, owned by root, with every
    folder above it root's and writable by no one else. Other ``PATH`` entries are never
    used for sbxc's own tools.

    The path is '' when none qualifies; the note then says why, naming the refused
    candidate (a refusal line's cause), and it names a skipped candidate also when a
    trusted one was found later. The lookup of the user's command (for the shell's 127) is
    another question: it runs inside the sandbox.
    """
    # Not remembered between calls: a few lstat calls, and a long-lived caller (the
    # Python API) must see a folder whose ownership or mode changed since.
    var = "SBXC_" + name.upper()
    return _lookup(name, var, environ.get(var), environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin")


def _lookup(name: str, var: str, configured, path_value: str) -> tuple[str, str]:
    if configured is not None:
        if not configured.startswith("/"):
            return "", f"{var}={configured!r} is not an absolute path"
        real = os.path.realpath(configured)
        problem = _place_problem(real, (0, os.geteuid()), system=False)
        if not problem and not os.access(real, os.X_OK):
            problem = f"{real} is not executable"
        return ("", f"{var}={configured}: {problem}") if problem else (real, "")
    skipped = ""
    for d in path_value.split(":"):
        if not d.startswith("/"):
            continue
        d = os.path.normpath(d)
        p = d + "/" + name
        if not (os.access(p, os.X_OK) and not os.path.isdir(p)):
            continue
        real = os.path.realpath(p)
        if d not in SYSTEM_BIN_DIRS or real.rsplit("/", 1)[0] not in SYSTEM_BIN_DIRS:
            problem = f"{p} is not in a system program folder ({', '.join(SYSTEM_BIN_DIRS)})"
        else:
            problem = _place_problem(real, (0,), system=True)
        if not problem:
            return real, (f"skipped {skipped}" if skipped else "")
        skipped = skipped or problem
    return "", skipped


def find_command(name: str, env) -> str:
    """Where a shell would find the user's command ``name`` (no slash) on ``env``'s PATH,
    on the host: the path as found (an empty PATH entry is the current folder), or ''.
    Not a trusted lookup (that is ``host_program``): it answers 127 early, and names the
    file the Landlock command execs in its own confined process."""
    for d in (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":"):
        p = (d or ".") + "/" + name
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return p
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


_BWRAP_TRY = ("--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true")
"""What the probes ask bwrap to do: every namespace, this host's files, nothing run."""


def userns_works(bwrap: str) -> tuple[bool, str]:
    """Whether bwrap can make its namespaces here; with the reason when it cannot."""
    import subprocess

    if not bwrap:
        return False, "bwrap is not installed"
    try:
        r = subprocess.run([bwrap, *_BWRAP_TRY], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"bwrap could not start: {e}"
    if r.returncode == 0:
        return True, "bwrap made user, mount, PID, IPC and network namespaces"
    return False, (r.stderr.strip().splitlines() or ["bwrap failed"])[-1]


def private_mounts_work(bwrap: str, environ) -> bool:
    """Whether bwrap runs here inside the private mount namespace the bwrap runner puts it in
    (``bwrap_scope.private_mounts_prefix``): util-linux's ``unshare`` from a system folder,
    and the namespaces it needs (a user namespace for a plain user, which some hosts refuse
    to all but bwrap)."""
    import subprocess

    from .bwrap_scope import private_mounts_prefix

    unshare = host_program("unshare", environ)[0]
    if not bwrap or not unshare:
        return False
    try:
        return subprocess.run(private_mounts_prefix(unshare, os.geteuid()) + [bwrap, *_BWRAP_TRY],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


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
    bwrap = host_program("bwrap", environ)[0] if uname.sysname == "Linux" else ""
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
        private_mounts=private_mounts_work(bwrap, environ) if (full and bwrap) else False,
    )
