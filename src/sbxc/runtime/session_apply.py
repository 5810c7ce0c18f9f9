"""``session diff`` and ``session apply``: what a session changed, and copying it to the
host project, the one way a session's work reaches the host.

Apply goes file by file and refuses, each on its own:

- a file the host changed since the session started (``session_copy.host_unchanged``:
  inode, ctime, size, mtime, and the content where the stat is too recent to tell), and
  an added file whose name the host has taken meanwhile;
- a symlink whose target leads out of the project (absolute, or ``..`` past the top), and
  anything that is neither a file, a folder nor a symlink (FIFOs, sockets, devices);
- a path whose folders in the host project are not real folders: every folder on the way
  is opened from the project's top with ``O_NOFOLLOW``, so a symlink planted there (in the
  host or in the workspace) never carries a write out of the project;
- a change of kind involving a folder (a folder became a file, or the reverse).

A new file is written under a temporary name in its folder and linked into place with
``link``, which fails when the name exists (no overwrite of something made meanwhile); a
changed one is renamed over the old after the host's copy was checked once more (a write
on the host between that check and the rename is the window that remains). The
workspace's files are read through ``O_NOFOLLOW`` descriptors the same way.

While apply writes, the run journal holds a record with the project as its writable root:
a policy file a session command wrote and apply copied is therefore treated like one a
sandboxed command wrote in place, and refused until a person accepts it.
"""
from __future__ import annotations

import os
import stat

from . import session_copy as sc
from .errors import shown

_LABEL = {"added": "A", "changed": "M", "deleted": "D"}


def session_changes(manifest: dict, meta: dict, ws: str) -> dict:
    staged = [s for s in meta.get("staged", "").split("\x1f") if s]
    return sc.changes(manifest, meta["project"], ws, int(meta.get("ready_ns", "0") or 0), skip=staged)


def diff_rows(manifest: dict, meta: dict, ws: str) -> list:
    """[(change, path, host changed since the start)] of the session's changes."""
    project = meta["project"]
    rows = []
    for rel, change in session_changes(manifest, meta, ws).items():
        e = manifest.get(rel)
        host_changed = e is not None and not sc.host_unchanged(project, rel, e) if change != "added" \
            else os.path.lexists(f"{project}/{rel}")
        rows.append((change, rel, host_changed))
    return rows


