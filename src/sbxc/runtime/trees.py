"""Walking trees that sandboxed commands filled: removing them (cache clear, per-run
folders, throwaway caches) and measuring them (doctor). The one place that does either.

A command can leave anything in a folder it could write: a chain of folders thousands of
levels deep, millions of names, FIFOs, sockets, names that are not UTF-8, folders it made
unreadable (chmod 000), symlinks pointing anywhere, and, while a run of the same project
goes on, entries that appear and vanish under the walk. So every walk here:

- is a loop, not a recursion: depth costs one small record per level, never Python's
  stack (a RecursionError would turn every later run's clean-up into a crash);
- holds at most ``_WINDOW`` folder descriptors: deeper down, the shallower levels are
  closed and reopened on the way back up as ``..`` of the level below, accepted only when
  that is the same inode (a folder moved meanwhile would lead the walk out of the tree: it
  stops instead);
- opens every folder relative to its parent's descriptor with ``O_NOFOLLOW`` and removes
  an entry relative to its folder's descriptor: a symlink is removed (or counted), never
  followed, so nothing outside the tree is touched;
- does not enter another filesystem (a mount point inside the tree is an error, not a
  folder to empty);
- reads folders as a stream (``scandir``), without a list of their names in memory;
- gives a folder of the caller's own that lacks read, write or search permission those
  permissions back before emptying it (the tree is sbxc's to delete); measuring changes
  nothing and counts what it cannot read as unreadable.

Only ``os`` and ``stat``: this is on the ``sbxc exec`` path (per-run folders, throwaways).
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import stat

_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_PATH is Linux-only; macOS opens the folder for reading instead (same no-follow checks).
_PATH_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WINDOW = 16  # folder descriptors a walk keeps open (twice that with scandir's own)
_ROUNDS = 8  # rescans of a folder that gained entries while it was being emptied
_ENOTEMPTY = (39, 66)  # Linux, macOS
_ELOOP = (40, 62)


class _Level:
    """One folder on the walk's current chain."""

    __slots__ = ("fd", "ino", "name", "it", "rest", "rounds")

    def __init__(self, fd: int, ino: int, name: str):
        self.fd = fd  # -1 while closed for the window
        self.ino = ino
        self.name = name  # its name in the level above ("" for the top)
        self.it = None  # the open scandir stream
        self.rest = None  # names still to measure, when the stream had to be closed
        self.rounds = 0


class _Chain:
    """The folders from the walk's top (level 0, the caller's descriptor, never closed
    here) down to the current one; levels ``lo`` and deeper hold descriptors."""

    def __init__(self, top_fd: int):
        st = os.fstat(top_fd)
        self.dev = st.st_dev
        self.levels = [_Level(top_fd, st.st_ino, "")]
        self.lo = 1

    def where(self, name: str = "") -> str:
        """The path of ``name`` in the current folder, relative to the top (for errors)."""
        parts = [lv.name for lv in self.levels[1:]] + ([name] if name else [])
        return "/".join(parts) or "."

    def push(self, fd: int, st, name: str, keep_rest: bool) -> None:
        self.levels.append(_Level(fd, st.st_ino, name))
        if len(self.levels) - self.lo > _WINDOW:
            lv = self.levels[self.lo]
            if lv.it is not None:
                if keep_rest:
                    lv.rest = _drain(lv.it)
                lv.it.close()
                lv.it = None
            os.close(lv.fd)
            lv.fd = -1
            self.lo += 1

    def pop(self) -> _Level:
        """Leave the current folder; returns its level, whose descriptor is closed. The
        parent is reopened first when the window had closed it."""
        lv = self.levels[-1]
        depth = len(self.levels) - 1
        parent = self.levels[depth - 1]
        try:
            if parent.fd < 0:
                fd = os.open("..", _READ_DIR, dir_fd=lv.fd)
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != (self.dev, parent.ino):
                    os.close(fd)
                    raise OSError(16, "the folder was moved while it was walked", self.where())
                parent.fd = fd
                self.lo = depth - 1
        finally:
            if lv.it is not None:
                lv.it.close()
                lv.it = None
            os.close(lv.fd)
            lv.fd = -1
            self.levels.pop()
        return lv

    def close(self) -> None:
        for lv in self.levels[1:]:
            if lv.it is not None:
                lv.it.close()
            if lv.fd >= 0:
                os.close(lv.fd)
        del self.levels[1:]


