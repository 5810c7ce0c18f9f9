"""The warm pool: ready copies per source in ``pool/<key>/`` (store layout: ``sessions``),
taking one for a start, the background refill, and the project pool's keeper
(``session_keeper``, asked through ``session_ask``).

``p-<hash of the project's path>`` is a project's pool, ``n-<snapshot uid>`` a snapshot's.
A snapshot never changes, so its copies stay good while it exists. A project's copy is
taken only when the pool's keeper, which has watched the project since before it verified
or made that copy, vouches for it; without that answer, only when
``session_copy.project_unchanged`` says every entry of the project is as the copy recorded
it. Any other answer (an entry changed, gone, added, too recent for its stat to tell,
unreadable) means a fresh copy, and the stale one is removed.
"""
from __future__ import annotations

import os

from . import session_copy as sc
from .sessions import (SNAPSHOT_PREFIX, SessionError, mkdir_open, new_id, read_manifest, read_meta, remove_entry,
                       sessions_dir, size_of, try_lock, write_manifest, write_meta)

_RD = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
POOL = "pool"


def _pool_key_open(store_fd: int, key: str) -> int:
    """The pool's folder for ``key`` (``pool/<key>``), made if missing."""
    pool_fd = mkdir_open(store_fd, POOL)
    try:
        return mkdir_open(pool_fd, key)
    finally:
        os.close(pool_fd)


def _path(store: str, *names) -> str:
    return "/".join((store,) + names)


# ------------------------------------------------------------------ the pool

