"""The per-project cache folder at run time: create, check, fall back, clean up (SPEC §6).

On the ``sbxc exec`` hot path: imports ``os`` and ``stat`` only.

Contract for the runtime core (``runtime/launch.py``)
------------------------------------------------------
Before building the sandbox::

    from .cachedir import prepare
    # May raise CacheRefused, a Refusal (exit 125): cache.required is set and the folder
    # failed its checks, or no safe throwaway could be made. Let it propagate.
    setup = prepare(planfile["runtime"]["cache"], project=planfile["runtime"]["project"])
    if setup.warning:
        stderr.write(setup.warning + "\n")   # one line, before the command's output
    argv   = setup.relocate_argv(bwrap_argv)     # bwrap: options before "--" only
    rules  = [(setup.relocate(p), rights) for p, rights in landlock_rules]   # Landlock
    env   += setup.env                            # the cache variables, relocated
    ...run the command...
    setup.cleanup()                                # always (finally:), even on failure;
                                                   # a no-op unless a throwaway was used

A throwaway can only be deleted by a process that outlives the command: when one is in
use, the runtime must wait for the command rather than exec it in place (``setup.dir !=
cache["dir"]`` tells), then call ``cleanup``.

``setup`` also unpacks as ``dir, warning, cleanup = prepare(...)``.

When the folder passes its checks nothing is relocated: ``setup.dir`` is the planned
folder. When it does not, ``prepare`` makes a throwaway root ``T`` (a fresh 0700 folder
with a random name in ``/var/tmp``, or ``/tmp``) holding ``T/{project-id}``, and
``relocate`` swaps the planned root for ``T`` in the root itself and in every path at or
below the project folder: the ``mask`` of the root and the ``write`` of the project
folder, the bwrap bind arguments and the environment all move together, so the sandbox sees the throwaway where the plan would
have shown the cache, and nothing refers to the suspect folder any more. Only sbxc's
own planned paths are relocated; the command's argv (after ``--``) is left alone.

The cache variables are handed to the sandboxed command only (``setup.env``); this module
never touches ``os.environ``.

Why the checks are done the way they are
----------------------------------------
Every folder is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, starting
at ``/``, and judged by ``fstat`` of what was opened, so a symlink swapped in between a
check and a use is never followed. The parents of the root must be owned by root or the
caller and, when others can write them, sticky (as ``/var/tmp`` is): then no other user
can rename the root or the project folder away and put their own in its place after the
checks, and the path the sandbox is later given stays the folder that was checked.
"""
from __future__ import annotations

import os
import stat

from .errors import Refusal, one_line
from .trees import disk_usage, empty_dir, open_for_removal, remove_tree  # noqa: F401 (re-exported)

# O_PATH is Linux-only; macOS opens the folder for reading instead (same no-follow checks).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MARKER_SUFFIX = ".project"  # same as sbxc.cache.MARKER_SUFFIX (not imported: hot path)
THROWAWAY_BASES = ("/var/tmp", "/tmp")
THROWAWAY_PREFIX = "sbxc-throwaway-"


def is_project_id(name: str) -> bool:
    """Whether ``name`` has the shape of a project folder (``<name>-<16 hex>``), as
    ``sbxc.cache.project_id`` makes them. Other entries in the root (the plan cache in
    ``plans``, markers) are not project caches."""
    head, _, digest = name.rpartition("-")
    return bool(head) and len(digest) == 16 and all(c in "0123456789abcdef" for c in digest) \
        and not name.startswith(".")


class CacheRefused(Refusal):
    """The run must not start (exit 125); ``exec_main`` prints ``line()`` as for any
    ``Refusal``."""


class Unsafe(Exception):
    """A cache folder failed a check: ``problem`` says what, ``fix`` what to do."""

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


# --- opening folders safely ---------------------------------------------------------------

_FIX_ROOT = "set cache.root to a folder you own, in a folder only root and you can write (the default is /var/tmp/sbxc-{uid})"