def _drain(it) -> list:
    """The names a scandir stream has left (as far as the folder can be read)."""
    out = []
    try:
        for e in it:
            out.append(e.name)
    except OSError:
        pass
    return out


def _failed(chain: _Chain, name: str, e: OSError) -> OSError:
    return OSError(e.errno, e.strerror, chain.where(name))


def _give_back_rights(fd: int, st=None) -> None:
    """Our own folder without read, write or search for us: emptying it needs them all."""
    st = st or os.fstat(fd)
    if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o700)


def open_for_removal(parent_fd: int, name: str) -> int:
    """Open folder ``name`` in ``parent_fd`` for reading, without following a symlink; an
    unreadable folder of ours (Go makes its module cache read-only, a command can chmod
    000) is made readable first. O_PATH needs no permission on the folder, and chmod
    through /proc/self/fd acts on that exact inode, never on a symlink's target."""
    try:
        return os.open(name, _READ_DIR, dir_fd=parent_fd)
    except PermissionError:
        pass
    pfd = os.open(name, _PATH_DIR, dir_fd=parent_fd)
    try:
        st = os.fstat(pfd)
        os.chmod(f"/proc/self/fd/{pfd}", stat.S_IMODE(st.st_mode) | 0o700)
    except OSError as e:
        raise OSError(e.errno, e.strerror, name) from None  # not the /proc name
    finally:
        os.close(pfd)
    return os.open(name, _READ_DIR, dir_fd=parent_fd)


def _entry_is_dir(entry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)  # the listing's type: no stat
    except OSError:
        return False  # gone: the unlink says so


