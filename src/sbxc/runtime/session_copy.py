"""Making a workspace: the copy, its manifest, and the question whether a ready copy is
still a copy of the project as it is now.

The copy is ``cp -a --reflink=auto`` (the host's own ``cp``, found in the trusted program
folders only): a reflink where the file system can (btrfs, XFS with reflink), a plain
copy elsewhere; symlinks stay symlinks, times and modes are kept. bwrap's ``--overlay``
(0.9+) is not used: ``method`` says so.

The manifest maps each path in the copy (relative; ``""`` is the top) to::

    (type, mode, size, mtime_ns, h_ino, h_ctime_ns, w_ino, w_ctime_ns, dirty, check)

``type`` is f (file), d (folder), l (symlink) or o (anything else). ``h_*`` is the host's
entry as the copy was made of it, ``h_ino == -1`` when the host's entry did not match the
copy (it changed while it was copied: never taken for unchanged). ``w_*`` is the copy's own
inode and ctime: a command that changes a file, its mode or its name changes its ctime,
which no one can set back without CAP_SYS_TIME. ``dirty``: changed against the host already
when the copy was made (a fork of a snapshot). ``check``: for an entry whose host ctime
lies within ``MARGIN_NS`` before the copy started, or after, the content itself (sha256
of a file, a link's target, a folder's sorted names): a timestamp clock is coarse (one
tick, up to 10 ms, or a whole second on some file systems), so a second write in the same
tick as the one recorded would leave every stat field as it was. Older entries need no
content: any later write gets a later ctime.
"""
from __future__ import annotations

import errno
import os
import stat
import time

from .errors import one_line
from .sessions import SessionError

