"""A session's workspace in a backend's plan: the runners call one function each.

bwrap: every bind whose source is the project or lies inside it takes its source from the
workspace instead, at the same destination. The command sees the workspace at the
project's own path, with the policy's rules for the project and what lies inside it
(masks, read-only parts) applied to the workspace; the host project is not mounted at
all. When the project is reached through a rule on a folder above it, the workspace is
bound over it (writable when that rule is ``write``).

OCI (runc): the same as bwrap, on the config's mount list: every bind whose source is the
project or lies inside it takes its source from the workspace, at the same destination,
and a project reached only through a rule above it gets the workspace bound over it. The
runner's checks of the command's file (126/127 before the start) look at the workspace's
copy for paths in the project (``host_path``).

Landlock: no mount namespace, so the workspace stays where it is (in the sessions folder)
and the command starts in it. Every rule on the project or inside it is granted to the
workspace's same path, and kept for the host's only with the rights to read: absolute
paths into the project reach the host's copy, read-only. A writable rule on a folder
above the project would leave the host's copy writable; that run is refused.
"""
from __future__ import annotations

from ..landlock_abi import FS_EXECUTE, FS_READ_DIR, FS_READ_FILE
from .errors import Refusal

_BINDS = ("--bind", "--ro-bind", "--bind-try", "--ro-bind-try")
_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR


def _inside(path: str, top: str, strict: bool = False) -> bool:
    if path == top:
        return not strict
    return path.startswith(top.rstrip("/") + "/")


def _moved(path: str, project: str, ws: str) -> str:
    return ws + path[len(project):]


def _no_link_below(ws: str, path: str) -> None:
    """Refuse a bind source in the workspace reached through a symlink. bwrap resolves a
    source on the host, following links; one that a command of the session left in the
    workspace would choose which host folder is bound, writable where the rule is
    ``write`` (the rule names a path in the project, the workspace holds the link). The
    compiler checks the host project's paths, not the workspace's."""
    import os
    import stat

    at = ws
    for name in path[len(ws):].strip("/").split("/") if path != ws else ():
        at = at + "/" + name
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            return  # bwrap's own check: a missing source fails (or is skipped, for -try)
        except OSError as e:
            raise Refusal(f"cannot check {at} in the session's workspace ({e.strerror})",
                          "check the workspace's permissions") from None
        if stat.S_ISLNK(st.st_mode):
            raise Refusal(f"{at} in the session's workspace is a symlink, and the policy binds that path",
                          "remove the link from the workspace (a command of the session made it), or "
                          "discard the session")


def bwrap_argv(opts: list, project: str, ws: str, access: str) -> list:
    """bwrap options with the workspace in the project's place (see the module text).
    ``access``: what the deepest rule containing the project grants it."""
    out = []
    direct = False
    first_inside = -1
    i = 0
    n = len(opts)
    while i < n:
        a = opts[i]
        if a == "--":
            out.extend(opts[i:])
            break
        if a.startswith("--") and first_inside < 0 and any(
                isinstance(x, str) and not x.startswith("--") and _inside(x, project, strict=True)
                for x in opts[i + 1:i + 3]):
            first_inside = len(out)
        if a in _BINDS and i + 2 < n:
            src, dest = opts[i + 1], opts[i + 2]
            if _inside(src, project):
                direct = direct or (src == project and dest == project)
                src = _moved(src, project, ws)
                _no_link_below(ws, src)
            out += [a, src, dest]
            i += 3
            continue
        out.append(a)
        i += 1
    if not direct:
        if access not in ("read", "write"):
            raise Refusal(f"the policy does not show the project {project} (policy: {access}), so a session's "
                          "workspace has no place in the sandbox", "give the project a rule, e.g. write {project}")
        at = first_inside if first_inside >= 0 else (out.index("--remount-ro") if "--remount-ro" in out else len(out))
        out[at:at] = ["--bind" if access == "write" else "--ro-bind", ws, project]
    return out


def oci_mounts(mounts: list, project: str, ws: str, access: str) -> list:
    """An OCI config's ``mounts`` with the workspace in the project's place (see the module
    text), in their order; ``access`` as for ``bwrap_argv``."""
    out = []
    direct = False
    first_inside = -1
    for m in mounts:
        dest = m.get("destination", "")
        if first_inside < 0 and isinstance(dest, str) and _inside(dest, project, strict=True):
            first_inside = len(out)
        src = m.get("source", "")
        if m.get("type") == "bind" and isinstance(src, str) and src.startswith("/") and _inside(src, project):
            direct = direct or (src == project and dest == project)
            m = dict(m, source=_moved(src, project, ws))
            _no_link_below(ws, m["source"])
        out.append(m)
    if not direct:
        if access not in ("read", "write"):
            raise Refusal(f"the policy does not show the project {project} (policy: {access}), so a session's "
                          "workspace has no place in the sandbox", "give the project a rule, e.g. write {project}")
        # Before the first mount inside the project, so that its masks and read-only parts
        # land on the workspace; the options are those the OCI lowering gives a bind.
        out.insert(first_inside if first_inside >= 0 else len(out),
                   {"destination": project, "type": "bind", "source": ws,
                    "options": ["rbind", "nosuid", "nodev", "rnosuid", "rnodev", "rw" if access == "write" else "rro"]})
    return out


def host_path(path: str, project: str, ws: str) -> str:
    """Where the host holds what a session's command finds at ``path`` (a path as the
    sandbox shows it, links not followed): the workspace's copy for a path in the project."""
    return _moved(path, project, ws) if _inside(path, project) else path


def lookup_env(env: dict, cwd: str, ws, mounted: bool) -> dict:
    """``env`` for looking up on the host (``probe.find_command``) what a session's command
    (workspace ``ws``, a ``spec.Workspace``; started in ``cwd``, a path as the sandbox shows
    it) finds on its own ``PATH``: a relative entry is from that folder, in the workspace on
    every backend; an absolute one in the project is the workspace's where the runner
    mounts it there (``mounted``), the host's read-only copy on Landlock."""
    if not env.get("PATH"):
        return env
    out = []
    for d in env["PATH"].split(":"):
        if not d.startswith("/"):
            out.append(host_path(cwd.rstrip("/") + "/" + (d or "."), ws.project, ws.path))
        else:
            out.append(host_path(d, ws.project, ws.path) if mounted else d)
    return dict(env, PATH=":".join(out))


def landlock_rules(rules: list, project: str, ws: str) -> list:
    """Landlock (path, rights, kind) rules with the workspace granted as the project is,
    and the host's project read-only (see the module text)."""
    out = []
    extra = []
    direct = False
    above = None
    for path, rights, kind in rules:
        if _inside(path, project):
            out.append((path, rights & _READ, kind))
            extra.append((_moved(path, project, ws), rights, kind))
            direct = direct or path == project
            continue
        if kind == "dir" and (path == "/" or _inside(project, path, strict=True)):
            if rights & ~_READ:
                raise Refusal(f"the policy makes {path} writable, which holds the project: on Landlock the host's "
                              "copy would stay writable in a session",
                              "make the folder above read-only and give the project its own rule (write {project}), "
                              "or use --backend bwrap")
            if above is None or len(path) > len(above[0]):
                above = (path, rights)
        out.append((path, rights, kind))
    if not direct and above is not None:
        extra.append((ws, above[1], "dir"))
    return out + extra


def start_dir(cwd: str, project: str, ws: str) -> str:
    """Where a session's command starts on Landlock: the caller's folder inside the
    workspace, or the workspace's top."""
    return _moved(cwd, project, ws) if _inside(cwd, project) else ws