def _describe(name: str, dir_fd: int, shown: str, path: str) -> Unsafe:
    """Why ``name`` could not be opened as a folder; the lstat is for the message only."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        return Unsafe(f"{shown} cannot be opened ({e.strerror})", _FIX_ROOT)
    if stat.S_ISLNK(st.st_mode):
        return Unsafe(f"{shown} is a symlink",
                      f"remove the link (rm {path}) if you did not make it, or {_FIX_ROOT}")
    return Unsafe(f"{shown} is not a folder", f"move {path} away, or {_FIX_ROOT}")


def _read_small(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


def nested_overflow_uid() -> int:
    """The uid that owners outside this user namespace show as (the kernel's overflow uid,
    usually 65534) when this process runs in a user namespace other than the initial one;
    -1 in the initial namespace, where that uid is a real account."""
    fields = _read_small("/proc/self/uid_map").split()
    if fields[:3] == ["0", "0", "4294967295"] or not fields:
        return -1
    try:
        return int(_read_small("/proc/sys/kernel/overflowuid").strip() or "65534")
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
        fix = _FIX_ROOT
        if st.st_uid == nested_overflow_uid():
            fix = ("run sbxc outside this user namespace to get a persistent cache (the command is "
                   "sandboxed either way)")
        raise Unsafe(f"{shown} (on the way to the cache root) is owned by {_owner(st.st_uid)}", fix)
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise Unsafe(f"{shown} (on the way to the cache root) is writable by others and not sticky", _FIX_ROOT)


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
                             f"create it, or {_FIX_ROOT}") from None
            os.close(fd)
            fd = nfd
            _check_parent(fd, shown, uid, trusted)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_or_make(parent_fd: int, name: str, shown: str, path: str, uid: int, create: bool,
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
        return _open_or_make(parent, os.path.basename(root), f"cache root {root}", root, uid, create,
                             check_mode)[0]
    finally:
        os.close(parent)


def open_project(root_fd: int, root: str, pid: str, uid: int, check_mode: bool = True) -> int:
    """O_PATH descriptor of an existing ``root/pid``, checked like the root."""
    root = os.path.normpath(root)
    return _open_or_make(root_fd, pid, f"project cache {root}/{pid}", f"{root}/{pid}", uid, False,
                         check_mode)[0]


def open_cache(root: str, pid: str, uid: int, create: bool) -> tuple[int, int, bool]:
    """Open root and ``root/pid`` safely: (root O_PATH fd, project O_PATH fd, project made).

    Raises ``Unsafe`` naming the problem, or ``FileNotFoundError`` when ``create`` is false
    and a folder is missing.
    """
    root = os.path.normpath(root)
    root_fd = open_root(root, uid, create)
    try:
        proj_fd, made = _open_or_make(root_fd, pid, f"project cache {root}/{pid}", f"{root}/{pid}", uid, create)
    except BaseException:
        os.close(root_fd)
        raise
    return root_fd, proj_fd, made


def _make_subdirs(dir_fd: int, rels) -> None:
    """Make each tool's subfolder (``go/mod`` …) below ``dir_fd``; existing ones are kept."""
    for rel in rels:
        fd = os.dup(dir_fd)
        try:
            for part in [p for p in rel.split("/") if p]:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except OSError:
            pass  # the sandbox may have replaced it; the tool will say so, inside the sandbox
        finally:
            os.close(fd)


def _subdirs(cache: dict) -> list:
    base = cache["dir"].rstrip("/") + "/"
    return [v[len(base):] for _k, v in cache.get("env", ()) if v.startswith(base)]


def _touch_marker(root_fd: int, pid: str, project: str) -> None:
    """Record which project the folder belongs to and when it was last used.

    The marker sits beside the project folder, in the root the sandbox cannot see, so a
    sandboxed command cannot rewrite it. Best effort: a failure only costs doctor's label.
    """
    name = pid + MARKER_SUFFIX
    if not project.startswith("/"):
        return  # not told which project: leave no marker that would name the wrong one
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=root_fd)
    except FileExistsError:
        try:
            os.utime(name, dir_fd=root_fd, follow_symlinks=False)
        except OSError:
            pass
        return
    except OSError:
        return
    try:
        os.write(fd, project.encode("utf-8", "surrogateescape") + b"\n")
    finally:
        os.close(fd)


# --- removing trees: sbxc.runtime.trees (one implementation for every caller) ----------

def remove_project(root_fd: int, pid: str) -> None:
    """Delete one project's cache folder ``pid`` in the root and its marker beside it."""
    remove_tree(root_fd, pid)
    try:
        os.unlink(pid + MARKER_SUFFIX, dir_fd=root_fd)
    except FileNotFoundError:
        pass


def remove_project_at(root: str, project: str, uid: int) -> None:
    """``remove_project`` for the real path ``project`` under ``root``, when the root passes
    its checks (otherwise there is nothing of ours to remove). For tests and benchmarks
    that leave no cache folder behind."""
    from ..cache import project_id

    try:
        root_fd = open_root(root, uid, create=False)
    except (Unsafe, OSError):
        return
    try:
        remove_project(root_fd, project_id(project))
    finally:
        os.close(root_fd)


# --- the throwaway cache ------------------------------------------------------------------

# A throwaway is locked (flock on its folder) by the sbxc process that uses it, for as
# long as the run lasts. One that is unlocked and older than this was left by a run that
# was killed before it could clean up, and may be removed. The age rule covers the few
# microseconds between a throwaway's mkdir and its lock.
STALE_AFTER = 60.0