MARGIN_NS = 2_000_000_000
_RD = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _type(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "o"


def _mount_of(path: str) -> tuple[str, str]:
    """(mount point, file system type) holding ``path``, from /proc/self/mountinfo."""
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                left, _, right = line.partition(" - ")
                fields = left.split()
                mp = fields[4].replace("\\040", " ") if len(fields) > 4 else ""
                if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
                    best, kind = mp, (right.split() or [""])[0]
    except OSError:
        pass
    return best, kind


def method(project: str, store: str) -> str:
    """How a workspace of ``project`` is made in ``store``: ``reflink`` when both lie on
    one btrfs or XFS file system (cp clones the files, falling back to copying any it
    cannot clone), else ``copy``."""
    try:
        same = os.stat(project).st_dev == os.stat(store).st_dev
    except OSError:
        same = False
    return "reflink" if same and _mount_of(store)[1] in ("btrfs", "xfs") else "copy"


def method_note(bwrap_version: str = "") -> str:
    """Why no overlay: for ``doctor`` and ``session start``."""
    return "bwrap's --overlay (0.9+) is not used: every workspace is a copy of its own"


def _content(path: str, kind: str):
    if kind == "f":
        import hashlib

        h = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")  # a FIFO swapped in
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                h.update(b)
        finally:
            os.close(fd)
        return h.hexdigest()
    if kind == "l":
        return os.readlink(path)
    if kind == "d":
        return tuple(sorted(os.listdir(path)))
    return None


def _die_with_parent() -> None:
    # cp must not outlive an sbxc that was killed mid-copy: it would go on filling a
    # folder that ``session stop`` is removing.
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def copy_tree(src: str, dest: str, environ) -> None:
    """``cp -a`` of ``src`` to the new path ``dest`` (which must not exist)."""
    import subprocess

    from .probe import host_program

    cp, why = host_program("cp", environ)
    if not cp:
        raise SessionError(f"no cp that sbxc may start ({why or 'not in the system program folders'})",
                           "install coreutils in a system folder")
    p = subprocess.run([cp, "-a", "--reflink=auto", "--no-target-directory", "--", src, dest],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       preexec_fn=_die_with_parent)
    if p.returncode != 0:
        first = p.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        raise SessionError(f"copying the project failed ({one_line(first[0] if first else 'cp exited ' + str(p.returncode), 200)})",
                           "make every file of the project readable to you, then start the session again")


READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_MAX = 4096


def _walk_refusal(where: str, e: OSError):
    from .errors import Refusal, shown

    if isinstance(e, PermissionError):
        # A folder the session's command made unreadable (chmod 000): said, not a crash.
        return Refusal(f"cannot read the folder {shown(where)} ({e.strerror})",
                       "make it readable again (chmod u+rwx), from the session if it is the session's")
    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
        # A command of the session still running swapped the folder (for a link, say)
        # while it was read: nothing through it is read.
        return Refusal(f"the folder {shown(where[:200])} changed while it was read",
                       "run it again once the session's commands have ended")
    # EMFILE, ENAMETOOLONG and the like: folders nested deeper than the limits allow.
    return Refusal(f"cannot read the folder {shown(where[:200])}... ({e.strerror})",
                   "remove the deep folders from the session (sbxc exec --session ID -- rm -r ...)")


def _listing(fd: int, where: str) -> list:
    """(name, lstat) of every entry of the folder ``fd``, last name first."""
    try:
        with os.scandir(fd) as it:
            out = [(e.name, e.stat(follow_symlinks=False)) for e in it]
    except OSError as e:
        raise _walk_refusal(where, e) from None
    out.sort(reverse=True)
    return out


def walk(top: str):
    """(relative path, lstat) of ``top`` and everything below it, parents first; never
    follows a symlink: each folder is opened from its parent's descriptor with
    ``O_NOFOLLOW``, so a folder that a command still running swaps for a link (to a host
    folder, say) is never entered."""
    try:
        fd = os.open(top, READ_DIR)
    except OSError as e:
        raise _walk_refusal(top, e) from None
    stack = []
    try:
        yield "", os.fstat(fd)
        stack.append(("", fd, _listing(fd, top)))
        while stack:
            rel, fd, entries = stack[-1]
            if not entries:
                stack.pop()
                os.close(fd)
                continue
            name, st = entries.pop()
            r = rel + "/" + name if rel else name
            if len(top) + len(r) > 1000 and len(os.fsencode(top + "/" + r)) >= _PATH_MAX:
                # Past what a path may name: the steps after the walk name paths.
                raise _walk_refusal(top + "/" + r, OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG)))
            yield r, st
            if stat.S_ISDIR(st.st_mode):
                where = top + "/" + r
                try:
                    cfd = os.open(name, READ_DIR, dir_fd=fd)
                except OSError as e:
                    raise _walk_refusal(where, e) from None
                try:
                    entries = _listing(cfd, where)
                except BaseException:
                    os.close(cfd)
                    raise
                stack.append((r, cfd, entries))
    finally:
        for _, dfd, _ in stack:
            os.close(dfd)


def record(project: str, ws: str, started_ns: int, base: dict | None = None, base_ws: str = "",
           base_ready_ns: int = 0) -> dict:
    """The manifest of the fresh copy ``ws`` of ``project`` (see the module text).
    ``base``: the manifest of the snapshot (workspace ``base_ws``, handed over at
    ``base_ready_ns``) that ``ws`` was copied from; its host entries carry over, and what
    the snapshot changed is marked ``dirty``."""
    if base is not None:
        changed = set(changes(base, project, base_ws, base_ready_ns))
        out = {}
        for rel, st in walk(ws):
            b = base.get(rel)
            kind = _type(st.st_mode)
            if b is None or b[0] != kind:
                continue  # added (or retyped) in the snapshot: not part of the base
            out[rel] = b[:6] + (st.st_ino, st.st_ctime_ns, b[8] or rel in changed, b[9])
        for rel, b in base.items():
            if rel not in out:
                out[rel] = b[:6] + (0, 0, True, b[9])  # gone in the snapshot: a deletion
        return out
    cutoff = started_ns - MARGIN_NS
    return {rel: _entry(project, ws, rel, st, cutoff) for rel, st in walk(ws)}


