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
``relocate`` swaps the planned root for ``T`` in every path at or below the project
folder: the ``write`` of the project folder, the bwrap bind arguments and the environment
move together, so the command finds the throwaway where its variables point and nothing
refers to the suspect folder any more. The ``mask`` of the planned root stays, and ``T``
gets one as well (``masks``): the planned root still holds every other project's cache. Only sbxc's
own planned paths are relocated; the command's argv (after ``--``) is left alone.

The cache variables are handed to the sandboxed command only (``setup.env``); this module
never touches ``os.environ``.

The folders are opened and checked by ``sbxc.runtime.safeopen`` (its module text says
how and why).
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..layout import CACHE_MARKER_SUFFIX as MARKER_SUFFIX
from .errors import Refusal, one_line
# The cache folder's API for `sbxc cache` and `sbxc doctor` (one implementation each, here):
from .safeopen import (_DIR_FLAGS, Unsafe, nested_overflow_uid, open_cache, open_parents, open_project,  # noqa: F401
                       open_root)

_READ_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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


def _make_subdirs(dir_fd: int, rels) -> None:
    """Make each tool's subfolder (``go/mod`` …) below ``dir_fd``; existing ones are kept."""
    for rel in rels:
        parts = [p for p in rel.split("/") if p]
        fd = os.dup(dir_fd)
        try:
            for i, part in enumerate(parts):
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                if i == len(parts) - 1:
                    break  # nothing is made below the last one: no need to open it
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
    from .trees import remove_tree

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
# long as the run lasts; one that is unlocked and old was left by a run that was killed
# (``rundirs.reap``, which also reaps Landlock's per-run folders).


def _make_throwaway(uid: int, pid: str, subdirs) -> tuple[str, str, str, int]:
    """A fresh, empty 0700 root with ``pid`` inside, locked:
    returns (base, name, root path, descriptor holding the lock)."""
    import fcntl  # only on this rare path

    from .trees import remove_tree

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
    from .trees import remove_tree

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


def _reap(base_fd: int, uid: int, **kw) -> tuple[list, list]:
    from . import rundirs  # a throwaway is rare: not on the hot path

    return rundirs.reap(base_fd, f"{THROWAWAY_PREFIX}{uid}-", uid, **kw)


def leftover_throwaways(uid: int, now: float | None = None) -> list:
    """[(base, name)] of this user's throwaways that no running sbxc holds and that are
    older than ``rundirs.STALE_AFTER``: left by runs that were killed."""
    out = []
    for base in THROWAWAY_BASES:
        try:
            base_fd = open_parents(base + "/x", uid, _throwaway_trusted())
        except (Unsafe, OSError):
            continue
        try:
            out += [(base, n) for n in _reap(base_fd, uid, now=now, remove=False)[0]]
        finally:
            os.close(base_fd)
    return out


def remove_leftover_throwaways(uid: int) -> tuple[int, list]:
    """Remove this user's leftover throwaways: (how many, [OSError naming what is left])."""
    n = 0
    left = []
    for base in THROWAWAY_BASES:
        try:
            base_fd = open_parents(base + "/x", uid, _throwaway_trusted())
        except (Unsafe, OSError):
            continue
        try:
            removed, errors = _reap(base_fd, uid)
        finally:
            os.close(base_fd)
        n += len(removed)
        left += [OSError(e.errno, e.strerror, f"{base}/{e.filename or '?'}") for e in errors]
    return n, left


# --- the entry point ----------------------------------------------------------------------

class CacheSetup:
    """What ``prepare`` decided: see the module docstring for how the runtime uses it."""

    __slots__ = ("dir", "warning", "cleanup", "env", "planned_root", "actual_root", "pid", "real_dir", "root_masked")

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
        self.real_dir = f"{actual_root}/{pid}" if dir and actual_root and pid else None
        """``dir`` as a real path: every folder of it was just opened without following a
        link (no ``realpath`` needed on the hot path)."""
        self.root_masked = False
        """With a throwaway: the planned root keeps its mask (``masks``); set by ``prepare``
        when the root is a real folder, reached through no link (a mount on a link would
        land on its target, or fail)."""

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

    def masks(self, path: str) -> list:
        """Where a mask the plan puts on ``path`` goes: on the planned root it stays there
        and the throwaway root gets one too. Moved, it would leave the planned root, and
        every other project's cache in it, open to a command that may read around it
        (``read /``): a command can make its own project folder suspect (a chmod) and so
        get the next run a throwaway. Any other path as ``relocate`` puts it."""
        new = self.relocate(path)
        return [path, new] if new != path and path == self.planned_root and self.root_masked else [new]

    def relocate_argv(self, argv) -> list:
        """bwrap argv with sbxc's own path arguments relocated, the root's mask kept and
        doubled (``masks``); the command after the first ``--`` is the user's and stays as
        it is."""
        out = []
        it = iter(argv)
        for a in it:
            if a == "--":
                out.append(a)
                out.extend(it)
                break
            if a in _MASK_OPTIONS:
                target = next(it, None)
                if not isinstance(target, str):
                    out += [a] if target is None else [a, target]
                    continue
                for where in self.masks(target):
                    out += [a, where]
                continue
            out.append(self.relocate(a) if isinstance(a, str) else a)
        return out


_MASK_OPTIONS = ("--tmpfs", "--remount-ro")
"""bwrap's options that take one path and mask it (a folder's mask is an empty tmpfs, made
read-only once the binds inside it are made)."""


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
        setup.root_masked = os.path.isdir(root) and os.path.realpath(root) == root
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
