"""Does this plan still hold on this host? The one answer: ``why_stale``.

A plan was compiled against facts (platform, uid, home, which bwrap, the Landlock ABI) and
against a filesystem (every rule's path resolved to a real path of some kind). The plan
cache asks before it serves an entry (a stale one is compiled again); the core asks before
every run, for a ``--plan`` file (a stale one is refused, 125) and for a cached plan (the
host facts only: the cache has just checked the paths); the runners take the facts read
here (``HostNow``, as ``ctx.host``) instead of probing again.

Hot path: ``os`` only; the trusted bwrap lookup and the Landlock ABI are read once per
run and only for the backend that needs them.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from .errors import Refusal

_RECOMPILE_HERE = "recompile the plan on this host (sbxc compile -o PLAN), or use --policy"


class HostNow:
    """Facts of this host as they are now, each read at most once per run."""

    __slots__ = ("environ", "_bwrap", "_abi")

    def __init__(self, environ):
        self.environ = environ
        self._bwrap = None
        self._abi = None

    @property
    def bwrap(self) -> tuple[str, str]:
        """(real path, note) of the bwrap sbxc may start (``probe.host_program``)."""
        if self._bwrap is None:
            from .probe import host_program

            self._bwrap = host_program("bwrap", self.environ)
        return self._bwrap

    @property
    def landlock_abi(self) -> int:
        if self._abi is None:
            from .probe import landlock_abi

            self._abi = landlock_abi()
        return self._abi


def current_home(environ) -> str:
    home = environ.get("HOME")
    if home:
        return home
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def host_mismatch(facts: dict, environ) -> str:
    """Why this host is not the one the plan's ``host`` facts describe ('' when it is)."""
    u = os.uname()
    platform = "darwin" if u.sysname == "Darwin" else "linux"
    if facts.get("platform", platform) != platform:
        return f"the plan is for {facts.get('platform')}, this host runs {platform}"
    if facts.get("arch", u.machine) != u.machine:
        return f"the plan is for {facts.get('arch')}, this host is {u.machine}"
    if facts.get("uid", -1) != os.getuid():
        return f"the plan was compiled for uid {facts.get('uid')}, this is uid {os.getuid()}"
    home = current_home(environ)
    if facts.get("home", home) != home:
        return f"the plan was compiled for home {facts.get('home')}, this home is {home}"
    return ""


def why_stale(pf: dict, now: HostNow, *, entry=None, paths: bool = True):
    """Why the plan file ``pf`` no longer holds on this host: a ``Refusal`` (raise it, or
    count it as a plan-cache miss), or None when it holds.

    ``paths``: re-check the rules' paths (``recheck_paths``); skipped only right after the
    plan cache did. ``entry``: the plan cache's entry for ``pf``; a cached plan must also
    match its policy files and environment as they are now, and the host exactly as it
    was compiled for (an optional path that appeared, a folder listing or a Landlock ABI
    that changed: compiling again gives a different plan, though running this one would
    only grant less)."""
    host = pf.get("host") or {}
    rt = pf.get("runtime") or {}
    backend = pf.get("backend")
    if entry is not None:
        why = _entry_changed(entry, now.environ)
        if why:
            return Refusal(why, "compile it again")
    why = host_mismatch(host, now.environ)
    if why:
        return Refusal(why, _RECOMPILE_HERE)
    if backend == "bwrap":
        planned = (pf.get("lowered") or {}).get("bwrap") or host.get("bwrap", "")
        found = now.bwrap[0]
        # No bwrap at all is the runner's to word (what to install); another one is staleness.
        if planned and found and found != planned:
            return Refusal(f"the plan was made for bwrap at {planned}, this host has {found}", _RECOMPILE_HERE)
    elif backend == "landlock":
        abi = now.landlock_abi
        if entry is not None and host.get("landlock_abi") != abi:
            return Refusal(f"the plan was compiled for Landlock ABI {host.get('landlock_abi')}, this kernel has {abi}",
                           "compile it again")
        # A cached plan for this very ABI runs where its compile said it would; whether it
        # can (min_abi, best_effort) is the core's question before the run, not a miss.
        refusal = landlock_abi_refusal(pf.get("lowered") or {}, abi) if entry is None else None
        if refusal is not None:
            return refusal
    if paths:
        try:
            recheck_paths(rt.get("checks", ()), rt.get("project", ""))
        except Refusal as r:
            return r
    if entry is not None:
        for path in rt.get("skipped", ()):
            if os.path.lexists(path):
                return Refusal(f"the optional path {path} appeared since the plan was compiled", "compile it again")
        if backend == "landlock":
            from ..landlock_abi import listing_digest  # not hostfacts: its dataclasses cost ~15 ms
            from .probe import dir_listings

            # Landlock grants the entries of folders above a stricter rule one by one, as
            # they were listed at compile time; an entry made since would get no rights.
            for d, digest in (pf.get("lowered") or {}).get("listed", ()):
                if listing_digest(dir_listings([d])[0][1]) != digest:
                    return Refusal(f"the entries of {d} changed since the plan was compiled", "compile it again")
    return None


def _entry_changed(entry: dict, environ) -> str:
    from .planstore import source_state

    for name, value in entry.get("env", ()):
        if environ.get(name) != value:
            return f"${name} changed since the plan was compiled"
    for path, digest in entry.get("sources", ()):
        if source_state(path) != digest:
            return f"the policy {path} changed since the plan was compiled"
    return ""