def entry(project: str, ws: str, rel: str, started_ns: int) -> tuple:
    """The manifest entry of ``rel`` as it is now in both copies (after an apply)."""
    return _entry(project, ws, rel, os.lstat(ws + "/" + rel if rel else ws), started_ns - MARGIN_NS)


def _entry(project: str, ws: str, rel: str, st, cutoff: int) -> tuple:
    kind = _type(st.st_mode)
    hpath = project + "/" + rel if rel else project
    try:
        h = os.lstat(hpath)
    except OSError:
        h = None
    ok = h is not None and _type(h.st_mode) == kind and (
        kind == "d" or (h.st_size == st.st_size and h.st_mtime_ns == st.st_mtime_ns))
    check = None
    if ok and h.st_ctime_ns >= cutoff:
        try:
            check = _content(ws + "/" + rel if rel else ws, kind)
            ok = check == _content(hpath, kind) if kind in ("l", "d") else ok
        except OSError:
            ok = False
    return (kind, stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns,
            h.st_ino if ok else -1, h.st_ctime_ns if ok else 0,
            st.st_ino, st.st_ctime_ns, False, check)


def host_unchanged(project: str, rel: str, e: tuple) -> bool:
    """Whether the host's entry ``rel`` is still what the manifest entry ``e`` recorded."""
    if e[4] == -1:
        return False
    path = project + "/" + rel if rel else project
    try:
        h = os.lstat(path)
    except OSError:
        return False
    kind = e[0]
    if _type(h.st_mode) != kind or h.st_ino != e[4] or h.st_ctime_ns != e[5]:
        return False
    if kind != "d" and (h.st_size != e[2] or h.st_mtime_ns != e[3]):
        return False
    if e[9] is not None:
        try:
            return _content(path, kind) == e[9]
        except OSError:
            return False
    return True


def project_unchanged(project: str, manifest: dict) -> bool:
    """Whether ``project`` is, entry for entry, what ``manifest`` recorded: every entry's
    stat (a changed file has a new ctime; a folder that gained or lost a name has a new
    ctime too, so names added anywhere are seen at their folder), and the content of
    entries too recent for their stat to tell. One ``fstatat`` per entry, relative to its
    folder's descriptor (each folder opened once, without following a link): the pool's
    check, whose cost grows with the number of entries, not with their size."""
    dirs = {}
    try:
        try:
            dirs[""] = os.open(project, _PATH_DIR)
        except OSError:
            return False
        stat_at = os.stat
        for rel, e in manifest.items():
            if e[8] or e[4] == -1:
                return False
            if e[9] is not None:
                if not host_unchanged(project, rel, e):
                    return False
                continue
            if not rel:
                h = os.fstat(dirs[""])
            else:
                parent, _, name = rel.rpartition("/")
                pfd = dirs.get(parent)
                if pfd is None:
                    pfd = _open_dir(dirs, parent)
                    if pfd is None:
                        return False
                try:
                    h = stat_at(name, dir_fd=pfd, follow_symlinks=False)
                except OSError:
                    return False
            if h.st_ino != e[4] or h.st_ctime_ns != e[5]:
                return False
            if e[0] != "d" and (h.st_size != e[2] or h.st_mtime_ns != e[3]):
                return False
        return True
    finally:
        for fd in dirs.values():
            os.close(fd)


def _open_dir(dirs: dict, rel: str):
    """The descriptor of folder ``rel`` (opened from its parent's, never through a link),
    kept in ``dirs``; None when it is not a folder any more."""
    parent, _, name = rel.rpartition("/")
    pfd = dirs.get(parent)
    if pfd is None:
        pfd = _open_dir(dirs, parent)
        if pfd is None:
            return None
    try:
        fd = os.open(name, _PATH_DIR, dir_fd=pfd)
    except OSError:
        return None
    dirs[rel] = fd
    return fd


