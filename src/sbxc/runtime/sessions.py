"""The session store: where sessions, snapshots and the warm pool live, and their records.

Layout, under ``{root}/sessions`` (``root`` is the default cache root,
``layout.default_cache_root``: the plans folder's parent, which every plan masks)::

    sessions/                 0700, opened link by link (safeopen), like the plans folder
      lock                    flock: counting sessions and making one are one step
      s-<id>/                 a session: meta, manifest, ws/ (the workspace)
      n-<name>/               a snapshot: the same three, never written after it is made
      pool/<key>/e-<random>/  a ready copy (meta, manifest, ws/); <key> names its source
      pool/<key>/t-<random>/  a copy being made (flock held by its maker)

A session folder is made with ``state=starting`` in its meta and an exclusive flock held
by the process filling it; only when the workspace, its manifest and the staged files are
complete does the meta say ``state=ready``. A start that was killed leaves ``starting``
with no lock holder: ``list`` reports it as interrupted, ``stop`` removes it. Commands of a
session hold a shared flock on its folder while they run, so ``stop`` can refuse to pull a
workspace from under a running command.

Records are ``key=value`` lines (no ``json`` on the ``exec --session`` path); manifests
are ``marshal`` (written and read only by sbxc, in a folder no sandbox reaches).
"""
from __future__ import annotations

import os

from ..layout import default_cache_root
from .errors import Refusal
from .safeopen import Unsafe, open_owned, open_root

SUBDIR = "sessions"
SESSION_PREFIX = "s-"
SNAPSHOT_PREFIX = "n-"
_RD = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SessionError(Refusal):
    """A session operation that cannot go ahead: one ``sbxc: <cause>; <fix>`` line."""


def sessions_dir(environ=None) -> str:
    return default_cache_root(os.getuid(), os.environ if environ is None else environ) + "/" + SUBDIR


def open_store(environ=None, create: bool = True) -> int:
    """A read descriptor of the sessions folder, checked like the cache root and the plans
    folder (owner, 0700, no link on the way, parents root's or the caller's)."""
    uid = os.getuid()
    root = default_cache_root(uid, os.environ if environ is None else environ)
    path = root + "/" + SUBDIR
    try:
        root_fd = open_root(root, uid, create=create)
        try:
            fd, _ = open_owned(root_fd, SUBDIR, f"sessions folder {path}", path, uid, create)
        finally:
            os.close(root_fd)
    except Unsafe as e:
        raise SessionError(e.problem, e.fix) from None
    except FileNotFoundError:
        raise SessionError(f"there is no sessions folder {path}", "start a session first (sbxc session start)") \
            from None
    try:
        # O_PATH cannot be listed or locked: reopen it for reading, through the checked descriptor.
        return os.open(".", _RD, dir_fd=fd)
    finally:
        os.close(fd)


