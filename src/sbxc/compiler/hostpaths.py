"""The compiler's one path resolver: lstat and readlink on the host (or a fake in tests),
and what follows from them (real paths, kinds, untrusted symlinks on the way)."""
from __future__ import annotations

import os
import posixpath
import stat as statmod
from dataclasses import dataclass
from typing import Optional

from .plan import KIND_DIR, KIND_FILE, KIND_MISSING, KIND_OTHER, KIND_SOCKET, is_within

MAX_SYMLINKS = 40  # the kernel's own limit on links followed in one lookup


@dataclass(frozen=True, slots=True)
class PathStat:
    kind: str
    """``dir``, ``file``, ``socket``, ``other`` or ``symlink`` (never followed)."""
    uid: int = 0
    mode: int = 0


class HostPaths:
    """Filesystem facts the compiler needs: lstat and readlink. Tests pass a fake."""

    def lstat(self, path: str) -> Optional[PathStat]:
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        m = st.st_mode
        if statmod.S_ISLNK(m):
            kind = "symlink"
        elif statmod.S_ISDIR(m):
            kind = KIND_DIR
        elif statmod.S_ISREG(m):
            kind = KIND_FILE
        elif statmod.S_ISSOCK(m):
            kind = KIND_SOCKET
        else:
            kind = KIND_OTHER
        return PathStat(kind, st.st_uid, m)

    def readlink(self, path: str) -> str:
        try:
            return os.readlink(path)
        except (OSError, ValueError):
            return ""

    # ---- derived: the same logic for the real resolver and a fake one

    def realpath(self, path: str) -> str:
        """Like os.path.realpath, through ``lstat``/``readlink`` only. Missing tails stay as written."""
        return self._resolve(path)[0]

    def links_on_way(self, path: str) -> list[tuple[str, str]]:
        """Every symlink met while resolving ``path`` as ``realpath`` does, in order: (where
        it was met, its target as written). Inside a sandbox built from mounts (bwrap,
        OCI) a rule's real path is mounted; these are the links that make the rule's own
        spelling (``/bin`` on a merged-/usr system) lead there too."""
        return self._resolve(path)[1]

    def _resolve(self, path: str) -> tuple[str, list[tuple[str, str]]]:
        parts = [p for p in path.split("/") if p and p != "."]
        resolved = "/"
        met: list[tuple[str, str]] = []
        while parts:
            part = parts.pop(0)
            if part == "..":
                resolved = posixpath.dirname(resolved) or "/"
                continue
            cand = posixpath.join(resolved, part)
            st = self.lstat(cand)
            if st is not None and st.kind == "symlink":
                if len(met) >= MAX_SYMLINKS:
                    return posixpath.join(cand, *parts), met
                target = self.readlink(cand)
                met.append((cand, target))
                if target.startswith("/"):
                    resolved = "/"
                parts = [p for p in target.split("/") if p and p != "."] + parts
                continue
            resolved = cand
        return resolved, met

    def kind(self, real: str) -> str:
        st = self.lstat(real)
        return KIND_MISSING if st is None else st.kind

    def symlink_on_way(self, path: str, user_dirs=()) -> Optional[tuple[str, str]]:
        """The first component of ``path`` (lexically normal) that is an untrusted symlink: (link, target).

        ``user_dirs`` (project, home): links inside them are never trusted, whoever owns them.
        """
        cur = ""
        for part in [p for p in path.split("/") if p]:
            cur = cur + "/" + part
            st = self.lstat(cur)
            if st is None:
                return None
            if st.kind == "symlink" and not self._trusted_link(cur, st, user_dirs):
                return cur, self.realpath(cur)
        return None

    def _trusted_link(self, link: str, st: PathStat, user_dirs) -> bool:
        # A link only root can change (owned by root, in a folder owned by root that no one
        # else can write) is part of the system layout, e.g. macOS /tmp -> private/tmp or
        # Debian's /var/run -> /run: it cannot be pointed at the host by the command. Inside
        # the project or the home folder a link is content (a cloned repository can carry
        # one), so it is never trusted there, even when the caller is root.
        if st.uid != 0 or any(is_within(link, d) for d in user_dirs if d):
            return False
        parent = self.lstat(posixpath.dirname(link) or "/")
        return parent is not None and parent.kind == KIND_DIR and parent.uid == 0 and not (parent.mode & 0o022)
