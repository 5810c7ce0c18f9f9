"""Resolving a path one component at a time, noting every symlink met: each could have
been planted, so the policy-file trust checks (compiler) and the run journal (runtime)
both judge them. A leaf: both layers use it."""
import os
import posixpath
import stat

MAX_STEPS = 256
"""Components and link targets followed at most; a loop stops there (opening reports ELOOP)."""


def links_on_the_way(path: str):
    """``(links, final)``: ``links`` is ``[(place, lstat, folder)]`` for each symlink met
    while resolving ``path`` (``place`` its real location: its folder resolved, its own
    name kept; ``folder`` that resolved folder); ``final`` is ``(place, lstat)`` of the
    entry ``path`` reaches, or None when the walk stopped (a missing entry, an unreadable
    link, a loop)."""
    parts = [p for p in path.split("/") if p and p != "."]
    resolved = "/"
    links = []
    for _ in range(MAX_STEPS):
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
            return links, None
        if stat.S_ISLNK(st.st_mode):
            links.append((cand, st, resolved))
            try:
                target = os.readlink(cand)
            except OSError:
                return links, None
            if target.startswith("/"):
                resolved = "/"
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        resolved = cand
        if not parts:
            return links, (cand, st)
    return links, None
