"""Keeping the plan cache bounded; what ``sbxc doctor`` shows of it and what ``sbxc cache
clear`` removes from it.

The plans folder (``sbxc.runtime.planstore``) holds two kinds of files. Cached plans
(``p-``: compiled from a policy; ``f-``: the parsed copy of a ``--plan`` file) are a cache:
any of them can be dropped at any time, the next run that needs it compiles it again (a
run that already loaded one keeps its copy in memory). Everything else is a record that
later runs depend on and is never removed here: taints (``t-``), the run journal (``r-``
runs in progress, ``a-`` accepted files, ``j-log``, ``j-lock``, ``j-clock``) and the space
kept for taints (``reserve``). Dropping a taint or a run record would let a policy that a
sandboxed command wrote take effect unreviewed.

Limits (docs/decisions.md says why these): a plan is dropped 14 days after it was
compiled; past 256 plans or 16 MiB, the least recently compiled are dropped until at most
192 plans and 12 MiB remain (the gap keeps the next misses from pruning again at once).
A temporary name older than an hour is a write that died between its open and its rename.
A per-run folder (an OCI bundle of a run that was killed, from before bundles had the
``runs`` folder) is reaped as every stale per-run folder is (``rundirs.reap``).

When: after a plan is written, i.e. on a plan-cache miss, which compiles (tens of
milliseconds at least) and so pays one listing of the folder (below a millisecond for a
full cache). A hit never lists the folder. Ages are the entries' mtimes: a hit writes
nothing, so a plan in daily use is still compiled again once it is 14 days old.
"""
import marshal
import os
import time

from .planstore import MAX_PLAN_BYTES, read_all

PLAN_PREFIXES = ("p-", "f-")
TMP_PREFIX = ".tmp-"

MAX_AGE_S = 14 * 86400
MAX_ENTRIES = 256
MAX_BYTES = 16 << 20
KEEP_ENTRIES = 192
KEEP_BYTES = 12 << 20
TMP_AGE_S = 3600


def _listing(dir_fd: int) -> list:
    """(mtime ns, size, name) of every cached plan and temporary file; [] when the folder
    cannot be listed."""
    out = []
    try:
        # dir_fd is O_PATH (it cannot be listed): open the folder itself through it.
        list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return out
    try:
        with os.scandir(list_fd) as it:
            for e in it:
                if e.name.startswith(PLAN_PREFIXES + (TMP_PREFIX,)):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue  # removed meanwhile
                    out.append((st.st_mtime_ns, st.st_size, e.name))
    except OSError:
        pass
    finally:
        os.close(list_fd)
    return out


def _unlink(dir_fd: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False  # another run pruned it first
    except OSError:
        return False


def prune(dir_fd: int, now_ns: int | None = None) -> int:
    """Drop expired plans, stale temporary files, then the least recently compiled plans
    while the cache is past a limit. The number of files removed."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    plans = []
    removed = 0
    for mtime, size, name in _listing(dir_fd):
        age = now_ns - mtime
        if name.startswith(TMP_PREFIX):
            if age > TMP_AGE_S * 10**9:
                removed += _unlink(dir_fd, name)
        elif age > MAX_AGE_S * 10**9:
            removed += _unlink(dir_fd, name)
        else:
            plans.append((mtime, size, name))
    removed += _reap_bundles_here(dir_fd)
    total = sum(size for _m, size, _n in plans)
    if len(plans) <= MAX_ENTRIES and total <= MAX_BYTES:
        return removed
    plans.sort()
    count = len(plans)
    for _mtime, size, name in plans:
        if count <= KEEP_ENTRIES and total <= KEEP_BYTES:
            break
        removed += _unlink(dir_fd, name)
        count -= 1
        total -= size
    return removed


def _reap_bundles_here(dir_fd: int) -> int:
    """Stale OCI bundles in the plans folder itself, where runs made them before they got
    the ``runs`` folder (``layout.RUNS_SUBDIR``, reaped by every OCI run): a killed run's
    would otherwise stay for good. On a miss only, as the rest of the pruning."""
    from ..layout import RUN_DIR_PREFIX
    from .probe import host_program
    from .rundirs import reap

    # The plans folder: no sandbox can write it, so a container's state there is runc's.
    runc = host_program("runc", os.environ)[0] or ""
    return len(reap(dir_fd, RUN_DIR_PREFIX, os.geteuid(), name_len=len(RUN_DIR_PREFIX) + 16, runc=runc)[0])


class Summary:
    """What the plans folder holds, for ``sbxc doctor``."""

    __slots__ = ("plans", "plan_bytes", "oldest_ns", "taints", "runs", "accepted", "journal_bytes")

    def __init__(self):
        self.plans = self.plan_bytes = self.taints = self.runs = self.accepted = self.journal_bytes = 0
        self.oldest_ns = None


def summary(dir_fd: int) -> Summary:
    s = Summary()
    list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        with os.scandir(list_fd) as it:
            for e in it:
                n = e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if n.startswith(PLAN_PREFIXES):
                    s.plans += 1
                    s.plan_bytes += st.st_size
                    s.oldest_ns = st.st_mtime_ns if s.oldest_ns is None else min(s.oldest_ns, st.st_mtime_ns)
                elif n.startswith("t-"):
                    s.taints += 1
                elif n.startswith("r-"):
                    s.runs += 1
                elif n.startswith("a-"):
                    s.accepted += 1
                    s.journal_bytes += st.st_size
                elif n.startswith("j-"):
                    s.journal_bytes += st.st_size
    finally:
        os.close(list_fd)
    return s


def _project_of(dir_fd: int, name: str) -> str:
    """The project folder a cached plan was compiled for ('' when it cannot be read)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_PLAN_BYTES:
            return ""
        entry = marshal.loads(read_all(fd))
    except (OSError, EOFError, ValueError, TypeError):
        return ""
    finally:
        os.close(fd)
    plan = entry.get("plan") if isinstance(entry, dict) else None
    rt = plan.get("runtime") if isinstance(plan, dict) else None
    project = rt.get("project") if isinstance(rt, dict) else None
    return project if isinstance(project, str) else ""


def clear(dir_fd: int, project=None) -> tuple:
    """Remove every cached plan (``project`` None), or those compiled for ``project`` (a
    function of the plan's project folder saying whether it is the one). Taints and the
    run journal stay. (removed, failed) counts."""
    removed = failed = 0
    now_ns = time.time_ns()
    for mtime, _size, name in _listing(dir_fd):
        if name.startswith(TMP_PREFIX):
            # A young one may be a run's journal record or a taint being written right now.
            if project is not None or now_ns - mtime <= TMP_AGE_S * 10**9:
                continue
        elif project is not None and not project(_project_of(dir_fd, name)):
            continue
        try:
            os.unlink(name, dir_fd=dir_fd)
            removed += 1
        except FileNotFoundError:
            pass
        except OSError:
            failed += 1
    return removed, failed