def folder_fd(top: str, parts, refusal=None) -> int:
    """A read descriptor of the folder ``top/parts...``, each folder on the way opened from
    the one before without following a link: a folder that a command still running
    swapped for a link is never gone through. OSError otherwise, or for a part on the way,
    ``refusal(part, error)`` raised when given."""
    fd = os.open(top, READ_DIR)
    try:
        for part in parts:
            try:
                nfd = os.open(part, READ_DIR, dir_fd=fd)
            except OSError as e:
                if refusal is None:
                    raise
                raise refusal(part, e) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def parent_fd(top: str, rel: str) -> tuple[int, str]:
    """(``folder_fd`` of the folder holding ``top/rel``, its last name)."""
    parts = rel.split("/")
    return folder_fd(top, parts[:-1]), parts[-1]


def _open_in(top: str, rel: str, flags: int) -> int:
    d, name = parent_fd(top, rel)
    try:
        return os.open(name, flags | os.O_NOFOLLOW, dir_fd=d)
    finally:
        os.close(d)


def _readlink_in(top: str, rel: str) -> str:
    d, name = parent_fd(top, rel)
    try:
        return os.readlink(name, dir_fd=d)
    finally:
        os.close(d)


def _same_content(a_top: str, b_top: str, rel: str) -> bool:
    """Whether ``a_top/rel`` and ``b_top/rel`` are regular files with the same bytes (False
    for anything else), each reached folder by folder without following a link, and
    opened O_NONBLOCK, so a FIFO swapped in meanwhile never holds the caller."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fa = _open_in(a_top, rel, flags)
    except OSError:
        return False
    try:
        fb = _open_in(b_top, rel, flags)
    except OSError:
        os.close(fa)
        return False
    try:
        if not (stat.S_ISREG(os.fstat(fa).st_mode) and stat.S_ISREG(os.fstat(fb).st_mode)):
            return False
        while True:
            x = os.read(fa, 1 << 20)
            y = os.read(fb, 1 << 20)
            if x != y:
                return False
            if not x:
                return True
    finally:
        os.close(fa)
        os.close(fb)


def changes(manifest: dict, project: str, ws: str, after_ns: int, skip=()) -> dict:
    """What the workspace ``ws`` changed against the project as it was when the
    copy was made: {relative path: "added" | "changed" | "deleted"}, parents first.
    ``after_ns``: when the workspace was handed over; an entry whose ctime is not older
    than that by ``MARGIN_NS`` is compared by content (the host's, when the host is
    unchanged), since its ctime alone cannot tell. ``skip``: staged paths (never changes)."""
    out = {}
    seen = set()

    def skipped(rel):
        return any(rel == s or rel.startswith(s + "/") for s in skip)

    for rel, st in walk(ws):
        if skipped(rel):
            continue
        seen.add(rel)
        e = manifest.get(rel)
        kind = _type(st.st_mode)
        if e is None:
            out[rel] = "added"
            continue
        if e[0] != kind:
            out[rel] = "changed"
            continue
        if e[8]:
            out[rel] = "changed"
            continue
        if kind == "d":
            if stat.S_IMODE(st.st_mode) != e[1]:
                out[rel] = "changed"
            continue
        if (st.st_ino, st.st_ctime_ns) == (e[6], e[7]) and e[7] < after_ns - MARGIN_NS:
            continue
        if stat.S_IMODE(st.st_mode) != e[1] or st.st_size != e[2]:
            out[rel] = "changed"
            continue
        if not host_unchanged(project, rel, e):
            if (st.st_ino, st.st_ctime_ns) != (e[6], e[7]):
                out[rel] = "changed"
            continue
        try:
            same = _readlink_in(ws, rel) == _readlink_in(project, rel) if kind == "l" else (
                _same_content(ws, project, rel) if kind == "f" else True)
        except OSError:
            same = False  # gone or swapped meanwhile: a change, never a look through a link
        if not same:
            out[rel] = "changed"
    for rel in manifest:
        if rel not in seen and not skipped(rel):
            out[rel] = "deleted"
    return dict(sorted(out.items(), key=lambda kv: (kv[0].count("/"), kv[0])))


def now_ns() -> int:
    return time.time_ns()