def _make_throwaway(uid: int, pid: str, subdirs) -> tuple[str, str, str, int]:
    """A fresh, empty 0700 root with ``pid`` inside, locked:
    returns (base, name, root path, descriptor holding the lock)."""
    import fcntl  # only on this rare path

    last = "no /var/tmp or /tmp to make it in"
    for base in THROWAWAY_BASES:
        try:
            base_fd = open_parents(base + "/x", uid, _throwaway_trusted())  # base and the folders above it
        except (Unsafe, OSError) as e:
            last = getattr(e, "problem", None) or f"{base}: {e}"
            continue
        try:
            _reap(base_fd, uid)
            for _attempt in range(8):
                name = f"{THROWAWAY_PREFIX}{uid}-{os.urandom(8).hex()}"
                try:
                    # mkdir fails on any existing name, link or not: the folder is new and
                    # ours; the parent is sticky or private, so no one else can swap it.
                    os.mkdir(name, 0o700, dir_fd=base_fd)
                except FileExistsError:
                    continue
                except OSError as e:
                    last = f"{base}: {e.strerror}"
                    break
                lock_fd = os.open(name, _READ_DIR_FLAGS, dir_fd=base_fd)
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.mkdir(pid, 0o700, dir_fd=lock_fd)
                    pfd = os.open(pid, _DIR_FLAGS, dir_fd=lock_fd)
                    try:
                        _make_subdirs(pfd, subdirs)
                    finally:
                        os.close(pfd)
                except BaseException:
                    os.close(lock_fd)
                    remove_tree(base_fd, name)
                    raise
                return base, name, f"{base}/{name}", lock_fd
        finally:
            os.close(base_fd)
    raise CacheRefused(f"the cache folder failed its checks and no throwaway cache folder could be made ({last})",
                       "fix the cache folder (see `sbxc doctor`), or turn caching off in the policy")


def _throwaway_trusted() -> tuple:
    """Owners accepted for /var/tmp, /tmp and the folders above them when making a
    throwaway. In a nested user namespace root's folders show as the overflow uid; a
    throwaway is empty and lives for one run, and the system's sticky /var/tmp and /tmp
    are root's on any real host, so that uid is accepted there (never for the persistent
    cache, which falls back to a throwaway instead)."""
    o = nested_overflow_uid()
    return (0,) if o < 0 else (0, o)


def _remove_throwaway(base: str, name: str, uid: int, lock_fd: int) -> None:
    try:
        base_fd = open_parents(base + "/x", uid, _throwaway_trusted())
    except (Unsafe, OSError):
        os.close(lock_fd)
        return
    try:
        remove_tree(base_fd, name)
    except OSError:
        pass  # reaped by a later run or `sbxc cache clear --all`; nothing outside was touched
    finally:
        os.close(base_fd)
        os.close(lock_fd)  # the lock goes last: no one reaps it while we delete


def leftover_throwaways(uid: int, now: float | None = None) -> list:
    """[(base, name)] of this user's throwaways that no running sbxc holds and that are
    older than ``STALE_AFTER``: left by runs that were killed."""
    out = []
    for base in THROWAWAY_BASES:
        try:
            base_fd = open_parents(base + "/x", uid, _throwaway_trusted())
        except (Unsafe, OSError):
            continue
        try:
            out += [(base, n) for n in _stale(base_fd, uid, now)]
        finally:
            os.close(base_fd)
    return out