def _remove_file(chain: _Chain, dir_fd: int, name: str) -> bool:
    """Unlink ``name`` (anything but a folder); False when it turned out to be a folder."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return True
    except IsADirectoryError:
        return False
    except PermissionError as e:
        # macOS reports EPERM for unlink() of a folder; anything else is a real refusal.
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return False
        except FileNotFoundError:
            return True
        raise _failed(chain, name, e) from None
    except OSError as e:
        raise _failed(chain, name, e) from None


def _enter_for_removal(chain: _Chain, dir_fd: int, name: str) -> bool:
    """Open folder ``name`` and push it; False when there is nothing to enter (it vanished,
    or was swapped for something else, which is then unlinked)."""
    try:
        fd = open_for_removal(dir_fd, name)
    except FileNotFoundError:
        return False
    except OSError as e:
        if isinstance(e, NotADirectoryError) or e.errno in _ELOOP:
            # Swapped for a file or a link since it was listed: unlink that. Should it be
            # a folder again by now, the rescan before the rmdir finds it.
            _remove_file(chain, dir_fd, name)
            return False
        raise _failed(chain, name, e) from None
    try:
        st = os.fstat(fd)
        if st.st_dev != chain.dev:
            raise OSError(18, "a mount point (another filesystem) is inside the tree", chain.where(name))
        _give_back_rights(fd, st)
    except OSError as e:
        os.close(fd)
        raise e if e.filename else _failed(chain, name, e) from None
    chain.push(fd, st, name, keep_rest=False)
    return True


def empty_dir(dir_fd: int) -> None:
    """Delete everything inside the folder open as ``dir_fd`` (an O_RDONLY descriptor),
    as the module text says. Raises OSError whose ``filename`` is the first entry that
    could not be removed, relative to the folder; what was removed before stays removed."""
    _give_back_rights(dir_fd)
    chain = _Chain(dir_fd)
    try:
        while chain.levels:
            lv = chain.levels[-1]
            if lv.it is None:
                lv.it = os.scandir(lv.fd)
            entry = next(lv.it, None)
            if entry is not None:
                name = entry.name
                if _entry_is_dir(entry) or not _remove_file(chain, lv.fd, name):
                    _enter_for_removal(chain, lv.fd, name)
                continue
            lv.it.close()
            lv.it = None
            if len(chain.levels) == 1:
                # Entries made while the folder was read may not have been listed.
                with os.scandir(lv.fd) as it:
                    if next(it, None) is None:
                        return
                lv.rounds += 1
                if lv.rounds > _ROUNDS:
                    raise OSError(_ENOTEMPTY[0], "entries keep appearing in it", ".")
                continue
            done = chain.pop()
            parent = chain.levels[-1]
            try:
                os.rmdir(done.name, dir_fd=parent.fd)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno not in _ENOTEMPTY or done.rounds >= _ROUNDS:
                    raise _failed(chain, done.name, e) from None
                # Something was added meanwhile: empty it again.
                if _enter_for_removal(chain, parent.fd, done.name):
                    chain.levels[-1].rounds = done.rounds + 1
    finally:
        chain.close()


def remove_tree(parent_fd: int, name: str) -> None:
    """Delete ``name`` in ``parent_fd`` and, when it is a folder, all it holds (see
    ``empty_dir``); nothing when it does not exist. The one way sbxc removes a tree."""
    for _round in range(_ROUNDS):
        try:
            fd = open_for_removal(parent_fd, name)
        except FileNotFoundError:
            return
        except NotADirectoryError:
            _unlink_quietly(parent_fd, name)
            return
        except OSError as e:
            if e.errno in _ELOOP:
                _unlink_quietly(parent_fd, name)
                return
            raise
        try:
            empty_dir(fd)
        except OSError as e:
            raise OSError(e.errno, e.strerror, name + "/" + e.filename if e.filename and e.filename != "." else name) \
                from None
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=parent_fd)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno not in _ENOTEMPTY:
                raise OSError(e.errno, e.strerror, name) from None
    raise OSError(_ENOTEMPTY[0], "entries keep appearing in it", name)


def remove_path(path: str) -> None:
    """``remove_tree`` for an absolute path: its parent folder is opened by path (it is
    sbxc's own, e.g. /tmp), the entry itself never followed."""
    parent, _, name = path.rstrip("/").rpartition("/")
    try:
        pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        remove_tree(pfd, name)
    finally:
        os.close(pfd)


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def disk_usage(dir_fd: int) -> tuple[int, int]:
    """(bytes, unreadable folders) of the tree at ``dir_fd``, as ``du`` counts bytes:
    allocated 512-byte blocks of the folder and everything in it, each inode once (hard
    links), symlinks not followed, no other filesystem entered. A folder that cannot be
    read counts with its own blocks only and adds one to the second number; nothing is
    changed to read it."""
    chain = _Chain(dir_fd)
    st = os.fstat(dir_fd)
    total = st.st_blocks * 512
    unreadable = 0
    linked = set()  # (dev, ino) of files with more than one link: only those can repeat
    try:
        while chain.levels:
            lv = chain.levels[-1]
            name = None
            if lv.rest is None and lv.it is None:
                try:
                    lv.it = os.scandir(lv.fd)
                except OSError:
                    unreadable += 1
                    lv.rest = []  # read as far as it can be: done
            if lv.rest is not None:
                # The stream was closed for the window; what it had left to give is here.
                name = lv.rest.pop() if lv.rest else None
            else:
                try:
                    entry = next(lv.it, None)
                except OSError:
                    unreadable += 1
                    entry = None
                if entry is None:
                    lv.it.close()
                    lv.it = None
                    lv.rest = []
                else:
                    name = entry.name
            if name is None:
                if len(chain.levels) == 1:
                    return total, unreadable
                chain.pop()
                continue
            try:
                est = os.stat(name, dir_fd=lv.fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if est.st_dev != chain.dev:
                total += est.st_blocks * 512  # the mount point itself, as du -x counts it
                continue
            if not stat.S_ISDIR(est.st_mode):
                if est.st_nlink > 1:
                    if (est.st_dev, est.st_ino) in linked:
                        continue
                    linked.add((est.st_dev, est.st_ino))
                total += est.st_blocks * 512
                continue
            total += est.st_blocks * 512
            try:
                fd = os.open(name, _READ_DIR, dir_fd=lv.fd)
            except FileNotFoundError:
                continue
            except OSError:
                unreadable += 1
                continue
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (est.st_dev, est.st_ino):
                os.close(fd)  # swapped since the stat: it is not the folder counted
                continue
            chain.push(fd, fst, name, keep_rest=True)
    finally:
        chain.close()
    return total, unreadable
