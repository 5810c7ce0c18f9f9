"""The plan's warnings, printed by ``exec`` once per policy change (SPEC §5).

The compiler puts the lines in the plan (``runtime.warnings``, see
``sbxc.compiler.runwarnings``); the one about the current folder under a ``tmpfs`` rule is
made here, since the folder is the run's. Once shown, a marker in the plans folder (out
of every sandbox's reach) remembers it: ``w-`` + sha256 of the plan's sources (path and
content digest of every policy file), its backend and the lines themselves. A changed
policy file, another backend, or a different warning shows again; the same ones do not.
Where the plans folder cannot be used, the lines are printed on every run rather than
never.

Hot path: nothing is opened when there is nothing to say.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from .errors import one_line

_DISCARDED = ("the current folder {cwd} lies under `{rule}` ({where}): what the command writes there is "
              "discarded when it ends; run it from a folder with a `write` rule to keep its output")
_CWD_TMPFS = {
    "bwrap": _DISCARDED,  # both mount a tmpfs there
    "oci": _DISCARDED,
    "landlock": "the current folder {cwd} lies under `{rule}` ({where}): on Landlock the command cannot use "
                "it (it gets a fresh per-run folder in $TMPDIR instead); run it from a folder with a `write` "
                "rule",
}


def cwd_warning(checks, cwd: str, backend: str) -> str:
    """The warning for a current folder whose deepest rule is a ``tmpfs``, or ""."""
    from .staleness import deepest_check

    best = deepest_check(checks or (), cwd)
    if best is None or best[2] != "tmpfs" or backend not in _CWD_TMPFS:
        return ""
    written = best[4] if len(best) > 4 and isinstance(best[4], str) else best[0]
    where = best[3] if len(best) > 3 and best[3] else "implied by sbxc"
    return _CWD_TMPFS[backend].format(cwd=cwd, rule=f"tmpfs {written}", where=where)


def show_warnings(pf: dict, cwd: str) -> None:
    """Print the plan's warnings (and the current folder's) unless already shown for this
    policy state; one ``sbxc: warning:`` line each."""
    rt = pf.get("runtime") or {}
    lines = [w for w in rt.get("warnings") or () if isinstance(w, str)]
    backend = str(pf.get("backend"))
    extra = cwd_warning(rt.get("checks"), cwd, backend)
    if extra:
        lines.append(extra)
    if not lines:
        return
    from .planstore import open_plans_dir, sha256_hex

    key = "\x00".join([backend] + ["\x01".join(map(str, s)) for s in pf.get("sources") or ()] + ["\x02"] + lines)
    name = "w-" + sha256_hex(key.encode("utf-8", "surrogateescape"))
    dir_fd = open_plans_dir()
    try:
        if dir_fd >= 0:
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                return  # shown before for this policy state
            except FileNotFoundError:
                pass
            except OSError:
                pass
        sys.stderr.write("".join(f"sbxc: warning: {one_line(w, 1000)}\n" for w in lines))
        sys.stderr.flush()
        if dir_fd >= 0:
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dir_fd)
                os.close(fd)
            except OSError:
                pass  # shown again next time: better than never
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
