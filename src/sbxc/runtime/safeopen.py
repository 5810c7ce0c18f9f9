"""Folders of the caller's own, opened without following a link and checked (owner, mode,
and the folders above them): the cache root, a project's cache folder, the plans folder.

Every folder is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, starting
at ``/``, and judged by ``fstat`` of what was opened, so a symlink swapped in between a
check and a use is never followed. The parents must be owned by root or the caller and,
when others can write them, sticky (as ``/var/tmp`` is): then no other user can rename a
checked folder away and put their own in its place after the checks.

Hot path: ``os`` and ``stat``.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import _stat as stat  # the builtin module: stat.py (frozen) would cost an import on every run

from ..layout import CACHE_ROOT_TEMPLATE

# O_PATH is Linux-only; macOS opens the folder for reading instead (same no-follow checks).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(Exception):
    """A cache folder failed a check: ``problem`` says what, ``fix`` what to do."""

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


# --- opening a file that a sandboxed command may have swapped ------------------------------

def path_fd(path: str) -> int:
    """An ``O_PATH`` descriptor of what ``path`` names now (the kernel follows its links in
    one walk and opens nothing: no device driver's open runs, no FIFO waits). OSError when
    it names nothing. Linux only (``open_regular`` falls back elsewhere)."""
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def reopen(pfd: int) -> int:
    """The file ``pfd`` (``path_fd``) names, opened for reading: the same inode, through
    /proc/self/fd, never the name again. OSError when it may not be read."""
    return os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)


def open_regular(path: str) -> int:
    """``path`` opened for reading when it names a regular file, else -1: a folder, a FIFO,
    a device or a socket is never opened. A sandboxed command that writes where the file
    lies (the project) can swap it for a link to a device at any moment, and opening one
    runs its driver on the host (a watchdog reboots it, a serial line raises DTR), as sbxc,
    perhaps root; a FIFO would hold sbxc. On Linux the name is opened ``O_PATH``
    (``path_fd``), that descriptor is checked with ``fstat``, and the same inode is opened
    (``reopen``). Elsewhere (macOS): a stat, then a non-blocking open that takes no
    terminal, checked again. OSError when the path cannot be opened."""
    if getattr(os, "O_PATH", 0):
        pfd = path_fd(path)
        try:
            return reopen(pfd) if stat.S_ISREG(os.fstat(pfd).st_mode) else -1
        finally:
            os.close(pfd)
    if not stat.S_ISREG(os.stat(path).st_mode):
        return -1
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    return fd


# --- opening folders safely ---------------------------------------------------------------

FIX_ROOT = ("set cache.root to a folder you own, in a folder only root and you can write (the default is "
            f"{CACHE_ROOT_TEMPLATE})")


def _describe(name: str, dir_fd: int, shown: str, path: str) -> Unsafe:
    """Why ``name`` could not be opened as a folder; the lstat is for the message only."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        return Unsafe(f"{shown} cannot be opened ({e.strerror})", FIX_ROOT)
    if stat.S_ISLNK(st.st_mode):
        return Unsafe(f"{shown} is a symlink",
                      f"remove the link (rm {path}) if you did not make it, or {FIX_ROOT}")
    return Unsafe(f"{shown} is not a folder", f"move {path} away, or {FIX_ROOT}")


def read_proc(path: str, limit: int):
    """Up to ``limit`` bytes of a /proc file, or None. os.open and os.read: ``open()``
    would add an fstat, an ioctl and two lseeks per file and a buffered reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while limit > 0:
            b = os.read(fd, limit)
            if not b:
                break
            chunks.append(b)
            limit -= len(b)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def nested_overflow_uid() -> int:
    """The uid that owners outside this user namespace show as (the kernel's overflow uid,
    usually 65534) when this process runs in a user namespace other than the initial one;
    -1 in the initial namespace, where that uid is a real account."""
    fields = (read_proc("/proc/self/uid_map", 4096) or b"").decode("ascii", "replace").split()
    if fields[:3] == ["0", "0", "4294967295"] or not fields:
        return -1
    try:
        return int((read_proc("/proc/sys/kernel/overflowuid", 4096) or b"").strip() or b"65534")
    except ValueError:
        return 65534


def _owner(uid: int) -> str:
    if uid == nested_overflow_uid():
        return f"uid {uid} (an owner outside this user namespace, which sbxc cannot tell from another user)"
    try:
        import pwd  # only on this error path

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _open_child(dir_fd: int, name: str, shown: str, path: str = "") -> int:
    """Open folder ``name`` in ``dir_fd`` as an O_PATH descriptor, never through a symlink."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError:
        raise _describe(name, dir_fd, shown, path or shown) from None


def _check_parent(fd: int, shown: str, uid: int, trusted=(0,)) -> None:
    st = os.fstat(fd)
    if st.st_uid != uid and st.st_uid not in trusted:
        fix = FIX_ROOT
        if st.st_uid == nested_overflow_uid():
            fix = ("run sbxc outside this user namespace to get a persistent cache (the command is "
                   "sandboxed either way)")
        raise Unsafe(f"{shown} (on the way to the cache root) is owned by {_owner(st.st_uid)}", fix)
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise Unsafe(f"{shown} (on the way to the cache root) is writable by others and not sticky", FIX_ROOT)


def _check_own(fd: int, shown: str, uid: int, fix_chmod: str, check_mode: bool = True) -> None:
    st = os.fstat(fd)
    if st.st_uid != uid:
        raise Unsafe(f"{shown} is owned by {_owner(st.st_uid)}, not by you (uid {uid})",
                     f"remove it (as its owner or root), or set cache.root to a folder you own")
    mode = stat.S_IMODE(st.st_mode)
    if check_mode and mode & 0o077:
        raise Unsafe(f"{shown} has mode {mode:04o}, wider than 0700",
                     f"if it is a folder of sbxc's own, check its contents, then run: chmod 700 {fix_chmod}; "
                     "otherwise set cache.root to a new folder (sbxc makes it 0700)")


def open_parents(path: str, uid: int, trusted=(0,)) -> int:
    """O_PATH descriptor of ``path``'s parent folder, checked component by component: each
    owned by the caller or a ``trusted`` uid, and sticky where others can write it."""
    parts = [p for p in path.split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    shown = ""
    try:
        _check_parent(fd, "/", uid, trusted)
        for part in parts[:-1]:
            shown += "/" + part
            try:
                nfd = _open_child(fd, part, shown)
            except FileNotFoundError:
                raise Unsafe(f"{shown} (on the way to the cache root) does not exist",
                             f"create it, or {FIX_ROOT}") from None
            os.close(fd)
            fd = nfd
            _check_parent(fd, shown, uid, trusted)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_owned(parent_fd: int, name: str, shown: str, path: str, uid: int, create: bool,
                  check_mode: bool = True) -> tuple[int, bool]:
    """Open (or make, 0700) the folder ``name`` we must own; returns (O_PATH fd, made)."""
    made = False
    try:
        fd = _open_child(parent_fd, name, shown, path)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            made = True
        except FileExistsError:
            pass  # someone was quicker; whatever is there now gets the full checks below
        fd = _open_child(parent_fd, name, shown, path)
    try:
        if made:
            st = os.fstat(fd)
            if st.st_uid == uid and stat.S_IMODE(st.st_mode) != 0o700:
                # A strict umask made it narrower than 0700; we made it, nobody else can
                # rename it (parent checked), so setting the mode through /proc is safe.
                os.chmod(f"/proc/self/fd/{fd}", 0o700)
        _check_own(fd, shown, uid, path, check_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def open_root(root: str, uid: int, create: bool, check_mode: bool = True) -> int:
    """O_PATH descriptor of the cache root, checked (see ``open_cache``)."""
    root = os.path.normpath(root)
    parent = open_parents(root, uid)
    try:
        return open_owned(parent, os.path.basename(root), f"cache root {root}", root, uid, create,
                             check_mode)[0]
    finally:
        os.close(parent)


def open_project(root_fd: int, root: str, pid: str, uid: int, check_mode: bool = True) -> int:
    """O_PATH descriptor of an existing ``root/pid``, checked like the root."""
    root = os.path.normpath(root)
    return open_owned(root_fd, pid, f"project cache {root}/{pid}", f"{root}/{pid}", uid, False,
                         check_mode)[0]


def open_cache(root: str, pid: str, uid: int, create: bool) -> tuple[int, int, bool]:
    """Open root and ``root/pid`` safely: (root O_PATH fd, project O_PATH fd, project made).

    Raises ``Unsafe`` naming the problem, or ``FileNotFoundError`` when ``create`` is false
    and a folder is missing.
    """
    root = os.path.normpath(root)
    root_fd = open_root(root, uid, create)
    try:
        proj_fd, made = open_owned(root_fd, pid, f"project cache {root}/{pid}", f"{root}/{pid}", uid, create)
    except BaseException:
        os.close(root_fd)
        raise
    return root_fd, proj_fd, made


def real_paths(paths) -> list:
    """``os.path.realpath`` of each path, with every folder they share resolved once: the
    watched policy files lie in the current folder and each of its parents, and resolving
    each on its own would lstat ``/var``, ``/var/tmp`` ... again for every one of them.
    Not remembered between calls: a sandboxed command may have changed links since."""
    memo = {"/": "/"}
    return [_real(p, memo) for p in paths]


def _real(path: str, memo: dict) -> str:
    if not path.startswith("/") or "//" in path or "/./" in path or "/../" in path or path.endswith(("/.", "/..")):
        return os.path.realpath(path)
    path = path.rstrip("/") or "/"
    todo = []
    d = path
    while d not in memo:
        todo.append(d)
        d = d[:d.rfind("/")] or "/"
    real = memo[d]
    for d in reversed(todo):  # parents first
        cand = real.rstrip("/") + "/" + d[d.rfind("/") + 1:]
        # A real folder and a name that is no link (or does not exist) is a real path as it
        # stands; a link is resolved as realpath does, from there on.
        real = os.path.realpath(cand) if os.path.islink(cand) else cand
        memo[d] = real
    return real
