"""The plans folder: where compiled plans, taints and the run journal are kept, out of
every sandbox's reach (``/var/tmp/sbxc-{uid}/plans``, 0700, the caller's; docs/runtime.md
says why there and how every backend keeps it out of the sandbox).

Entries are ``marshal`` dumps of dicts: loading one costs microseconds and imports
nothing, where ``json`` costs ~11 ms of imports (through ``re``) on every run. Written to a
fresh temporary name, then renamed: a reader sees all of an entry or none.

Hot path: ``os``, ``marshal`` and a sha256 from the interpreter's builtin module.
"""
from __future__ import annotations

import marshal
import os

from .. import layout

try:  # the builtin module: ``hashlib`` costs ~6 ms of imports (OpenSSL bindings)
    from _sha256 import sha256
except ImportError:  # Python 3.12+ renamed it
    try:
        from _sha2 import sha256  # type: ignore
    except ImportError:
        from hashlib import sha256  # type: ignore


MAX_PLAN_BYTES = 16 << 20
"""No entry (or plan file) is larger; a bigger file is not sbxc's."""

# O_PATH is Linux-only; macOS opens the folder for reading instead (same no-follow checks).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def plans_dir(uid: int | None = None) -> str:
    return layout.plans_dir(os.getuid() if uid is None else uid)


def sha256_hex(data: bytes) -> str:
    return sha256(data).hexdigest()


def open_plans_dir(create: bool = True) -> int:
    """O_PATH descriptor of the plans folder after the ownership checks, or -1 when it is
    missing or fails one (then nothing is read from or written to it)."""
    from .safeopen import Unsafe, open_owned, open_root

    uid = os.getuid()
    path = plans_dir(uid)
    root = os.path.dirname(path)
    try:
        root_fd = open_root(root, uid, create)
    except (Unsafe, OSError):
        return -1
    try:
        fd, _ = open_owned(root_fd, layout.PLANS_SUBDIR, f"plan cache {path}", path, uid, create)
        return fd
    except (Unsafe, OSError):
        return -1
    finally:
        os.close(root_fd)


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def read_with_stat(dir_fd: int, name: str, version: int, limit: int = MAX_PLAN_BYTES):
    """(entry, stat) of the entry ``name``: (None, stat) when it is not a regular file of
    ours of at most ``limit`` bytes holding a dict of ``version`` (damaged, or not sbxc's);
    (None, None) when it cannot be opened (usually: there is none). O_NONBLOCK: nothing
    here may hang on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000 or st.st_size > limit:
            return None, st
        try:
            entry = marshal.loads(read_all(fd))
        except (EOFError, ValueError, TypeError):
            return None, st
        return (entry if isinstance(entry, dict) and entry.get("v") == version else None), st
    finally:
        os.close(fd)


def read_entry(dir_fd: int, name: str, version: int):
    """The entry ``name`` (a dict of ``version``), or None (see ``read_with_stat``)."""
    return read_with_stat(dir_fd, name, version)[0]


def write_atomic(dir_fd: int, name: str, entry: dict) -> None:
    """Write ``entry`` to a fresh temporary name, then rename it to ``name``: readers see
    all of it or nothing. Raises OSError (a full disk, no inodes), leaving nothing behind."""
    data = marshal.dumps(entry)
    tmp = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_entry(dir_fd: int, name: str, entry: dict, trim: bool = True) -> bool:
    """``write_atomic``; False when it could not be written. ``trim``: keep the folder
    bounded afterwards (plans; never for taints)."""
    try:
        write_atomic(dir_fd, name, entry)
    except OSError:
        return False
    if trim:
        _trim(dir_fd)
    return True


MAX_ENTRIES = 256
KEEP_ENTRIES = 192


def _trim(dir_fd: int) -> None:
    """Keep the folder bounded: past MAX_ENTRIES, drop the least recently written entries.
    Runs on a miss only (a hit never lists the folder)."""
    entries = []
    try:
        # dir_fd is O_PATH (it cannot be listed): open the folder itself through it.
        list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        with os.scandir(list_fd) as it:
            for e in it:
                if e.name.startswith(("p-", "f-", ".tmp-")):
                    try:
                        entries.append((e.stat(follow_symlinks=False).st_mtime_ns, e.name))
                    except OSError:
                        pass
    except OSError:
        return
    finally:
        os.close(list_fd)
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort()
    for _mtime, name in entries[: len(entries) - KEEP_ENTRIES]:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
