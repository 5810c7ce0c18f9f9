"""Fakes for compiler tests: a fixed host, a fixed environment, a filesystem outside the
case's own tree that looks the same on every machine, and placeholders for the parts of
real paths that differ between runs (the temporary root and the project id hash)."""
from __future__ import annotations

import os
import re
from typing import Optional

from sbxc.compiler.hostpaths import HostPaths, PathStat
from sbxc.hostfacts import HostFacts

# What the world outside the case's tree looks like: the same on every test machine.
SYSTEM = {
    "/": ("dir", 0, 0o755),
    "/usr": ("dir", 0, 0o755),
    "/usr/bin": ("dir", 0, 0o755),
    "/usr/lib": ("dir", 0, 0o755),
    "/etc": ("dir", 0, 0o755),
    "/opt": ("dir", 0, 0o755),
    "/tmp": ("dir", 0, 0o1777),
    "/run": ("dir", 0, 0o755),
    "/run/docker.sock": ("socket", 0, 0o660),
    "/var": ("dir", 0, 0o755),
    "/var/tmp": ("dir", 0, 0o1777),
    "/var/run": ("symlink:/run", 0, 0o777),
}


class FakePaths(HostPaths):
    """Real lstat under ``root`` (the case's tree); ``SYSTEM`` (plus ``extra``) elsewhere."""

    def __init__(self, root: str = "", extra: Optional[dict] = None):
        self.root = root.rstrip("/")
        self.table = dict(SYSTEM)
        self.table.update(extra or {})

    def _inside(self, path: str) -> bool:
        return bool(self.root) and (path == self.root or path.startswith(self.root + "/"))

    def lstat(self, path):
        if self._inside(path):
            return super().lstat(path)
        if self.root and self.root.startswith(path + "/"):
            return PathStat("dir", 0, 0o755)  # the folders above the temporary root
        e = self.table.get(path)
        if e is None:
            return None
        kind = "symlink" if e[0].startswith("symlink:") else e[0]
        return PathStat(kind, e[1], e[2])

    def readlink(self, path):
        if self._inside(path):
            return super().readlink(path)
        e = self.table.get(path)
        return e[0].split(":", 1)[1] if e and e[0].startswith("symlink:") else ""


def fake_host(home: str = "/home/user", **kw) -> HostFacts:
    base = dict(platform="linux", arch="x86_64", uid=1000, gid=1000, home=home, landlock_abi=6,
                bwrap="/usr/bin/bwrap", bwrap_version="0.8.0", userns=True, seccomp=True, private_mounts=True)
    base.update(kw)
    return HostFacts(**base)


def fake_environ(home: str, **kw) -> dict:
    env = {"HOME": home, "PATH": "/usr/bin:/bin", "USER": "user", "LANG": "C.UTF-8"}
    env.update(kw)
    return env


def make_tree(root: str, spec: str = "") -> None:
    """The default case tree (project with a .git, a home with credentials) plus ``spec``:
    lines ``dir PATH``, ``file PATH``, ``link PATH TARGET`` relative to ``root``."""
    for d in ("proj/.git/hooks", "proj/src", "home/user/.ssh", "home/user/.aws", "home/user/.cache", "data"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in ("proj/.git/config", "home/user/.aws/credentials", "home/user/.netrc"):
        open(os.path.join(root, f), "w").close()
    for line in spec.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        p = os.path.join(root, parts[1])
        if parts[0] == "dir":
            os.makedirs(p, exist_ok=True)
        elif parts[0] == "file":
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, "w").close()
        elif parts[0] == "link":
            os.makedirs(os.path.dirname(p), exist_ok=True)
            target = parts[2].replace("{root}", root)
            os.symlink(target, p)


_PID = re.compile(r"([A-Za-z0-9._-]*)-[0-9a-f]{16}\b")


def stable(text: str, root: str) -> str:
    """Replace the temporary root with <root> and project-id hashes with <id>."""
    text = text.replace(os.path.realpath(root), "<root>").replace(root, "<root>")
    return _PID.sub(lambda m: f"{m.group(1)}-<id>", text)


def with_listings(plan, host, root: str):
    """``host`` with the folder listings Landlock lowering asks for, taken from the case's
    tree (inside ``root``) and from ``SYSTEM`` (outside), so nothing depends on what else
    happens to be on this machine (other runs' folders in /var/tmp, say)."""
    import dataclasses

    if "listings" not in getattr(host, "__dataclass_fields__", {}):
        return host
    try:
        from sbxc.backends.landlock import listing_dirs
    except ImportError:
        return host
    from sbxc.runtime.probe import dir_listings

    root = root.rstrip("/")
    out = []
    for d in listing_dirs(plan):
        if d == root or d.startswith(root + "/"):
            out.extend(dir_listings([d]))
            continue
        prefix = d.rstrip("/") + "/"
        entries = {}
        for p, (kind, _uid, _mode) in SYSTEM.items():
            if p.startswith(prefix) and "/" not in p[len(prefix):] and p != d:
                entries[p[len(prefix):]] = "symlink" if kind.startswith("symlink:") else kind
        if root.startswith(prefix):
            entries[root[len(prefix):].split("/")[0]] = "dir"
        out.append((d, tuple(sorted(entries.items()))))
    return dataclasses.replace(host, listings=tuple(sorted(out)))