def _stale(base_fd: int, uid: int, now: float | None = None) -> list:
    import fcntl
    import time

    now = time.time() if now is None else now
    prefix = f"{THROWAWAY_PREFIX}{uid}-"
    fd = os.open(".", _READ_DIR_FLAGS, dir_fd=base_fd)
    try:
        with os.scandir(fd) as it:
            names = [e.name for e in it if e.name.startswith(prefix)]
    finally:
        os.close(fd)
    out = []
    for name in names:
        try:
            dfd = os.open(name, _READ_DIR_FLAGS, dir_fd=base_fd)
        except OSError:
            continue
        try:
            st = os.fstat(dfd)
            if st.st_uid != uid or now - st.st_mtime < STALE_AFTER:
                continue
            try:
                fcntl.flock(dfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a running sbxc holds it
            fcntl.flock(dfd, fcntl.LOCK_UN)
            out.append(name)
        finally:
            os.close(dfd)
    return out


def _reap(base_fd: int, uid: int) -> None:
    """Remove this user's stale throwaways in ``base_fd`` (best effort)."""
    try:
        names = _stale(base_fd, uid)
    except OSError:
        return
    for name in names:
        try:
            remove_tree(base_fd, name)
        except OSError:
            pass


def remove_leftover_throwaways(uid: int) -> tuple[int, list]:
    """Remove this user's leftover throwaways: (how many, [OSError naming what is left])."""
    n = 0
    left = []
    for base, name in leftover_throwaways(uid):
        try:
            base_fd = open_parents(base + "/x", uid, _throwaway_trusted())
        except (Unsafe, OSError):
            continue
        try:
            remove_tree(base_fd, name)
            n += 1
        except OSError as e:
            left.append(OSError(e.errno, e.strerror, f"{base}/{e.filename or name}"))
        finally:
            os.close(base_fd)
    return n, left


# --- the entry point ----------------------------------------------------------------------

class CacheSetup:
    """What ``prepare`` decided: see the module docstring for how the runtime uses it."""

    __slots__ = ("dir", "warning", "cleanup", "env", "planned_root", "actual_root", "pid")

    def __init__(self, dir, warning, cleanup, env, planned_root, actual_root, pid=""):
        self.dir = dir
        """The project's cache folder this run uses (None when caching is off)."""
        self.warning = warning
        """One line for stderr when a throwaway is used, else None."""
        self.cleanup = cleanup if cleanup is not None else _noop
        """Call once after the command: deletes the throwaway (no-op otherwise)."""
        self.env = env
        """[(name, value)] of the cache variables for the sandboxed command only."""
        self.planned_root = planned_root
        self.actual_root = actual_root
        self.pid = pid

    def __iter__(self):
        return iter((self.dir, self.warning, None if self.cleanup is _noop else self.cleanup))

    def relocate(self, path: str) -> str:
        """``path`` moved into the throwaway when it is the planned root (its mask) or lies
        at or under the planned project folder (its bind, the tools' subfolders). Nothing
        else moves: a root chosen above other rule paths (``/var/tmp`` itself, say) must
        not drag the project or the plan cache along."""
        old, new = self.planned_root, self.actual_root
        if not old or old == new:
            return path
        if path == old:
            return new
        pdir = old + "/" + self.pid
        if path == pdir or path.startswith(pdir + "/"):
            return new + path[len(old):]
        return path

    def relocate_argv(self, argv) -> list:
        """bwrap argv with sbxc's own path arguments relocated; the command after the
        first ``--`` is the user's and stays as it is."""
        out = []
        it = iter(argv)
        for a in it:
            if a == "--":
                out.append(a)
                out.extend(it)
                break
            out.append(self.relocate(a) if isinstance(a, str) else a)
        return out


def _noop() -> None:
    return None


def _once(fn):
    done = []

    def run() -> None:
        if not done:
            done.append(True)
            fn()

    return run


def prepare(cache: dict, project: str = "", uid: int | None = None) -> CacheSetup:
    """Make sure this project's cache folder is safe to hand to the sandbox.

    ``cache`` is the plan file's ``runtime.cache`` section (``enabled``, ``root``, ``dir``,
    ``env``, ``required``); ``project`` the project's real path (recorded for doctor).
    Returns a ``CacheSetup``. Raises ``CacheRefused`` (exit 125) when ``required`` is set
    and the folder fails a check, or when no safe throwaway can be made.
    """
    uid = os.getuid() if uid is None else uid
    if not cache or not cache.get("enabled"):
        return CacheSetup(None, None, None, [], "", "")
    root = os.path.normpath(cache["root"])
    planned = cache["dir"]
    pid = os.path.basename(planned)
    env = [(k, v) for k, v in cache.get("env", ())]
    try:
        root_fd, proj_fd, _made = open_cache(root, pid, uid, create=True)
    except (Unsafe, OSError) as e:
        problem = e.problem if isinstance(e, Unsafe) else f"cache folder {planned}: {e.strerror or e}"
        fix = (e.fix if isinstance(e, Unsafe) else "") or "set cache.root to a folder you own, outside others' reach"
        if cache.get("required"):
            raise CacheRefused(f"{problem}, and cache.required is set", fix) from None
        base, name, troot, lock_fd = _make_throwaway(uid, pid, _subdirs(cache))
        setup = CacheSetup(f"{troot}/{pid}", None, None, env, root, troot, pid)
        setup.env = [(k, setup.relocate(v)) for k, v in env]
        setup.warning = one_line(f"sbxc: warning: {problem}; this run uses an empty throwaway cache "
                                 f"(deleted afterwards); fix: {fix}")
        setup.cleanup = _once(lambda: _remove_throwaway(base, name, uid, lock_fd))
        return setup
    try:
        _make_subdirs(proj_fd, _subdirs(cache))
        _touch_marker(root_fd, pid, project)
    finally:
        os.close(proj_fd)
        os.close(root_fd)
    return CacheSetup(planned, None, None, env, root, root, pid)
