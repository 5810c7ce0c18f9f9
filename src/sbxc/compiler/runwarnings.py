"""Warnings ``sbxc exec`` prints (once per policy change, SPEC §5): what changes what a
run does, that ``compile --check`` shows among its diagnostics and report and a person
running commands would otherwise never see. The plan file carries them as lines
(``runtime.warnings``); the runtime prints them and remembers that it did.

Computed here, from the IR and the compiler's diagnostics. The one that depends on where
the command runs (the current folder under a ``tmpfs`` rule) is the runtime's: the
folder is only known then (``sbxc.runtime.runwarn``).
"""
from __future__ import annotations

import posixpath

from .plan import MASK, READ, TMPFS, WRITE, KIND_DIR, Plan, is_within


def _where(span) -> str:
    return str(span) if span is not None and span.line else "(implied)"


def _rule(r) -> str:
    return f"{r.access} {r.written or r.path}"


def landlock_creation_losses(plan: Plan) -> list:
    """(write rule, folders that lose creating/removing/renaming files, stricter rules) for
    each `write` folder with a stricter rule beneath. Landlock rights only add up along a
    path, so such a folder, and each folder on the way down to the stricter rule, gets
    only what every stricter rule beneath it tolerates, which never includes making or
    removing a regular file (backends/landlock.py, ``_tolerated``)."""
    out = []
    rules = sorted(plan.fs, key=lambda r: r.path)
    for w in rules:
        if w.access != WRITE or w.kind != KIND_DIR:
            continue
        below = [d for d in rules if d.path != w.path and is_within(d.path, w.path)
                 and d.access in (MASK, TMPFS, READ)]
        if not below:
            continue
        folders = set()
        for d in below:
            p = posixpath.dirname(d.path)
            while is_within(p, w.path):
                folders.add(p)
                if p == w.path:
                    break
                p = posixpath.dirname(p)
        out.append((w, sorted(folders), below))
    return out


def run_warnings(plan: Plan, diagnostics, backend: str, host) -> list:
    """The lines for ``runtime.warnings`` (without the ``sbxc: warning:`` prefix)."""
    out = []
    for d in diagnostics:
        if d.code == "SBX044":  # env.pass globs that let secrets through
            out.append(f"{_where(d.span)}: {d.message}; {d.hint}")
    if backend == "landlock":
        for w, folders, below in landlock_creation_losses(plan):
            stricter = ", ".join(f"`{_rule(d)}`" for d in below[:3]) + (" ..." if len(below) > 3 else "")
            out.append(
                f"{_where(w.span)}: landlock: `{_rule(w)}` cannot let the command create, remove or rename files "
                f"directly in {', '.join(folders)}, because of {stricter} beneath it (Landlock rights only add up "
                "along a path): creating a file there fails, and so does git commit where that is the project "
                "or its .git (.git/index.lock); use --backend bwrap, or drop the stricter rule")
        if getattr(host, "uid", 1) == 0:
            out.append(
                "landlock as root: chmod, chown, extended attributes and inode flags are refused everywhere (no "
                "Landlock ABI "
                "covers metadata, and root owns the host's files), so `chmod +x`, `python -m venv` and installers "
                "that set file modes fail; use --backend bwrap for root")
    return out
