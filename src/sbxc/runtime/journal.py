"""The run journal: which runs could write which folders, and when (this module keeps
the records; ``sbxc.runtime.journal_check`` asks them about a policy file).

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
import marshal
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..layout import RUN_DIR_PREFIX
from .errors import Refusal
from .planstore import open_plans_dir, plans_dir, read_with_stat, write_atomic

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
    paths, re-checked before the run), the project's cache folder (``cache_dir``, its real
    path: ``CacheSetup.real_dir``), and on Landlock the per-run folders that stand in for
    ``tmpfs`` (a root ending in ``*`` is a name prefix). bwrap's and runc's ``tmpfs``
    folders are private to the sandbox and vanish with it."""
    rt = pf.get("runtime") or {}
    backend = pf.get("backend")
    roots = set()
    for check in rt.get("checks", ()):
        path, access = check[0], check[2]
        if access == "write":
            roots.add(path)
        elif access == "tmpfs" and backend not in ("bwrap", "oci"):
            if backend == "landlock":
                # A per-run folder is made in the rule's folder, or in /tmp when that fails.
                for base in (path, "/tmp"):
                    roots.add(base.rstrip("/") + "/" + RUN_DIR_PREFIX + "*")
            else:
                roots.add(path)
    if cache_dir:
        roots.add(cache_dir)  # a real path: cachedir opened it link by link
    return sorted(roots)


def under(path: str, root: str) -> bool:
    if root.endswith("*"):
        return path.startswith(root[:-1])
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


# ------------------------------------------------------------------ entries

def read(dir_fd: int, name: str):
    """(entry, stat) of a journal entry of ours, or (None, stat) / (None, None)."""
    return read_with_stat(dir_fd, name, JOURNAL_VERSION, MAX_RECORD_BYTES)


class Run:
    """A run in progress: its record's name and when it started."""

    __slots__ = ("dir_fd", "name", "start", "roots")

    def __init__(self, dir_fd, name, start, roots):
        self.dir_fd, self.name, self.start, self.roots = dir_fd, name, start, roots


def begin(roots: list) -> Run:
    """Record, before the command starts, that a run which can write ``roots`` is in
    progress. A Refusal when it cannot be recorded: a run that no later run could account
    for does not start."""
    dir_fd = open_plans_dir()
    if dir_fd < 0:
        raise Refusal(f"the plans folder {plans_dir()} cannot be used (it is missing and cannot be made, or another "
                      "user owns it, or its mode is wider than 0700), so this run could not be recorded",
                      f"remove it or fix its owner and mode (chmod 700 {plans_dir()})")
    pid = os.getpid()
    name = f"{RECORD_PREFIX}{pid}-{os.urandom(6).hex()}"
    try:
        # The window's start: a ctime above every ctime handed out before now (fs_now), so a
        # file the person wrote right before the run, even within the same clock tick, is
        # not inside it; and at most any ctime handed out later, so every write of the
        # command is. (The real time and the record's own ctime were used before: a write
        # in the same coarse tick as the record then counted as the run's.)
        t0 = fs_now(dir_fd)
        entry = {"v": JOURNAL_VERSION, "pid": pid, "ident": _proc_start(pid), "t0": t0, "roots": list(roots)}
        write_atomic(dir_fd, name, entry)
    except OSError as e:
        os.close(dir_fd)
        raise Refusal(f"this run could not be recorded in the plans folder {plans_dir()} ({e.strerror or e})",
                      "free some space on its disk, then run again") from None
    return Run(dir_fd, name, t0, list(roots))


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
        with windows_lock(run.dir_fd):
            append_windows(run.dir_fd, [[run.start, end, run.roots, keep]])
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


class windows_lock:
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


def append_windows(dir_fd: int, new: list) -> None:
    """Add closed windows. Called under ``windows_lock``. An append is one write and no rename:
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
