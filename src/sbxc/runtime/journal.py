"""The run journal: which runs could write which folders, and when.

A policy file that a sandboxed command could have created or changed must not take
effect until a person has looked at it (SPEC §5). Watching the files a run knows of
(``launch.policy_watch``) cannot see a policy planted in some other folder, one reached
later through ``extends``, or anything at all when sbxc dies before its post-run check.
The journal answers the question from the other side: for every run, the folders it could
write (real paths) and its time window; a policy file (or a symlink on the way to it)
whose ctime falls in a window of a run that could write where it lies is *tainted* until
``sbxc compile --check`` accepts it.

Entries, all in the plans folder (0700, out of every sandbox's reach):

- ``r-<pid>-<random>``: a run in progress, written (to a temporary name, then renamed)
  before the command starts: pid, process start time, writable roots. Removed only when
  the post-run checks have completed. One whose owner is gone (sbxc killed, or its checks
  failed) stands for a window that never closes; one whose owner is alive is a
  concurrent run, open as well.
- ``j-log``: the closed windows ``[start, end, roots]``, bounded (``MAX_WINDOWS``)
  by merging the oldest into wider ones (wider only taints more).
- ``a-<sha256 of real path>``: an accepted file: its sha256 and the (place, device,
  inode, ctime) of it and of every symlink on the way. Any change makes a new ctime and
  voids it.

Clock. ctime is set by the kernel from CLOCK_REALTIME (coarse, or fine-grained where the
file system has multigrain timestamps) and cannot be set back without CAP_SYS_TIME,
which no sandbox keeps. A run's start is the earlier of ``time.time_ns()`` before its
record is made and the record's own ctime (both before the command exists; a window
holds ``start <= ctime``). Its end is a ctime the kernel hands out once the sandbox's last
process is gone (``fs_now``): above every earlier one, and no later write gets less, so
a window holds ``ctime < end`` and a person's write just after sbxc exits is outside it,
however coarse the clock. A ctime that is a whole multiple of 10^k ns (a file system that
keeps only seconds, or 2 s on FAT) is compared with the start rounded down to that step,
so a coarse file system cannot hide a write inside the window. The windows also keep the
state of the files the post-run watch read after the sandbox ended: a file whose content
differs from it was changed after that run (``_covering``).

Hot path: ``begin`` and ``finish`` are a few syscalls each (no listing of the folder). The
journal is read only when a plan is compiled (a plan-cache miss): a cached plan is keyed
by its sources' sha256 and was only stored after they passed this check, so the same
bytes need no second look.
"""
from __future__ import annotations

import marshal
import os

from .errors import Refusal, one_line

RECORD_PREFIX = "r-"
ACCEPT_PREFIX = "a-"
WINDOWS_NAME = "j-log"
LOCK_NAME = "j-lock"
JOURNAL_VERSION = 1
MAX_WINDOWS = 128
MAX_ROOTS = 64
MAX_RECORD_BYTES = 1 << 20
COMPACT_AT = 64 << 10  # bytes of j-log before its appended windows are bounded and rewritten
_NEVER = 1 << 62  # the end of a window that is still open


def _proc_start(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): with the
    pid it names one process, not a later one that got the same pid. "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(4096)
    except OSError:
        return ""
    fields = data.rpartition(b")")[2].split()
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else ""


def owner_alive(pid: int, ident: str) -> bool:
    if ident:
        return _proc_start(pid) == ident
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ------------------------------------------------------------------ what a run could write

def writable_roots(pf: dict, cache_dir) -> list:
    """Real paths the run's command could write: the plan's ``write`` rules (already real
    paths, re-checked before the run), the project's cache folder, and on Landlock the
    per-run folders that stand in for ``tmpfs`` (a root ending in ``*`` is a name prefix).
    bwrap's ``tmpfs`` folders are private to the sandbox and vanish with it."""
    rt = pf.get("runtime") or {}
    backend = pf.get("backend")
    roots = set()
    for path, _kind, access in rt.get("checks", ()):
        if access == "write":
            roots.add(path)
        elif access == "tmpfs" and backend != "bwrap":
            if backend == "landlock":
                from .landlock_run import RUN_PREFIX  # the runner is loaded already

                # A per-run folder is made in the rule's folder, or in /tmp when that fails.
                for base in (path, "/tmp"):
                    roots.add(base.rstrip("/") + "/" + RUN_PREFIX + "*")
            else:
                roots.add(path)
    if cache_dir:
        roots.add(os.path.realpath(cache_dir))
    return sorted(roots)


def under(path: str, root: str) -> bool:
    if root.endswith("*"):
        return path.startswith(root[:-1])
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


