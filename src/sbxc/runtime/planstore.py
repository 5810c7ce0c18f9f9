"""The plans folder: where compiled plans, taints and the run journal are kept, out of
every sandbox's reach (``/var/tmp/sbxc-{uid}/plans``, 0700, the caller's; docs/runtime.md
says why there and how every backend keeps it out of the sandbox).

Entries are ``marshal`` dumps of dicts: loading one costs microseconds and imports
nothing, where ``json`` costs ~11 ms of imports (through ``re``) on every run. Written to a
fresh temporary name, then renamed: a reader sees all of an entry or none.

Taints. A policy file usually lies in the project, which the command may write. The run
watches the files it knows of (the plan's sources, every discovery candidate from the
current folder up: ``policy_watch``); one that appeared, changed or vanished while the
command ran is *tainted* (``note_policy_changes``): the next ``exec`` refuses it
(``check_taints``) until ``sbxc compile --check`` accepts it (``accept_policies``). The run
journal (``sbxc.runtime.journal``) answers the same question for the files no run
watched. A taint is an entry ``t-`` + sha256(real path) holding the file's sha256 as the
command left it ("" for removed); never pruned.

Hot path: ``os``, ``marshal`` and a sha256 from the interpreter's builtin module; one
failed open per watched file that does not exist.
"""
import marshal
from ..fastos import os  # the hot path's os (sbxc.fastos)

import sys

from .. import layout
from ..discovery import candidates
from ..layout import BUILTIN_PREFIX, MAX_POLICY_BYTES, builtin_policy_path
from .errors import Refusal, one_line
from .safeopen import open_regular, real_paths

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
    return layout.plans_dir(os.getuid() if uid is None else uid, os.environ)


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


def write_entry(dir_fd: int, name: str, entry: dict) -> bool:
    """``write_atomic``; False when it could not be written. Writers of cached plans then
    keep the cache bounded (``planprune.prune``); taints are never pruned."""
    try:
        write_atomic(dir_fd, name, entry)
    except OSError:
        return False
    return True


# ------------------------------------------------------------------ taints

TAINT_VERSION = 2
"""The entry version (the plan cache's numbering, which taint entries have always used)."""

# A policy file that a sandboxed command wrote (or removed) is "tainted" until the caller
# accepts it with `sbxc compile --check`: one entry per path, ``t-`` + sha256(path),
# holding the file's sha256 as the command left it ("" for removed). Kept in the plans
# folder because no sandbox can write there; never pruned (see planprune).
TAINT_PREFIX = "t-"


def _taint_key(path: str) -> str:
    """The file a path names, whatever spelling reached it: a folder link or a policy file
    that is itself a link must not give the same file a second, untainted name."""
    return os.path.realpath(path)


def _taint_name(path: str) -> str:
    return TAINT_PREFIX + sha256_hex(_taint_key(path).encode("utf-8", "surrogateescape"))


# Space kept free in the plans folder for taint entries: a command that fills the disk
# through its writable cache folder (same filesystem) must not thereby stop its own policy
# change from being recorded. Freed (unlinked) when a taint cannot be written otherwise.
RESERVE_NAME = "reserve"
RESERVE_BYTES = 1 << 16