def _read_text(top: str, rel: str, limit: int):
    """The lines of the regular file ``top/rel``, opened folder by folder without following
    a link (a command still running in the workspace may swap a folder for a link to
    something of the person's; its content must never be printed), or None for anything
    that is not small UTF-8 text."""
    parts = rel.split("/")
    try:
        d = _open_dirs(top, parts[:-1])
    except (Refused, OSError):
        return None
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d)
    except OSError:
        return None
    finally:
        os.close(d)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        if b"\0" in data:
            return None
        return data.decode("utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def unified(meta: dict, ws: str, rel: str, change: str, limit: int = 1 << 20) -> str:
    """A unified diff of one file (host as it was, workspace now), or '' for binary or
    large files, folders and links."""
    import difflib

    modes = ""
    if change == "changed":
        # A mode the command changed is part of what an apply writes (under the caller's
        # umask): shown as git shows it.
        try:
            a = stat.S_IMODE(_lstat_in(meta["project"], rel).st_mode)
            b = stat.S_IMODE(_lstat_in(ws, rel).st_mode)
            if a != b:
                modes = f"old mode {a:04o}\nnew mode {b:04o} (applied as {b & ~_umask():04o})\n"
        except OSError:
            pass
    old = [] if change == "added" else _read_text(meta["project"], rel, limit)
    new = [] if change == "deleted" else _read_text(ws, rel, limit)
    # Each file's part opens with a line naming it, as git's does: a mode change alone (no
    # text to compare) is then never read as part of the next file's diff.
    head = f"diff a/{shown(rel)} b/{shown(rel)}\n"
    if old is None or new is None:
        return head + modes if modes else ""
    lines = list(difflib.unified_diff(old, new, f"a/{shown(rel)}", f"b/{shown(rel)}"))
    if not lines and not modes:
        return ""
    # The contents are the command's too: a control character in them (an escape sequence
    # that moves the cursor or clears a line) could rewrite what the person sees above.
    # Shown as escapes, tabs aside; the line ends stay. A last line without its newline is
    # marked as diff(1) marks it, so the next line of the output does not run on from it.
    out = []
    for line in lines:
        out.append(_visible(line))
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return head + modes + "".join(out)


def _lstat_in(top: str, rel: str):
    """lstat of ``top/rel``, reached folder by folder without following a link."""
    d, name = sc.parent_fd(top, rel)
    try:
        return os.stat(name, dir_fd=d, follow_symlinks=False)
    finally:
        os.close(d)


def _visible(line: str) -> str:
    end = "\n" if line.endswith("\n") else ""
    body = line[:-1] if end else line
    if all(c.isprintable() or c == "\t" for c in body):
        return line
    return "".join(c if c.isprintable() or c == "\t" else shown(c) for c in body) + end


# ------------------------------------------------------------------ apply

class Refused(Exception):
    pass


def _open_dirs(top: str, parts) -> int:
    """A read descriptor of ``top/parts...``, each folder opened without following a link
    (``session_copy.folder_fd``); a part that is not a folder is Refused."""
    return sc.folder_fd(top, parts, lambda part, e: Refused(f"{shown(part)} on the way is not a folder ({e.strerror})"))


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _link_inside(rel: str, target: str, roots=()) -> bool:
    """Whether a link at ``rel`` (in the project) with ``target`` stays in the project. Read
    as text, then each entry the target names, walked from the link's folder, looked at in
    every one of ``roots`` (the workspace and the host project): an entry that is a link
    itself could lead anywhere (``up -> ../..``, then ``esc -> up/../../etc``), so none may be
    one. With no link on the way the text is what the kernel resolves."""
    if target.startswith("/") or not target:
        return False
    # Only the plain form: leading ".." and then names. In "d/e/../x" the kernel resolves
    # ".." from what d/e is when the link is followed; a later apply can make d/e a link
    # (itself inside the project), and the two together lead out of it.
    parts = target.rstrip("/").split("/")
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if any(p in ("", ".", "..") for p in parts[ups:]):
        return False
    path = rel.split("/")[:-1]  # the folders above the link inside the project
    for part in target.split("/"):
        if part == "..":
            if not path:
                return False
            path.pop()
        elif part and part != ".":
            path.append(part)
            for root in roots:
                try:
                    if stat.S_ISLNK(os.lstat(root + "/" + "/".join(path)).st_mode):
                        return False
                except (FileNotFoundError, NotADirectoryError):
                    pass
    return True


def _umask() -> int:
    """The caller's umask: modes are the session's command's choice, and reach the host
    as a copy without -p gives them (a `chmod 666` in the workspace does not make a file
    of the project writable for everyone)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _copy_file(src_dir: int, name: str, dst_dir: int, tmp: str) -> None:
    sfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("it is not a regular file any more")
        # The copy is written unnamed (O_TMPFILE) and given its temporary name only once
        # whole: an apply killed half-way leaves no partial file in the project. Where the
        # file system has no O_TMPFILE, the temporary name from the start.
        try:
            dfd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
            unnamed = True
        except (OSError, AttributeError):
            dfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=dst_dir)
            unnamed = False
        try:
            while True:
                b = os.read(sfd, 1 << 20)
                if not b:
                    break
                view = memoryview(b)
                while view:
                    view = view[os.write(dfd, view):]
            # Permission bits only: a set-uid bit made in a sandbox never reaches the host.
            os.fchmod(dfd, stat.S_IMODE(st.st_mode) & 0o777 & ~_umask())
            # The workspace's times: the host's copy is then what the manifest records of
            # both (size and mtime), so a later change of the file applies again instead
            # of being taken for a change on the host.
            os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
            if unnamed:
                os.link(f"/proc/self/fd/{dfd}", tmp, dst_dir_fd=dst_dir, follow_symlinks=True)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def _apply_one(project: str, ws: str, rel: str, change: str, e) -> None:
    parts = rel.split("/")
    folders, name = parts[:-1], parts[-1]
    if change != "added" and not sc.host_unchanged(project, rel, e):
        raise Refused("the host's copy changed since the session started")
    hdir = _open_dirs(project, folders)
    try:
        if change == "deleted":
            st = os.stat(name, dir_fd=hdir, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                try:
                    os.rmdir(name, dir_fd=hdir)
                except OSError:
                    raise Refused("the folder is not empty on the host") from None
            else:
                os.unlink(name, dir_fd=hdir)
            return
        wdir = _open_dirs(ws, folders)
        try:
            wst = os.stat(name, dir_fd=wdir, follow_symlinks=False)
            kind = sc._type(wst.st_mode)
            if kind == "o":
                raise Refused("it is not a file, a folder or a symlink")
            if change == "added" and _exists(hdir, name):
                raise Refused("the host has made this name since the session started")
            if change == "changed" and (kind == "d") != (e[0] == "d"):
                raise Refused("a folder became something else, or the reverse: do this one by hand")
            if kind == "d":
                if change == "added":
                    os.mkdir(name, stat.S_IMODE(wst.st_mode) & 0o777 & ~_umask(), dir_fd=hdir)
                else:
                    fd = os.open(name, sc.READ_DIR, dir_fd=hdir)
                    try:
                        os.fchmod(fd, stat.S_IMODE(wst.st_mode) & 0o777 & ~_umask())
                    finally:
                        os.close(fd)
                return
            tmp = f".sbxc-apply-{os.urandom(6).hex()}"
            if kind == "l":
                target = os.readlink(name, dir_fd=wdir)
                if not _link_inside(rel, target, (ws, project)):
                    raise Refused(f"a symlink to '{shown(target)}', which leads out of the project or through another link")
                os.symlink(target, tmp, dir_fd=hdir)
                os.utime(tmp, ns=(wst.st_atime_ns, wst.st_mtime_ns), dir_fd=hdir, follow_symlinks=False)
            else:
                _copy_file(wdir, name, hdir, tmp)
            try:
                if change == "added":
                    os.link(tmp, name, src_dir_fd=hdir, dst_dir_fd=hdir, follow_symlinks=False)
                    os.unlink(tmp, dir_fd=hdir)
                else:
                    if not sc.host_unchanged(project, rel, e):
                        raise Refused("the host's copy changed while it was being applied")
                    os.rename(tmp, name, src_dir_fd=hdir, dst_dir_fd=hdir)
            except FileExistsError:
                raise Refused("the host has made this name since the session started") from None
            finally:
                try:
                    os.unlink(tmp, dir_fd=hdir)
                except FileNotFoundError:
                    pass
        finally:
            os.close(wdir)
    finally:
        os.close(hdir)


def selected(rows: dict, project: str, paths) -> dict:
    """The changes at or under ``paths`` (relative to the project, or absolute inside it)."""
    if not paths:
        return rows
    want = []
    for p in paths:
        rel = os.path.relpath(os.path.normpath(p), project) if p.startswith("/") else os.path.normpath(p)
        want.append("" if rel == "." else rel)
    # Outside the project: ".." or under it (a name that only starts with two dots, such as
    # "..foo", is inside).
    return {r: c for r, c in rows.items()
            if any(w == "" or (w != ".." and not w.startswith("../") and (r == w or r.startswith(w + "/")))
                   for w in want)}


def apply(manifest: dict, meta: dict, ws: str, paths=(), max_bytes=None) -> list:
    """Apply the session's changes (those at or under ``paths``, or all): returns
    [(path, change, None or why it was refused)]. ``max_bytes``: the session's quota, also
    for what the apply would write (Refusal, nothing applied, when that is more)."""
    from . import journal

    project = meta["project"]
    todo = selected(session_changes(manifest, meta, ws), project, paths)
    if max_bytes is not None:
        # The workspace's quota counts the blocks it holds, each file once; the apply
        # writes every path's whole length: a sparse file, or one file under forty hard
        # links, would write far more into the project than the quota let the session hold.
        total = 0
        for rel, change in todo.items():
            if change != "deleted":
                try:
                    st = os.lstat(ws + "/" + rel)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
        if total > int(max_bytes):
            from .errors import Refusal

            raise Refusal(f"applying would write {total} bytes into the project, more than workspace.max_bytes "
                          f"({max_bytes}); nothing was applied", "apply fewer paths (sbxc session apply ID PATH...), "
                          "or raise the quota")
    # Deletions deepest first (a folder's contents before it); the rest parents first.
    order = [kv for kv in todo.items() if kv[1] != "deleted"] + sorted(
        (kv for kv in todo.items() if kv[1] == "deleted"), key=lambda kv: -kv[0].count("/"))
    out = []
    record = journal.begin([project])
    try:
        for rel, change in order:
            if rel == "":
                continue
            try:
                _apply_one(project, ws, rel, change, manifest.get(rel))
                out.append((rel, change, None))
                # The host now holds the workspace's version: that is the new base, so a
                # second apply neither repeats it nor takes it for a host change.
                if change == "deleted":
                    manifest.pop(rel, None)
                else:
                    manifest[rel] = sc.entry(project, ws, rel, sc.now_ns())
            except Refused as r:
                out.append((rel, change, str(r)))
            except OSError as err:
                out.append((rel, change, err.strerror or str(err)))
    finally:
        import time

        journal.finish(record, time.time_ns())
    return out
