"""Refuse a run whose command could rewrite the code sbxc itself runs from.

sbxc runs unsandboxed. If its package, its interpreter or a folder on ``sys.path`` (the
standard library, the site-packages sbxc and its dependencies load from), or what the
dynamic loader reads before any of that (the shared objects sbxc maps, ``LD_LIBRARY_PATH``,
``LD_PRELOAD``, /etc/ld.so.*), lies where the plan lets the command write, one command can
plant code there and the next ``sbxc exec`` runs it outside any sandbox. Only the filesystem can say where sbxc came from, so this is
checked on every run: a few ``realpath`` calls, no imports beyond ``os`` and ``sys``.

Not covered, because no check can be: a ``python -m sbxc`` started in a folder the sandbox
writes puts that folder first on ``sys.path``, so a planted ``sbxc/`` there runs instead
of this code (SECURITY.md). That entry is left out here for the same reason: whatever
planted code it could hold has already run, and it is the folder commands work in.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from .errors import Refusal, one_line
from .safeopen import real_paths

FIX = ("install sbxc outside anything the policy makes writable (e.g. with scripts/setup into a "
       "folder of your own), or make its folder read-only in the policy")


LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
"""What the dynamic loader reads before the interpreter runs, whether or not it exists (a
writable /etc could make ld.so.preload)."""


def loader_paths() -> tuple[list, list]:
    """What the dynamic loader takes code from for sbxc's next start: (paths to resolve,
    real paths). To resolve: the loader's files in /etc, the folders on ``LD_LIBRARY_PATH``
    (an empty entry is the current folder) and the files of ``LD_PRELOAD`` of sbxc's own
    environment. Real already: the shared objects this process has mapped (libc, the
    interpreter's libraries, libffi and libseccomp once loaded), as the kernel names them
    in /proc/self/maps, with no link in them."""
    out = list(LOADER_FILES)
    env = os.environ
    for entry in (env.get("LD_LIBRARY_PATH") or "").split(":") if "LD_LIBRARY_PATH" in env else ():
        out.append(entry if entry else os.getcwd())
    out += [p for p in (env.get("LD_PRELOAD") or "").replace(":", " ").split() if p.startswith("/")]
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
    except OSError:
        maps = b""
    mapped = []
    for line in maps.split(b"\n"):
        at = line.find(b" /")
        if at > 0 and b".so" in line and not line.endswith(b" (deleted)"):
            path = line[at + 1:].decode("utf-8", "surrogateescape")
            if path not in mapped:
                mapped.append(path)
    return out, mapped


def own_paths(also=()) -> list:
    """Real paths of what sbxc's process loads code from: its package folder, the
    interpreter and its prefix, and each existing ``sys.path`` entry, what the dynamic
    loader takes (``loader_paths``); then the real path of each of ``also``. Resolved
    together (``safeopen.real_paths``): they share most of their folders (``/usr``, the
    venv), and resolving each on its own would lstat those again for every path."""
    entries = list(sys.path)
    # The entry Python adds for ``-m`` / a script when not isolated (see the docstring).
    if entries and not sys.flags.safe_path and not sys.flags.isolated:
        entries = entries[1:]
    # sbxc's package folder: this file is sbxc/runtime/owncode.py.
    loader, mapped = loader_paths()
    names = [__file__, sys.executable, sys.prefix] + [e for e in entries if e and os.path.exists(e)] + loader
    resolved = real_paths(names + list(also))
    paths = resolved[:len(names)] + mapped + resolved[len(names):]
    paths[0] = os.path.dirname(os.path.dirname(paths[0]))
    return paths


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _access_at(rules, path: str) -> str:
    """The access the deepest rule holding ``path`` gives (as launch.access_at; kept
    here so this module depends on nothing else of the runtime). ``rules``: (path, path
    with one trailing "/", depth, access) of each check."""
    best, depth = "none", -1
    for rpath, prefix, d, access in rules:
        if d > depth and (path == rpath or path.startswith(prefix)):
            best, depth = access, d
    return best


def check(checks, cache_dir) -> None:
    """Raise ``Refusal`` when a path the plan's command may write (its ``write`` rules,
    the deepest rule deciding; the project's cache folder) holds, or lies inside, one of
    ``own_paths()``."""
    rules = [(rpath, rpath.rstrip("/") + "/", 0 if rpath == "/" else rpath.count("/"), access)
             for rpath, _kind, access, *_rule in checks]
    writes = [r[0] for r in rules if r[3] == "write"]
    owns = own_paths((cache_dir,) if cache_dir else ())
    cache = owns.pop() if cache_dir else ""
    for own in owns:
        where = ""
        if _access_at(rules, own) == "write":
            where = "a folder this plan lets commands write"
        elif cache and (_inside(own, cache) or _inside(cache, own)):
            where = f"the cache folder {one_line(cache, 200)}"
        else:
            for w in writes:
                if _inside(w, own):
                    where = f"{one_line(w, 200)}, which this plan lets commands write"
                    break
        if where:
            raise Refusal(f"sbxc runs its own code from {one_line(own, 200)}, in {where}, so a sandboxed "
                          "command could plant code that the next sbxc run executes unsandboxed", FIX)