def landlock_abi_refusal(low: dict, abi: int):
    """A Refusal when the Landlock plan ``low`` cannot run on a kernel with ``abi``: no
    Landlock, below ``landlock.min_abi``, or below what the plan uses without
    ``landlock.best_effort`` (which runs with what the kernel has, and says so)."""
    from ..landlock_abi import fs_names, net_names, rights_for_abi, scope_names

    min_abi = int(low.get("min_abi", 1))
    needed = int(low.get("abi_needed", min_abi))
    if abi <= 0:
        return Refusal("Landlock is not available on this kernel (ABI 0: missing or disabled)",
                       "boot with lsm=...,landlock, or use --backend bwrap")
    if abi < min_abi:
        return Refusal(f"this kernel's Landlock ABI is {abi}, the policy asks for at least {min_abi} (landlock.min_abi)",
                       "run on a newer kernel, or lower landlock.min_abi")
    if abi < needed and not low.get("best_effort"):
        fs, net, scoped, _flags = rights_for_abi(abi)
        lost = (fs_names(int(low["handled_fs"]) & ~fs) + net_names(int(low["handled_net"]) & ~net)
                + scope_names(int(low["scoped"]) & ~scoped))
        if lost:
            return Refusal(f"this kernel's Landlock ABI is {abi}, the plan needs {needed} (for {', '.join(lost)})",
                           "run on a newer kernel, or set landlock.best_effort: true to run without them")
    return None


def _kind_of(st_mode: int) -> str:
    import stat

    if stat.S_ISDIR(st_mode):
        return "dir"
    if stat.S_ISREG(st_mode):
        return "file"
    if stat.S_ISSOCK(st_mode):
        return "socket"
    if stat.S_ISLNK(st_mode):
        return "symlink"
    return "other"


def deepest_check(checks, path: str):
    """The plan's check entry (``[path, kind, access, ...]``) of the deepest rule
    containing ``path``, or None. Entries that are not one are passed over."""
    best, depth = None, -1
    for check in checks:
        if len(check) < 3 or not isinstance(check[0], str):
            continue
        rpath = check[0]
        if path == rpath or path.startswith(rpath.rstrip("/") + "/"):
            d = 0 if rpath == "/" else rpath.count("/")
            if d > depth:
                best, depth = check, d
    return best


def rule_of(check, cwd: str = "") -> str:
    """`` (rule FILE:LINE:COL "ACCESS PATH")`` for a plan's check entry
    ``[path, kind, access, span, written]``; '' for an entry of an older plan file, which
    carries no span. A file under ``cwd`` is shown relative to it, as diagnostics are."""
    if len(check) < 5 or not check[3]:
        return ""
    from .errors import one_line

    span, written = str(check[3]), str(check[4] or check[0])
    if cwd and span.startswith(cwd.rstrip("/") + "/"):
        span = span[len(cwd.rstrip("/")) + 1:]
    return f' (rule {one_line(span, 300)} "{one_line(str(check[2]) + " " + written, 300)}")'


def recheck_paths(checks, cwd: str = "") -> None:
    """Rules were resolved to real paths at compile time (SPEC §2). A path that became a
    symlink, or whose folders on the way did, could point the sandbox at something else;
    one that changed kind or vanished would make the backend create mount points on the
    host. Either way: refuse, naming the rule. (bwrap re-resolves when it mounts; the window
    between this check and that mount is the caller's own processes racing sbxc, see
    docs/runtime.md.)

    The folders on the way are checked once for all rules: each folder met is lstat'ed at
    most once per call, where resolving every rule's path on its own (``realpath``) would
    lstat ``/``, ``/home`` ... again for every rule beneath them."""
    seen: dict = {}
    for check in checks:
        path, kind, access = check[0], check[1], check[2]
        if kind == "missing":
            if os.path.lexists(path):
                what = "masked by the policy" if access == "mask" else f"under a {access} rule"
                raise Refusal(f"{path} is {what} and appeared after the plan was compiled{rule_of(check, cwd)}",
                              "compile the plan again (sbxc compile), then run")
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise Refusal(f"{path} no longer exists (the plan expected a {kind}){rule_of(check, cwd)}",
                          "recompile the plan, or mark the rule optional with `?`") from None
        except OSError as e:
            raise Refusal(f"{path} cannot be checked ({e.strerror}){rule_of(check, cwd)}",
                          "check the path's permissions") from None
        now = _kind_of(st.st_mode)
        if now == "symlink":
            raise Refusal(f"{path} became a symlink since the plan was compiled{rule_of(check, cwd)}",
                          "inspect it; recompile only if the link is intended")
        if now != kind:
            raise Refusal(f"{path} is now a {now}, the plan expected a {kind}{rule_of(check, cwd)}",
                          "recompile the plan")
        if not _folders_are_real(path, seen):
            raise Refusal(f"a folder on the way to {path} became a symlink since the plan was compiled"
                          f"{rule_of(check, cwd)}", "inspect it; recompile only if the link is intended")


def _folders_are_real(path: str, seen: dict) -> bool:
    """Whether every folder above the absolute, normalized ``path`` is a folder and no
    symlink (what ``realpath(path) == path`` asks of them). ``seen`` remembers the answer
    per folder for the rest of one check."""
    if not path.startswith("/") or "/./" in path or "/../" in path or path.endswith(("/.", "/..")) or "//" in path:
        return os.path.realpath(path) == path
    end = path.rfind("/")
    folder = path[:end]
    todo = []
    while folder and folder not in seen:
        todo.append(folder)
        folder = folder[:folder.rfind("/")]
    ok = seen.get(folder, True) if folder else True
    for f in reversed(todo):  # parents first: below a bad folder every answer is bad
        if ok:
            try:
                ok = _kind_of(os.lstat(f).st_mode) == "dir"
            except OSError:
                ok = False
        seen[f] = ok
    return ok