# ------------------------------------------------------------------ entries

def _read(dir_fd: int, name: str):
    """(entry, stat) of a marshal entry of ours, or (None, None)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_RECORD_BYTES:
            return None, st
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        try:
            entry = marshal.loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            return None, st
        return (entry if isinstance(entry, dict) and entry.get("v") == JOURNAL_VERSION else None), st
    finally:
        os.close(fd)


def _write(dir_fd: int, name: str, entry: dict) -> None:
    """Write to a fresh name, then rename: readers see all of it or nothing. Raises OSError."""
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


class Run:
    """A run in progress: its record's name and when it started."""

    __slots__ = ("dir_fd", "name", "start", "roots")

    def __init__(self, dir_fd, name, start, roots):
        self.dir_fd, self.name, self.start, self.roots = dir_fd, name, start, roots


def begin(roots: list) -> Run:
    """Record, before the command starts, that a run which can write ``roots`` is in
    progress. A Refusal when it cannot be recorded: a run that no later run could account
    for does not start."""
    import time

    from .plancache import open_plans_dir, plans_dir

    dir_fd = open_plans_dir()
    if dir_fd < 0:
        raise Refusal(f"the plans folder {plans_dir()} cannot be used (it is missing and cannot be made, or another "
                      "user owns it, or its mode is wider than 0700), so this run could not be recorded",
                      f"remove it or fix its owner and mode (chmod 700 {plans_dir()})")
    pid = os.getpid()
    t0 = time.time_ns()
    name = f"{RECORD_PREFIX}{pid}-{os.urandom(6).hex()}"
    entry = {"v": JOURNAL_VERSION, "pid": pid, "ident": _proc_start(pid), "t0": t0, "roots": list(roots)}
    try:
        _write(dir_fd, name, entry)
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        os.close(dir_fd)
        raise Refusal(f"this run could not be recorded in the plans folder {plans_dir()} ({e.strerror or e})",
                      "free some space on its disk, then run again") from None
    return Run(dir_fd, name, min(t0, st.st_ctime_ns), list(roots))


def abandon(run: Run) -> None:
    """The command never started (a refusal in the child, an exec error): nothing to keep."""
    try:
        os.unlink(run.name, dir_fd=run.dir_fd)
    except OSError:
        pass
    os.close(run.dir_fd)


def finish(run: Run, end: int, watched=()) -> None:
    """The post-run checks completed: move the run's window, which ended at ``end`` (the
    real time once the sandbox's last process was gone), into ``j-log`` and remove its
    record. ``watched``: (real path, sha256 or "") of the policy files the post-run watch
    read after the sandbox ended (see ``_covering``). Raises OSError (or anything else)
    when that fails; the record then stays and the next run treats the window as open."""
    keep = [[p, d] for p, d in watched if any(under(p, r) for r in run.roots)]
    try:
        end = max(end, fs_now(run.dir_fd))
        with _locked(run.dir_fd):
            _append_windows(run.dir_fd, [[run.start, end, run.roots, keep]])
        os.unlink(run.name, dir_fd=run.dir_fd)
    finally:
        os.close(run.dir_fd)


CLOCK_NAME = "j-clock"


def fs_now(dir_fd: int) -> int:
    """A ctime the kernel hands out now, above every ctime it handed out before the call
    and at most equal to any it hands out after: the end of a window, compared with ``<``.

    ctimes mostly come from the coarse clock (one value per tick); with multigrain
    timestamps (Linux 6.13+, ext4, xfs, btrfs, tmpfs) a change to a file whose ctime was
    read gets a fine-grained one when the coarse value would not move it, and that raises
    a floor under all later ones. So: touch a file of ours, read its ctime (a), touch it
    again (b). b > a: b is above everything before the first touch. b == a (no multigrain,
    same tick): wait for the next tick and try again. A person's write after sbxc exits
    gets at least b, so it is not inside the window; the command's writes, all before the
    first touch, are below b."""
    import time

    fd = os.open(CLOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        os.utime(fd)
        a = os.fstat(fd).st_ctime_ns
        for _ in range(200):
            os.utime(fd)
            b = os.fstat(fd).st_ctime_ns
            if b > a:
                return b
            time.sleep(0.001)
        raise OSError("the file system clock did not advance")
    finally:
        os.close(fd)


class _locked:
    """An exclusive flock on ``j-lock``: two runs ending at once must not each write the
    windows they read, losing the other's (a lost window would hide a plant)."""

    def __init__(self, dir_fd):
        self.dir_fd = dir_fd
        self.fd = -1

    def __enter__(self):
        import fcntl

        self.fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.dir_fd)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)
        return False