def mkdir_open(dir_fd: int, name: str) -> int:
    """A folder ``name`` in ``dir_fd`` (0700, made if missing), opened without following a link."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass
    return os.open(name, _RD, dir_fd=dir_fd)


def new_id() -> str:
    return os.urandom(6).hex()


def valid_id(text: str) -> bool:
    return len(text) == 12 and all(c in "0123456789abcdef" for c in text)


def valid_name(text: str) -> bool:
    """Snapshot names: letters, digits, ``.``, ``_``, ``-``; not starting with ``.``."""
    return 0 < len(text) <= 64 and not text.startswith(".") and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in text)


# ------------------------------------------------------------------ records

def write_meta(dir_fd: int, meta: dict) -> None:
    """``meta`` as ``key=value`` lines, replaced whole (temporary name, then rename)."""
    text = "".join(f"{k}={str(v).replace(chr(10), ' ')}\n" for k, v in sorted(meta.items()))
    tmp = f".meta-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
    os.rename(tmp, "meta", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_meta(dir_fd: int) -> dict:
    try:
        fd = os.open("meta", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return {}
    try:
        data = b""
        while len(data) < 1 << 16:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    out = {}
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def write_manifest(dir_fd: int, manifest: dict) -> None:
    import marshal

    tmp = f".manifest-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(marshal.dumps(manifest))
    finally:
        os.close(fd)
    os.rename(tmp, "manifest", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_manifest(dir_fd: int) -> dict:
    import marshal

    fd = os.open("manifest", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return marshal.loads(f.read())


# ------------------------------------------------------------------ locks

def try_lock(fd: int, shared: bool = False) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class StoreLock:
    """The store's own lock (``sessions/lock``), held while sessions are counted and one is
    made, so two starts cannot both take the last place under ``max_sessions``."""

    def __init__(self, store_fd: int):
        self.store_fd = store_fd
        self.fd = -1

    def __enter__(self):
        import fcntl

        self.fd = os.open("lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.store_fd)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


# ------------------------------------------------------------------ sessions and snapshots

class Entry:
    """One session or snapshot folder as ``list`` shows it."""

    __slots__ = ("kind", "name", "meta", "state", "dir")

    def __init__(self, kind, name, meta, state, dir):
        self.kind = kind  # "session" or "snapshot"
        self.name = name  # the id, or the snapshot's name
        self.meta = meta
        self.state = state  # ready, starting (a start in progress), interrupted
        self.dir = dir  # the folder's name in the store


def entry_state(store_fd: int, name: str, meta: dict) -> str:
    if meta.get("state") == "ready":
        return "ready"
    # "starting" (a start in progress) or "ephemeral" (an exec --ephemeral's, locked for
    # as long as its run lives): with nobody holding the lock, "interrupted".
    try:
        fd = os.open(name, _RD, dir_fd=store_fd)
    except OSError:
        return "interrupted"
    try:
        if try_lock(fd):
            return "interrupted"  # nobody holds it: the process that was filling it is gone
        return "ephemeral" if meta.get("state") == "ephemeral" else "starting"
    finally:
        os.close(fd)


def entries(store_fd: int) -> list:
    out = []
    with os.scandir(store_fd) as it:
        names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    for name in names:
        if name.startswith(SESSION_PREFIX):
            kind, shown = "session", name[len(SESSION_PREFIX):]
        elif name.startswith(SNAPSHOT_PREFIX):
            kind, shown = "snapshot", name[len(SNAPSHOT_PREFIX):]
        else:
            continue
        try:
            fd = os.open(name, _RD, dir_fd=store_fd)
        except OSError:
            continue
        try:
            meta = read_meta(fd)
        finally:
            os.close(fd)
        out.append(Entry(kind, shown, meta, entry_state(store_fd, name, meta), name))
    return out


def sessions_of(store_fd: int, project: str) -> list:
    return [e for e in entries(store_fd) if e.kind == "session" and e.meta.get("project", project) == project]


def open_session(store_fd: int, sid: str, ready: bool = True) -> tuple[int, dict]:
    """(read descriptor of the session's folder, its meta); a SessionError when there is
    no such session, or (``ready``) when its start did not complete."""
    if not valid_id(sid):
        raise SessionError(f"{sid!r} is not a session id", "use an id that sbxc session start printed (sbxc session list)")
    try:
        fd = os.open(SESSION_PREFIX + sid, _RD, dir_fd=store_fd)
    except FileNotFoundError:
        raise SessionError(f"there is no session {sid}", "see sbxc session list") from None
    meta = read_meta(fd)
    if ready and meta.get("state") != "ready":
        os.close(fd)
        raise SessionError(f"session {sid} did not finish starting", f"remove it with sbxc session stop {sid}")
    return fd, meta


def workspace_path(environ, sid: str) -> str:
    return f"{sessions_dir(environ)}/{SESSION_PREFIX}{sid}/ws"


def remove_entry(store_fd: int, name: str) -> None:
    from .trees import remove_tree

    remove_tree(store_fd, name)


def size_of(dir_fd: int, name: str = "ws") -> int:
    from .trees import disk_usage

    try:
        fd = os.open(name, _RD, dir_fd=dir_fd)
    except FileNotFoundError:
        return 0
    try:
        return disk_usage(fd)[0]
    finally:
        os.close(fd)


def human_size(n: int) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)