def pool_key(project: str, snapshot_uid: str = "") -> str:
    if snapshot_uid:
        return f"n-{snapshot_uid}"
    try:
        from _sha256 import sha256  # the C module alone: hashlib costs the start milliseconds
    except ImportError:
        from hashlib import sha256
    return "p-" + sha256(project.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def _make_ready(store_fd: int, store: str, key: str, source: dict, environ, name: str = "") -> bool:
    """One ready copy in ``pool/<key>`` (``e-<name>``): made under a locked temporary name,
    renamed into place only when complete."""
    key_fd = _pool_key_open(store_fd, key)
    try:
        tmp = "t-" + (name or new_id())
        fd = mkdir_open(key_fd, tmp)
        try:
            try_lock(fd)
            base = _path(store, POOL, key, tmp)
            started = sc.now_ns()
            sc.copy_tree(source["src"], base + "/ws", environ)
            if source.get("snapshot"):
                manifest = sc.record(source["project"], base + "/ws", started, base_manifest(store_fd, source),
                                     source["src"], int(source.get("ready_ns", 0)))
            else:
                manifest = sc.record(source["project"], base + "/ws", started)
            write_manifest(fd, manifest)
            write_meta(fd, {"project": source["project"], "made_ns": started, "method": source["method"]})
            os.rename(tmp, "e-" + tmp[2:], src_dir_fd=key_fd, dst_dir_fd=key_fd)
            return True
        except BaseException:
            remove_entry(key_fd, tmp)
            raise
        finally:
            os.close(fd)
    finally:
        os.close(key_fd)


def _ready_entries(store_fd: int, key: str) -> list:
    try:
        fd = os.open(f"{POOL}/{key}", _RD, dir_fd=store_fd)
    except OSError:
        return []
    try:
        with os.scandir(fd) as it:
            return sorted(e.name for e in it if e.name.startswith("e-"))
    finally:
        os.close(fd)


def _complete_entries(key_fd: int) -> list:
    """The ready copies of ``key_fd`` that still hold their workspace and manifest; the
    ones a start has emptied are removed on the way."""
    out = []
    with os.scandir(key_fd) as it:
        names = sorted(e.name for e in it if e.name.startswith("e-"))
    for name in names:
        has = [os.path.lexists(f"/proc/self/fd/{key_fd}/{name}/{part}") for part in ("ws", "manifest")]
        if all(has):
            out.append(name)
        elif not has[0]:
            remove_entry(key_fd, name)
    return out
def _reap_pool(store_fd: int, key: str) -> None:
    """Remove copies whose maker is gone before it finished (unlocked ``t-``) and entries
    a start has emptied (``e-`` without its workspace)."""
    try:
        key_fd = os.open(f"{POOL}/{key}", _RD, dir_fd=store_fd)
    except OSError:
        return
    try:
        with os.scandir(key_fd) as it:
            names = [e.name for e in it if e.name.startswith(("t-", "e-"))]
        for name in names:
            if name.startswith("e-"):
                try:
                    os.stat(f"{name}/ws", dir_fd=key_fd, follow_symlinks=False)
                except FileNotFoundError:
                    remove_entry(key_fd, name)
                continue
            try:
                fd = os.open(name, _RD, dir_fd=key_fd)
            except OSError:
                continue
            try:
                free = try_lock(fd)
            finally:
                os.close(fd)
            if free:
                remove_entry(key_fd, name)
    finally:
        os.close(key_fd)


def _claim(fd: int, into_fd: int) -> bool:
    """Move a ready copy (folder ``fd``) into the session folder ``into_fd``. The manifest
    goes first: of two starts racing for one copy, the one that got it takes the
    workspace too, and a copy without its manifest is never taken. Both are renames
    within one file system: the whole copy moves at once, whatever its size."""
    try:
        os.rename("manifest", "manifest", src_dir_fd=fd, dst_dir_fd=into_fd)
    except FileNotFoundError:
        return False
    try:
        os.rename("ws", "ws", src_dir_fd=fd, dst_dir_fd=into_fd)
    except FileNotFoundError:
        os.unlink("manifest", dir_fd=into_fd)
        return False
    return True


def take_ready(store_fd: int, key: str, source: dict, into_fd: int, size: int = 1):
    """Move a good ready copy into the session folder ``into_fd``: (how it was found good
    or "" when none was taken, whether a keeper answered); how: ``keeper`` (vouched for),
    ``entries`` (the full check), ``snapshot`` (a snapshot's copy, which needs none). A
    copy the keeper vouches for is taken as it is; any other only after the full check,
    and removed when that fails. The emptied entry is left for the refill to remove: the
    caller does not wait for it."""
    names = _ready_entries(store_fd, key)
    if not names:
        return "", False
    vouched, conn = set(), None
    kfd = -1
    if not source.get("snapshot"):
        from .session_ask import ask

        try:
            kfd = os.open(f"{POOL}/{key}", _RD, dir_fd=store_fd)
        except OSError:
            return "", False
        conn, vouched = ask(kfd, size)
        vouched = vouched or set()
    took = False
    # The copies the keeper vouches for first: any other costs the full check.
    names = [n for n in names if n in vouched] + [n for n in names if n not in vouched]
    try:
        for name in names:
            try:
                fd = os.open(f"{POOL}/{key}/{name}", _RD, dir_fd=store_fd)
            except OSError:
                continue
            try:
                try:
                    meta = read_meta(fd)
                    how = "snapshot" if source.get("snapshot") else "keeper" if name in vouched else "entries"
                    if meta.get("project") != source["project"]:
                        good = False
                    elif how != "entries":
                        good = True
                    else:
                        good = sc.project_unchanged(source["project"], read_manifest(fd))
                except FileNotFoundError:
                    continue  # taken by another start a moment ago
                except (OSError, ValueError, EOFError, TypeError):
                    good = False
                if good:
                    if _claim(fd, into_fd):
                        took = True
                        return how, conn is not None
                    continue
            finally:
                os.close(fd)
            pfd = os.open(f"{POOL}/{key}", _RD, dir_fd=store_fd)
            try:
                remove_entry(pfd, name)
            finally:
                os.close(pfd)
        return "", conn is not None
    finally:
        if conn is not None:
            from .session_ask import done

            done(conn, took)
        if kfd >= 0:
            os.close(kfd)


def refill(key: str, source: dict, size: int, environ, started_fd: int = -1) -> None:
    """Bring ``pool/<key>`` up to ``size`` ready copies (in the background), and for a
    project keep it current (``session_keeper``) until it has been idle for a while. One
    refill per pool at a time: it holds ``pool/<key>/refill.lock`` while it lives, and one
    that finds it held leaves the work to the first (a keeper counts again after every
    question and every second). ``pool/<key>/busy.lock`` is held while copies are made or
    checked. ``started_fd``: written to (and closed) once the locks are decided, so the
    caller knows the refill is under way (or not needed) when it returns."""
    from .sessions import open_store

    store_fd = open_store(environ)
    lock_fd = busy_fd = key_fd = -1
    try:
        key_fd = _pool_key_open(store_fd, key)
        lock_fd = os.open("refill.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=key_fd)
        mine = try_lock(lock_fd)
        if mine:
            import fcntl

            busy_fd = os.open("busy.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=key_fd)
            fcntl.flock(busy_fd, fcntl.LOCK_EX)
            # What `session list` shows beside the copies: the size the policy asks for.
            write_meta(key_fd, {"pool": size, "source": source.get("snapshot") or source["project"]})
        if started_fd >= 0:
            os.write(started_fd, b"1")
            os.close(started_fd)
            started_fd = -1
        if not mine:
            return
        source = dict(source)
        if not source.get("method"):
            source["method"] = sc.method(source["src"], sessions_dir(environ))
        if not source.get("snapshot"):
            from .session_ask import write_note
            from .session_keeper import GiveUp

            try:
                _keep(store_fd, key_fd, busy_fd, key, source, size, environ)
                return
            except GiveUp as e:
                write_note(key_fd, state="gave up", why=e.args[0])
                import fcntl

                fcntl.flock(busy_fd, fcntl.LOCK_EX)  # the keeper let it go: copies are made again
        _reap_pool(store_fd, key)
        store = sessions_dir(environ)
        for _ in range(size + 2):
            if len(_ready_entries(store_fd, key)) >= size:
                break
            _make_ready(store_fd, store, key, source, environ)
    finally:
        for fd in (started_fd, busy_fd, lock_fd, key_fd):
            if fd >= 0:
                os.close(fd)
        os.close(store_fd)


def _keep(store_fd: int, key_fd: int, busy_fd: int, key: str, source: dict, size: int, environ) -> None:
    """The project pool's keeper (``session_keeper.Keeper``), on this pool's operations."""
    from .session_keeper import Keeper

    store = sessions_dir(environ)
    project = source["project"]

    def verify(name: str) -> bool:
        try:
            fd = os.open(name, _RD, dir_fd=key_fd)
        except OSError:
            return False
        try:
            ok = read_meta(fd).get("project") == project and sc.project_unchanged(project, read_manifest(fd))
        except (OSError, ValueError, EOFError, TypeError):
            ok = False
        finally:
            os.close(fd)
        if not ok:
            remove_entry(key_fd, name)
        return ok

    _reap_pool(store_fd, key)
    k = Keeper(key_fd, busy_fd, project, size, lambda name: _make_ready(store_fd, store, key, source, environ, name),
               verify, lambda: _complete_entries(key_fd))
    try:
        try:
            k.arm()  # under the busy lock the refill took
        finally:
            k.busy(False)
        k.run()
    finally:
        k.close()


def refill_in_background(key: str, source: dict, size: int, environ) -> None:
    """``refill`` in a detached grandchild: the caller does not reap it, and it holds none
    of the caller's descriptors (a pipe the caller's caller reads would otherwise stay open
    until the copy is done). Returns once the refill holds its lock (or found it held)."""
    if size <= 0:
        return
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        os.waitpid(pid, 0)
        try:
            os.read(r, 1)  # end of file as well when the refill died before it got that far
        finally:
            os.close(r)
        return
    try:
        os.close(r)
        os.setsid()
        os.chdir("/")  # a keeper lives for a while: it must not hold the caller's folder
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, w)
        os.closerange(w + 1, 65536)
        refill(key, source, size, environ, started_fd=w)
    except BaseException:
        os._exit(1)
    os._exit(0)


def refill_running(store_fd: int) -> bool:
    """Whether any pool's refill is at work: making or checking copies (its busy lock
    held). A keeper that only watches does not count."""
    try:
        pfd = os.open(POOL, _RD, dir_fd=store_fd)
    except FileNotFoundError:
        return False
    try:
        for key in os.listdir(pfd):
            try:
                fd = os.open(f"{key}/busy.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            except OSError:
                continue
            try:
                if not try_lock(fd):
                    return True
            finally:
                os.close(fd)
        return False
    finally:
        os.close(pfd)


def base_manifest(store_fd: int, source: dict) -> dict:
    """The snapshot's manifest, read when a copy of it is made (a start served by the pool
    does not need it)."""
    if "manifest" not in source:
        fd = os.open(SNAPSHOT_PREFIX + source["snapshot"], _RD, dir_fd=store_fd)
        try:
            source["manifest"] = read_manifest(fd)
        finally:
            os.close(fd)
    return source["manifest"]


def pool_status(store_fd: int) -> dict:
    """{key: (ready copies, bytes, the pool size asked for, its source, keeper)}; keeper:
    ``session_keeper.note`` (watching, gave up and why, none), "" for a snapshot's pool."""
    from .session_ask import note

    out = {}
    try:
        pfd = os.open(POOL, _RD, dir_fd=store_fd)
    except FileNotFoundError:
        return out
    try:
        with os.scandir(pfd) as it:
            keys = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        for key in keys:
            kfd = os.open(key, _RD, dir_fd=pfd)
            try:
                ready = [n for n in os.listdir(kfd) if n.startswith("e-") and os.path.lexists(f"/proc/self/fd/{kfd}/{n}/ws")]
                meta = read_meta(kfd)
                out[key] = (len(ready), size_of(pfd, key), meta.get("pool", "?"), meta.get("source", ""),
                            note(kfd) if key.startswith("p-") else {})
            finally:
                os.close(kfd)
    finally:
        os.close(pfd)
    return out


def keeper_state(project: str, environ) -> dict:
    """``session_keeper.note`` for ``project``'s pool ({} when it has none): for ``doctor``."""
    from .session_ask import note
    from .sessions import open_store

    try:
        store_fd = open_store(environ, create=False)
    except SessionError:
        return {}
    try:
        kfd = os.open(f"{POOL}/{pool_key(project)}", _RD, dir_fd=store_fd)
    except OSError:
        return {}
    finally:
        os.close(store_fd)
    try:
        return note(kfd)
    finally:
        os.close(kfd)