def load_windows(dir_fd: int) -> list:
    """Every closed window in ``j-log``: a compacted list first, then one appended
    record per run since (each a 4-byte length and a marshal dump)."""
    try:
        fd = os.open(WINDOWS_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    except OSError:
        return [[0, _NEVER, ["/"]]]
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_RECORD_BYTES * 8:
            # Not ours, or damaged: its windows cannot be known, so everything any run
            # could have written since any time is suspect.
            return [[0, _NEVER, ["/"]]]
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    out = []
    pos = 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        if n > MAX_RECORD_BYTES:
            return [[0, _NEVER, ["/"]]]  # not a length sbxc wrote: the rest cannot be trusted
        if pos + 4 + n > len(data):
            break  # a torn last append (a crash while writing it): its run's record still stands
        try:
            item = marshal.loads(data[pos + 4:pos + 4 + n])
        except (EOFError, ValueError, TypeError):
            return [[0, _NEVER, ["/"]]]
        pos += 4 + n
        if isinstance(item, dict) and item.get("v") == JOURNAL_VERSION:
            out.extend(list(w) for w in item.get("w", ()))
        else:
            return [[0, _NEVER, ["/"]]]
    return out


def _append_windows(dir_fd: int, new: list) -> None:
    """Add closed windows. Called under ``_locked``. An append is one write and no rename:
    replacing a file by rename makes ext4 start writing the new one out at once
    (auto_da_alloc), about 2 ms on every run. Past MAX_WINDOWS appended ones, the whole
    list is bounded and written anew (rename), once in a while."""
    data = marshal.dumps({"v": JOURNAL_VERSION, "w": new})
    fd = os.open(WINDOWS_NAME, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000:
            raise OSError(f"{WINDOWS_NAME} in the plans folder is not sbxc's own file")
        blob = len(data).to_bytes(4, "little") + data
        while blob:
            blob = blob[os.write(fd, blob):]
        size = st.st_size
        head = int.from_bytes(os.pread(fd, 4, 0), "little") if size >= 4 else 0
    finally:
        os.close(fd)
    # Appends since the last compaction have outgrown it (and a first floor): compact.
    if size > max(COMPACT_AT, 2 * head):
        windows = load_windows(dir_fd)
        if len(windows) > MAX_WINDOWS:
            body = marshal.dumps({"v": JOURNAL_VERSION, "w": bound(windows)})
            tmp = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
            tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                blob = len(body).to_bytes(4, "little") + body
                while blob:
                    blob = blob[os.write(tfd, blob):]
            finally:
                os.close(tfd)
            os.rename(tmp, WINDOWS_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def bound(windows: list) -> list:
    """At most MAX_WINDOWS windows: merge the two neighbours (in time) with the shortest
    gap between them into one that spans both and whose roots cover both. Wider only ever
    taints more and no window is dropped; the long gaps, where a person edits between
    runs, stay outside every window longest."""
    windows = sorted(windows, key=lambda w: (w[0], w[1]))
    while len(windows) > MAX_WINDOWS:
        i = min(range(len(windows) - 1), key=lambda k: windows[k + 1][0] - windows[k][1])
        a, b = windows[i], windows[i + 1]
        # A merged window spans both and the gap: what a run's end state says of a
        # file no longer holds for it, so the watch lists go.
        windows[i:i + 2] = [[min(a[0], b[0]), max(a[1], b[1]), _cap_roots(set(a[2]) | set(b[2])), []]]
    return windows


def _cap_roots(roots: set) -> list:
    """Roots that cover ``roots``, at most MAX_ROOTS of them: past that, each is replaced
    by its folder (a prefix root by its folder too) until few enough remain."""
    while len(roots) > MAX_ROOTS:
        roots = {os.path.dirname(r.rstrip("*").rstrip("/")) or "/" for r in roots}
    # Drop those under another root: they add nothing.
    out = sorted(roots)
    return [r for r in out if not any(o != r and under(r.rstrip("*"), o) for o in out)]


# ------------------------------------------------------------------ the check

def way(path: str) -> list:
    """(place, st) of every symlink met while resolving ``path`` and of the file it
    reaches: each could have been planted. ``place`` is the entry's real location (its
    folder resolved, its own name kept)."""
    import posixpath
    import stat

    parts = [p for p in path.split("/") if p and p != "."]
    resolved = "/"
    out = []
    for _ in range(256):
        if not parts:
            break
        part = parts.pop(0)
        if part == "..":
            resolved = posixpath.dirname(resolved) or "/"
            continue
        cand = posixpath.join(resolved, part)
        try:
            st = os.lstat(cand)
        except OSError:
            break
        if stat.S_ISLNK(st.st_mode):
            out.append((cand, st))
            try:
                target = os.readlink(cand)
            except OSError:
                break
            if target.startswith("/"):
                resolved = "/"
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        resolved = cand
        if not parts:
            out.append((cand, st))
    return out


def _granule(ns: int) -> int:
    """The timestamp step a ctime shows (see the module text): 1 ns usually."""
    g = 1
    while g < 10 ** 9 and ns % (g * 10) == 0:
        g *= 10
    if g == 10 ** 9 and ns % (2 * 10 ** 9) == 0:
        g = 2 * 10 ** 9
    return g


class Window:
    __slots__ = ("start", "end", "roots", "pid", "alive", "after")

    def __init__(self, start, end, roots, pid=0, alive=False, after=None):
        self.start, self.end, self.roots, self.pid, self.alive = start, end, roots, pid, alive
        self.after = after or {}
        """Real path -> sha256 ("" none) of watched policy files read after the sandbox ended."""


def windows_now(dir_fd: int) -> list:
    """Every window: the closed ones, and one per record of a run in progress (``end``
    None), with whether its sbxc is still alive."""
    out = [Window(w[0], w[1], tuple(w[2]), after=dict(w[3]) if len(w) > 3 else None) for w in load_windows(dir_fd)]
    try:
        list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return out + [Window(0, None, ("/",))]  # cannot list: any run may be in progress
    try:
        with os.scandir(list_fd) as it:
            names = [e.name for e in it if e.name.startswith(RECORD_PREFIX)]
    finally:
        os.close(list_fd)
    for name in names:
        rec, st = _read(dir_fd, name)
        if rec is None:
            if st is not None:
                out.append(Window(0, None, ("/",)))  # damaged: what it could write is unknown
            continue
        start = min(int(rec.get("t0", 0)), st.st_ctime_ns)
        pid = int(rec.get("pid", 0))
        out.append(Window(start, None, tuple(rec.get("roots", ("/",))), pid, owner_alive(pid, rec.get("ident", ""))))
    return out


def _covering(windows, place: str, ctime: int, sha=None):
    """The first window whose roots hold ``place`` and whose time holds ``ctime``. A closed
    window does not count for a file whose content (``sha``) differs from what the watch
    read after that run's sandbox had ended: its last change came later. That settles the
    one case a ctime cannot (the coarse clock gives a write just after the run ended a
    ctime up to one tick earlier) for the files a person usually edits between runs: the
    current folder's policy and the plan's sources."""
    g = _granule(ctime)
    for w in windows:
        if w.start - w.start % g <= ctime and (w.end is None or ctime < w.end) and any(under(place, r) for r in w.roots):
            if sha is not None and w.end is not None and place in w.after and w.after[place] != sha:
                continue
            return w
    return None


def _hits(windows, path: str, sha: str, steps) -> list:
    real = os.path.realpath(path)
    return [(p, w) for p, st in steps
            for w in [_covering(windows, p, st.st_ctime_ns, sha if p == real else None)] if w is not None]


def _moved_in(windows, steps) -> list:
    """(folder, window) for each folder above the file or a link on the way whose ctime
    falls in a window of a run that could write the folder's parent. Renaming a folder
    leaves the ctime of everything inside it as it was, so a command that moves an old
    policy's folder to where the person will run next shows only in the moved folder's
    own ctime. A folder that merely got new entries during a run looks the same: used
    only for a path with no note yet, so that costs one acceptance per new policy path."""
    out = []
    seen = set()
    for place, _st in steps:
        d = os.path.dirname(place)
        while d not in seen and d != "/":
            seen.add(d)
            parent = os.path.dirname(d)
            try:
                ctime = os.lstat(d).st_ctime_ns
            except OSError:
                break
            w = _covering(windows, parent, ctime)
            if w is not None:
                out.append((d, w))
            d = parent
    return out


def _noted(dir_fd: int, path: str, steps) -> bool:
    """Whether this file (device and inode) at this path, through the same links, has a
    note (found clean, or accepted), whatever its content or ctime then: a known file at
    a new path, or a new file at a known path, is not."""
    entry, _st = _read(dir_fd, _accept_name(os.path.realpath(path)))
    if entry is None or not isinstance(entry.get("way"), list):
        return False
    return [list(x[:3]) for x in entry["way"]] == [x[:3] for x in _ids(steps)]


def _accept_name(real: str) -> str:
    from .plancache import _hex

    return ACCEPT_PREFIX + _hex(real.encode("utf-8", "surrogateescape"))


def _ids(steps) -> list:
    return [[p, st.st_dev, st.st_ino, st.st_ctime_ns] for p, st in steps]


def accepted(dir_fd: int, path: str, sha: str, steps) -> bool:
    entry, _st = _read(dir_fd, _accept_name(os.path.realpath(path)))
    return entry is not None and entry.get("sha") == sha and entry.get("way") == _ids(steps)


def refusal(path: str, place: str, w: Window) -> Refusal:
    import time

    shown = one_line(path, 300)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w.start / 1e9)) if w.start else "an unknown time"
    link = "" if place == os.path.realpath(path) else f" (through {one_line(place, 200)})"
    if w.end is not None:
        how = f"by the sandboxed command of a run that started at {when} and could write there"
    elif w.alive:
        how = f"by the sandboxed command of a run still in progress (sbxc pid {w.pid}, started {when})"
    else:
        how = (f"by the sandboxed command of a run that started at {when} (sbxc pid {w.pid}) and ended without "
               "completing its post-run checks")
    return Refusal(f"the policy {shown}{link} may have been written {how}",
                   f"review it, then accept it with 'sbxc compile --check {shown}'")


def check_sources(dir_fd: int, sources) -> None:
    """Refuse when a policy file (absolute paths of ``sources``, (path, sha256) pairs) is
    tainted and not accepted. Reads the journal once."""
    files = [(p, d) for p, d in sources if isinstance(p, str) and p.startswith("/")]
    if not files:
        return
    windows = windows_now(dir_fd)
    if not windows:
        return
    for path, sha in files:
        steps = way(path)
        hits = _hits(windows, path, sha, steps)
        if accepted(dir_fd, path, sha, steps):
            continue
        if not hits and not _noted(dir_fd, path, steps):
            hits = _moved_in(windows, steps)
        if hits:
            raise refusal(path, hits[0][0], hits[0][1])
        # Clean now, so clean for as long as nothing changes it (a later window starts
        # later than its ctime): noted, so that merging old windows into wider ones
        # (``bound``) never turns a file already found clean into a tainted one.
        _note(dir_fd, path, sha, steps)


def _note(dir_fd: int, path: str, sha: str, steps) -> bool:
    real = os.path.realpath(path)
    try:
        _write(dir_fd, _accept_name(real), {"v": JOURNAL_VERSION, "path": real, "sha": sha, "way": _ids(steps)})
        return True
    except OSError:
        return False


def accept(sources) -> tuple:
    """``sbxc compile --check`` passed on ``sources``: record each tainted file (and the
    links on the way) as accepted, and close the windows of runs whose sbxc is gone and
    that could write one of them (the person has now looked; what such a run could write
    before now stays tainted). Returns (paths accepted, pids of runs closed)."""
    from .plancache import open_plans_dir

    dir_fd = open_plans_dir()
    if dir_fd < 0:
        return [], []
    done, closed = [], []
    try:
        windows = windows_now(dir_fd)
        for path, sha in sources:
            if not isinstance(path, str) or not path.startswith("/"):
                continue
            steps = way(path)
            hit = _hits(windows, path, sha, steps) or (not _noted(dir_fd, path, steps) and _moved_in(windows, steps))
            if not hit or accepted(dir_fd, path, sha, steps):
                continue
            if _note(dir_fd, path, sha, steps):
                done.append(path)
        places = [p for path, _sha in sources if isinstance(path, str) and path.startswith("/")
                  for p, _st in way(path)]
        stale = [w for w in windows if w.end is None and w.pid and not w.alive and any(
            under(p, r) for p in places for r in w.roots)]
        if stale:
            now = fs_now(dir_fd)
            with _locked(dir_fd):
                _append_windows(dir_fd, [[w.start, now, list(w.roots), []] for w in stale])
            for name in _record_names(dir_fd):
                rec, _st = _read(dir_fd, name)
                if rec is not None and any(int(rec.get("pid", 0)) == w.pid for w in stale) and not owner_alive(
                        int(rec.get("pid", 0)), rec.get("ident", "")):
                    try:
                        os.unlink(name, dir_fd=dir_fd)
                        closed.append(int(rec["pid"]))
                    except OSError:
                        pass
    finally:
        os.close(dir_fd)
    return done, closed


def _record_names(dir_fd: int) -> list:
    list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        with os.scandir(list_fd) as it:
            return [e.name for e in it if e.name.startswith(RECORD_PREFIX)]
    finally:
        os.close(list_fd)
