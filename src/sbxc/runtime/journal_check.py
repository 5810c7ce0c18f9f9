"""The run journal's question: may this policy file have been written by a sandboxed run?

A policy file (or a symlink on the way to it) whose ctime falls in the window of a run
that could write where it lies is tainted until ``sbxc compile --check`` accepts it
(``accept``). The records, the windows and the clock are ``sbxc.runtime.journal``'s (its
module text says how the windows are bounded by ctimes); this module reads them. Only on
a plan-cache miss and in ``compile --check``: a cached plan was stored after its sources
passed this check.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..linkwalk import links_on_the_way
from .errors import Refusal, one_line
from .journal import (ACCEPT_PREFIX, JOURNAL_VERSION, RECORD_PREFIX, append_windows, fs_now, load_windows,
                      owner_alive, read, under, windows_lock)
from .planstore import open_plans_dir, sha256_hex, write_atomic


def way(path: str) -> list:
    """(place, st) of every symlink met while resolving ``path`` and of the file it
    reaches: each could have been planted. ``place`` is the entry's real location (its
    folder resolved, its own name kept)."""
    links, final = links_on_the_way(path)
    return [(place, st) for place, st, _folder in links] + ([final] if final is not None else [])


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
        rec, st = read(dir_fd, name)
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
    entry, _st = read(dir_fd, _accept_name(os.path.realpath(path)))
    if entry is None or not isinstance(entry.get("way"), list):
        return False
    return [list(x[:3]) for x in entry["way"]] == [x[:3] for x in _ids(steps)]


def _accept_name(real: str) -> str:
    return ACCEPT_PREFIX + sha256_hex(real.encode("utf-8", "surrogateescape"))


def _ids(steps) -> list:
    return [[p, st.st_dev, st.st_ino, st.st_ctime_ns] for p, st in steps]


def accepted(dir_fd: int, path: str, sha: str, steps) -> bool:
    entry, _st = read(dir_fd, _accept_name(os.path.realpath(path)))
    return entry is not None and entry.get("sha") == sha and entry.get("way") == _ids(steps)


def refusal(path: str, place: str, w: Window) -> Refusal:
    import time

    shown = one_line(path, 300)
    if not os.path.isfile(path):
        # A folder named as the policy, say: accepting it cannot work (compile --check
        # refuses what is no file), so the fix is to name the file.
        what = "a folder" if os.path.isdir(path) else "not a regular file"
        return Refusal(f"the policy {shown} is {what}",
                       f"name the policy file itself, e.g. {one_line(os.path.join(path, 'sandbox.policy.yaml'), 300)}"
                       if os.path.isdir(path) else "name a policy file")
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
        write_atomic(dir_fd, _accept_name(real), {"v": JOURNAL_VERSION, "path": real, "sha": sha, "way": _ids(steps)})
        return True
    except OSError:
        return False


def accept(sources) -> tuple:
    """``sbxc compile --check`` passed on ``sources``: record each tainted file (and the
    links on the way) as accepted, and close the windows of runs whose sbxc is gone and
    that could write one of them (the person has now looked; what such a run could write
    before now stays tainted). Returns (paths accepted, pids of runs closed)."""
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
            with windows_lock(dir_fd):
                append_windows(dir_fd, [[w.start, now, list(w.roots), []] for w in stale])
            for name in _record_names(dir_fd):
                rec, _st = read(dir_fd, name)
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