def ensure_reserve(dir_fd: int) -> None:
    try:
        os.stat(RESERVE_NAME, dir_fd=dir_fd, follow_symlinks=False)
        return
    except OSError:
        pass
    try:
        fd = os.open(RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        pass
    finally:
        os.close(fd)


def policy_state(path: str) -> str:
    """sha256 of the regular file at ``path``; "" when there is none (what discovery, which
    takes regular files only, would not find). Only a regular file is opened for reading:
    a sandboxed command can link the name to a device (opening one runs its driver: a
    watchdog reboots the host, a serial port raises DTR) or a FIFO. O_PATH opens the name
    alone; what it names is then opened through /proc/self/fd, the same inode
    (``safeopen.open_regular``)."""
    try:
        fd = open_regular(path)
    except OSError as e:
        _raise_if_sbxc_failed(e)
        return ""
    if fd < 0:
        return ""
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000:
            return ""
        if st.st_size > MAX_POLICY_BYTES:
            # No policy is this large (the compiler refuses it); hashing a sparse 1 TB file
            # would hold sbxc for hours. A fixed state that no real content hashes to.
            return f"oversized:{st.st_size}:{st.st_mtime_ns}"
        h = sha256()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
        return h.hexdigest()
    except OSError as e:
        _raise_if_sbxc_failed(e)
        return ""
    finally:
        os.close(fd)


def source_state(path: str) -> str:
    """``policy_state`` of a plan's source, ``builtin:NAME`` too (its file in the package)."""
    if path.startswith(BUILTIN_PREFIX):
        path = builtin_policy_path(path[len(BUILTIN_PREFIX):])
    return policy_state(path)


def _raise_if_sbxc_failed(e: OSError) -> None:
    """Out of descriptors or memory says nothing about the file: answering "no file" then
    would report a policy as removed (or an appeared one as absent). Let it raise."""
    import errno

    if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        raise e


def read_taint(dir_fd: int, path: str):
    """The sha256 a sandboxed command left ``path`` with ("" removed), or None."""
    entry = read_entry(dir_fd, _taint_name(path), TAINT_VERSION)
    if entry is None or entry.get("path") != _taint_key(path) or not isinstance(entry.get("sha"), str):
        return None
    return entry["sha"]


def drop_taint(dir_fd: int, path: str) -> bool:
    try:
        os.unlink(_taint_name(path), dir_fd=dir_fd)
        return True
    except OSError:
        return False


def record_taints(changed) -> bool:
    """Record (path, sha256 now) pairs as written by a sandboxed command. False when the
    plans folder is unusable (nothing could be recorded)."""
    dir_fd = open_plans_dir()
    if dir_fd < 0:
        return False
    ok = True
    try:
        for path, sha in changed:
            entry = {"v": TAINT_VERSION, "path": _taint_key(path), "sha": sha}
            if not write_entry(dir_fd, _taint_name(path), entry):
                try:
                    os.unlink(RESERVE_NAME, dir_fd=dir_fd)  # the space kept for this
                except OSError:
                    pass
                ok = write_entry(dir_fd, _taint_name(path), entry) and ok
        ensure_reserve(dir_fd)
        return ok
    finally:
        os.close(dir_fd)


def check_taints(dir_fd: int, sources, nearer=()) -> None:
    """Refuse a plan built from a policy file a sandboxed command wrote, or found by
    discovery because a nearer one was removed by a sandboxed command. One openat per
    path (a missing entry is the usual case). A taint whose file changed since (the
    caller edited it) no longer describes the file and is dropped."""
    for path, digest in sources:
        if not isinstance(path, str) or not path.startswith("/"):
            continue  # builtins live in the package, which no sandbox writes
        sha = read_taint(dir_fd, path)
        if sha is None:
            continue
        if sha == digest:
            shown = one_line(path, 300)
            raise Refusal(f"the policy {shown} was written by a sandboxed command during an earlier run",
                          f"review it, then accept it with 'sbxc compile --check {shown}'")
        drop_taint(dir_fd, path)
    for path in nearer:
        sha = read_taint(dir_fd, path)
        if sha is None:
            continue
        if sha == "" and policy_state(path) == "":
            raise Refusal(f"the policy {one_line(path, 300)} was removed by a sandboxed command during an "
                          "earlier run (without it another policy applies here)",
                          "restore it, or accept the removal with 'sbxc compile --check' in this folder")
        drop_taint(dir_fd, path)


def accept_policies(sources, cwd: str = "", used: str = "") -> list:
    """``sbxc compile --check`` passed: drop the taints of the files it checked (and, for
    discovery from ``cwd``, of removed files nearer than ``used``). The paths dropped."""
    dir_fd = open_plans_dir(create=False)
    if dir_fd < 0:
        return []
    dropped = []
    try:
        paths = [p for p, _d in sources if isinstance(p, str) and p.startswith("/")]
        if cwd:
            paths += candidates(cwd, used)
        for path in paths:
            if read_taint(dir_fd, path) is not None and drop_taint(dir_fd, path):
                dropped.append(path)
    finally:
        os.close(dir_fd)
    return dropped


def policy_watch(sources, cwd: str) -> list:
    """(path, state) pairs to compare after the run: the plan's absolute sources with the
    sha256 the plan was built from (just verified by the plan cache or the compiler), and
    every discovery candidate from ``cwd`` up with its state now ("" missing). Most
    candidates do not exist: one failed open each."""
    watch = [(p, d) for p, d in sources or () if isinstance(p, str) and p.startswith("/")]
    seen = {p for p, _d in watch}
    for cand in candidates(cwd):
        if cand not in seen:
            watch.append((cand, policy_state(cand)))
    return watch


def note_policy_changes(watch) -> None:
    """After the command (and every process of its sandbox) has ended: for each watched
    policy file that appeared, changed or vanished, one warning line, and a taint entry in
    the plans folder so that the next ``exec`` refuses it until it is accepted. Returns
    (real path, state) of every watched file as read now, for the run journal."""
    changed = []
    after = []
    watch = list(watch or ())
    for (path, before), real in zip(watch, real_paths([p for p, _b in watch])):
        now = policy_state(path)  # bounded: an oversized file is not hashed
        after.append((real, now))
        if now != before:
            changed.append((path, before, now))
    if not changed:
        return after
    # Recorded first, printed after: an interrupt while printing must not lose the taints.
    recorded = record_taints([(path, now) for path, _before, now in changed])
    for path, before, now in changed:
        shown = one_line(path, 300)
        what = "appeared" if not before else ("was removed" if not now else "changed")
        sys.stderr.write(f"sbxc: warning: the policy file {shown} {what} while the command ran (a sandboxed command "
                         f"may have loosened the next run); sbxc refuses it until you review it and run "
                         f"'sbxc compile --check{'' if not now else ' ' + shown}'\n")
    if not recorded:
        sys.stderr.write("sbxc: warning: these changes could not be recorded (the plan cache folder is unusable or "
                         "its disk is full), so the next run cannot refuse them; review them before running sbxc again\n")
    return after
