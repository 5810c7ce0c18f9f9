"""``sbxc doctor``: what this host can enforce, and the dependency caches it holds.

    sbxc doctor [--root ROOT] [--format text|json]

Exit 0; 1 when no Linux backend works here (neither bwrap with user namespaces nor
Landlock). Every capability line says why. Cache sizes are disk usage as ``du -sk``
counts it (allocated blocks, hard links once), in KiB.
"""
from __future__ import annotations

import os
import shlex
import sys
import time

from .. import cache as cachemod
from ..runtime import cachedir, probe, trees
from ..runtime.errors import one_line
from . import _args, _help

JSON_FORMAT = "sbxc-doctor/1"
"""The ``format`` field of ``doctor --format json`` (docs/output-formats.md)."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def namespace_line(uid: int, err: int) -> tuple[str, bool]:
    """Whether the Landlock runner gives the command PID and IPC namespaces here, why, and
    whether a Landlock run can start at all (root refuses to run without them). ``err``:
    ``landlock_run.namespace_errno()``, 0 when unshare(CLONE_NEWPID|CLONE_NEWIPC) works."""
    head = "  landlock PID and IPC namespaces: "
    if err == 0:
        why = ("root may make them" if uid == 0 else "this process holds CAP_SYS_ADMIN")
        return (head + f"yes ({why}: the command sees no process outside its own by pid, "
                "and no SysV IPC object or POSIX message queue of the host; /proc stays the host's)"), True
    cause = os.strerror(err) if 0 < err < 255 else "unknown error"
    if uid == 0:
        return (head + f"no (unshare failed: {cause}; root without CAP_SYS_ADMIN, e.g. in a container): "
                "Landlock runs as root refuse (exit 125), since the command would reach every root process"), False
    return (head + f"no (unshare failed: {cause}; an unprivileged user may make them only inside a user "
            "namespace, which the Landlock backend runs without): the command shares the host's PID and IPC "
            f"namespaces, so processes and SysV IPC objects of uid {uid} stay reachable where the seccomp "
            "filter allows the call"), True


def host_lines(host, userns_why: str, ns_errno: int | None = None, bwrap_note: str = "") -> tuple[list[str], bool]:
    """Capability lines and whether a Linux backend works. ``ns_errno``: as for
    ``namespace_line`` (None: not probed). ``bwrap_note`` says which bwrap the
    trusted-folder lookup (``probe.host_program``) passed over, and why."""
    lines = [f"host: {host.platform} {host.arch}, uid {host.uid}, home {host.home}"]
    if host.platform == "darwin":
        ok = os.path.exists("/usr/bin/sandbox-exec")
        lines.append(f"  sandbox-exec: {'found' if ok else 'missing'} (/usr/bin/sandbox-exec)")
        return lines, ok
    if host.bwrap:
        lines.append(f"  bwrap: {host.bwrap}, version {host.bwrap_version or 'unknown (bwrap --version said nothing)'}"
                     + (f" ({one_line(bwrap_note, 300)})" if bwrap_note else ""))
    elif bwrap_note:
        lines.append(f"  bwrap: none that sbxc may start: {one_line(bwrap_note, 300)} (install the bubblewrap "
                     "package in a system folder, or set SBXC_BWRAP to its absolute path)")
    else:
        lines.append("  bwrap: not found in the system program folders on PATH (install the bubblewrap package)")
    lines.append(f"  user namespaces: {'yes' if host.userns else 'no'} ({userns_why})")
    if host.bwrap:
        lines.append("  bwrap in a private mount namespace: " + (
            "yes (where a host mount is shared, bwrap starts through unshare --mount: host mounts made during a run "
            "stay out)" if host.private_mounts else
            "no (no unshare in the system program folders, or no namespace for sbxc itself: a mount the host "
            "makes under a shared mount during a run appears inside; the report says partial)"))
    landlock_runs = host.landlock_abi > 0
    if host.landlock_abi > 0:
        extra = []
        if host.landlock_abi >= 4:
            extra.append("TCP connect/bind rules")
        if host.landlock_abi >= 6:
            extra.append("signal and abstract-socket scopes")
        lines.append(f"  landlock: ABI {host.landlock_abi} (filesystem rules"
                     + "".join(", " + e for e in extra) + ")")
        if ns_errno is not None:
            line, landlock_runs = namespace_line(host.uid, ns_errno)
            lines.append(line)
    else:
        lsm = _read("/sys/kernel/security/lsm")
        why = (f"not in the kernel's active security modules ({lsm}); add landlock to the lsm= boot parameter"
               if lsm else "landlock_create_ruleset failed: the kernel lacks Landlock or it is disabled")
        lines.append(f"  landlock: no ({why})")
    if host.seccomp:
        acts = _read("/proc/sys/kernel/seccomp/actions_avail")
        lines.append(f"  seccomp: yes (filter actions: {acts or 'unknown'})")
    else:
        lines.append("  seccomp: no (/proc/sys/kernel/seccomp/actions_avail is missing: kernel built without seccomp filters)")
    works = (bool(host.bwrap) and host.userns) or landlock_runs
    return lines, works


def runc_line(environ) -> str:
    """The OCI backend's runtime: which runc ``exec --backend oci`` would start (the same
    trusted lookup as the runner's) and its version."""
    path, note = probe.host_program("runc", environ)
    if not path:
        why = one_line(note, 300) if note else "not found in the system program folders on PATH"
        return f"  runc: none that sbxc may start: {why} (install the runc package for --backend oci)"
    import subprocess

    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5,
                             env={"PATH": "/usr/bin:/bin"}).stdout
        version = (out.splitlines() or ["unknown"])[0].removeprefix("runc version ").strip()
    except (OSError, subprocess.SubprocessError):
        version = "unknown (runc --version failed)"
    line = f"  runc: {path}, version {version} (--backend oci; as a user it runs rootless)"
    sh, note = probe.host_program("sh", environ)
    if not sh:
        # Each OCI run's watcher (runtime/oci_watch): without it the runner refuses.
        why = one_line(note, 300) if note else "not found in the system program folders on PATH"
        line += f"; no sh that sbxc may start for its watcher: {why}, so OCI runs are refused (install dash)"
    return line


def _kib(nbytes: int) -> int:
    return -(-nbytes // 1024)  # du rounds up to whole KiB


def _human(nbytes: int) -> str:
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{nbytes} B"


def _marker(root_fd: int, pid: str) -> tuple[str, float | None]:
    """(project path or "", last use) from the marker beside the folder. The marker is in
    the root, which sandboxes cannot write; its text is still made printable."""
    name = pid + cachemod.MARKER_SUFFIX
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except OSError:
        return "", None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 4096).decode("utf-8", "replace").rstrip("\n")
    finally:
        os.close(fd)
    return one_line(data), st.st_mtime


def _size_line(root_fd: int, pid: str) -> tuple[str, float | None]:
    """The size line of one project's cache and the folder's mtime. Measuring changes
    nothing: a folder a command made unreadable is counted as far as it can be read."""
    try:
        rfd = os.open(pid, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        return f"unknown (the folder cannot be read: {e.strerror})", None
    try:
        mtime = os.fstat(rfd).st_mtime
        try:
            size, unreadable = trees.disk_usage(rfd)
        except OSError as e:
            return f"unknown (measuring stopped: {one_line(str(e), 200)})", mtime
    finally:
        os.close(rfd)
    text = f"{_kib(size)} KiB ({_human(size)}), as du -sk counts"
    if unreadable:
        text += f"; at least: {unreadable} folder(s) in it cannot be read"
    return text, mtime


def clear_command(root: str, pid: str, project: str, uid: int) -> str:
    base = ["sbxc", "cache", "clear"]
    if os.path.normpath(root) != cachemod.default_root(uid, os.environ):
        base += ["--root", root]
    if project and cachemod.project_id(project) == pid:
        base += ["--project", project]
    else:
        base += ["--id", pid]
    return shlex.join(base)


def cache_lines(root: str, uid: int) -> list[str]:
    lines = [f"caches in {root}:"]
    try:
        root_fd = cachedir.open_root(root, uid, create=False)
    except FileNotFoundError:
        return lines + ["  none yet (the folder is made by the first sandboxed run)"]
    except cachedir.Unsafe as e:
        return lines + [f"  unsafe: {e.problem}; runs use a throwaway cache until it is fixed"
                        + (f": {e.fix}" if e.fix else "")]
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
        try:
            with os.scandir(fd) as it:
                # Only project folders: the root also holds markers and the plan cache.
                names = sorted(e.name for e in it if cachedir.is_project_id(e.name))
        finally:
            os.close(fd)
        if not names:
            lines.append("  none")
        for pid in names:
            shown = one_line(pid)
            project, last = _marker(root_fd, pid)
            try:
                pfd = cachedir.open_project(root_fd, root, pid, uid)
            except cachedir.Unsafe as e:
                lines.append(f"  {shown}: unsafe, {e.problem}; runs use a throwaway cache" + (f"; fix: {e.fix}" if e.fix else ""))
                continue
            except FileNotFoundError:
                continue  # cleared between the listing and now
            os.close(pfd)
            try:
                size_line, mtime = _size_line(root_fd, pid)
            except FileNotFoundError:
                continue  # cleared (or being cleared) while it was measured
            if last is None:
                last = mtime
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(last)) if last is not None else "unknown"
            lines.append(f"  {shown}")
            gone = bool(project) and not os.path.isdir(project)
            lines.append(f"    project:   {project or 'unknown (no marker)'}"
                         + ("  (gone: that folder no longer exists)" if gone else ""))
            lines.append(f"    size:      {size_line}")
            lines.append(f"    last used: {when}")
            lines.append(f"    clear:     {clear_command(root, pid, project, uid)}")
    finally:
        os.close(root_fd)
    return lines


def leftover_lines(uid: int) -> list[str]:
    """Throwaway caches that runs killed before their clean-up left behind (a later run that
    needs a throwaway, or ``cache clear --all``, removes them)."""
    left = cachedir.leftover_throwaways(uid)
    if not left:
        return []
    lines = ["leftover throwaway caches (from runs that were killed):"]
    for base, name in left:
        lines.append(f"  {base}/{one_line(name)}")
    lines.append("    clear:     sbxc cache clear --all")
    return lines


def plan_cache_lines() -> list[str]:
    """The plan cache: what it holds, its limits, and what is kept apart from it."""
    from ..runtime import planprune, planstore

    where = planstore.plans_dir()
    lines = [f"plan cache in {where}:"]
    dir_fd = planstore.open_plans_dir(create=False)
    if dir_fd < 0:
        if os.path.lexists(where):
            return lines + [f"  unusable: not this user's private folder (runs refuse until it is fixed: chmod 700 {where})"]
        return lines + ["  none yet (made by the first sbxc exec)"]
    try:
        s = planprune.summary(dir_fd)
    except OSError as e:
        return lines + [f"  cannot be listed ({e.strerror})"]
    finally:
        os.close(dir_fd)
    if s.oldest_ns is None:
        lines.append("  plans:     none")
    else:
        age_h = max(0.0, (time.time_ns() - s.oldest_ns) / 3600e9)
        age = f"{age_h:.1f} hours" if age_h < 48 else f"{age_h / 24:.1f} days"
        lines.append(f"  plans:     {s.plans}, {_human(s.plan_bytes)}, the oldest compiled {age} ago")
    lines.append(f"  limits:    {planprune.MAX_ENTRIES} plans, {_human(planprune.MAX_BYTES)}, "
                 f"{planprune.MAX_AGE_S // 86400} days (pruned on a miss)")
    lines.append(f"  kept:      {s.taints} taint(s), {s.runs} run record(s), {s.accepted} accepted file(s), "
                 f"journal {_human(s.journal_bytes)} (never pruned: later runs need them)")
    lines.append("  clear:     sbxc cache clear --all (plans of one project: sbxc cache clear --project DIR)")
    return lines


def find_project_quietly() -> str:
    from .cache import find_project

    try:
        return find_project(os.getcwd())
    except OSError:
        return ""


def session_line(project: str, uid: int) -> str:
    """How ``session start`` makes a workspace of this project here."""
    from ..runtime import session_copy
    from ..runtime.sessions import sessions_dir

    store = sessions_dir(os.environ)
    where = store if os.path.isdir(store) else cachemod.default_root(uid, os.environ)
    if not os.path.isdir(where):
        where = os.path.dirname(where)
    how = session_copy.method(project, where) if project else "copy"
    what = ("reflink (copy-on-write: the project and the sessions folder share a btrfs or XFS file system)"
            if how == "reflink" else "plain copy (cp -a; no reflink between the project's file system and the "
                                     "sessions folder's)")
    from ..runtime.session_pool import keeper_state

    kp = keeper_state(project, os.environ) if project else {}
    pool = {"watching": "; the warm pool's keeper watches the project (a pool start is one question)",
            "gave up": f"; the warm pool's keeper gave up ({kp.get('why', '')}): pool starts check every entry"}
    return (f"sessions: workspaces of {project or 'this project'} are made by {what}; {session_copy.method_note()}"
            + pool.get(kp.get("state", ""), ""))


def main(argv) -> int:
    args, code = _help.run_parse(_args.DOCTOR, argv, sys.stdout, sys.stderr)
    if args is None:
        return code
    if args.root is not None and not args.root.startswith("/"):
        sys.stderr.write(f"sbxc doctor: --root must be an absolute path, not {args.root!r} (see: sbxc help doctor)\n")
        return 2
    from ..compiler.backend_choice import choose_backend

    from dataclasses import replace

    host = probe.probe_host(os.environ, full=False)
    userns_why = ""
    if host.platform == "linux":
        userns, userns_why = probe.userns_works(host.bwrap)
        host = replace(host, userns=userns, bwrap_version=probe.bwrap_version(host.bwrap) if host.bwrap else "",
                       private_mounts=probe.private_mounts_work(host.bwrap, os.environ) if host.bwrap else False)
    ns_errno = None
    if host.platform == "linux" and host.landlock_abi > 0:
        from ..runtime.landlock_run import namespace_errno

        ns_errno = namespace_errno()
    bwrap_note = probe.host_program("bwrap", os.environ)[1] if host.platform == "linux" else ""
    lines, works = host_lines(host, userns_why, ns_errno, bwrap_note)
    if host.platform == "linux":
        lines.append(runc_line(os.environ))
    capabilities = lines[1:]
    backend, why = choose_backend("auto", host)
    lines.append(f"backend auto: {backend} ({why})" if works or host.platform == "darwin"
                 else f"backend auto: none works here ({why})")
    uid = os.getuid()
    if args.root:
        roots = [os.path.normpath(os.path.abspath(args.root))]
    else:
        from .cache import find_project, policy_cache

        roots = [cachemod.default_root(uid, os.environ)]
        found = policy_cache(find_project(os.getcwd()))
        if found and found[2] and os.path.normpath(found[0]) not in roots:
            roots.append(os.path.normpath(found[0]))
    caches = [cache_lines(root, uid) for root in roots]
    leftovers = leftover_lines(uid)
    code = 0 if works or host.platform == "darwin" else 1
    if args.format == "json":
        from ..compiler.diagnostics import dumps_json

        sys.stdout.write(dumps_json(doctor_json(host, userns_why, capabilities, works, backend, why, roots, caches,
                                                leftovers, code)))
        return code
    for c in caches:
        lines += c
    lines += leftovers
    lines += plan_cache_lines()
    lines.append(session_line(find_project_quietly(), uid))
    sys.stdout.write("\n".join(lines) + "\n")
    return code


def _entry(line: str) -> dict:
    """``  name: detail`` as ``{"name", "detail"}`` (the text line's own words)."""
    name, _, detail = line.strip().partition(": ")
    return {"name": name, "detail": detail}


def _caches_json(root: str, lines: list) -> dict:
    """One root's text lines (``cache_lines``) as data: each project folder with its
    ``project``, ``size``, ``last used`` and ``clear`` fields; a line about the root itself
    (none yet, unsafe) as ``note``."""
    out = {"root": root, "projects": [], "note": ""}
    for line in lines[1:]:
        if line.startswith("    "):
            key, _, value = line.strip().partition(":")
            out["projects"][-1][key.replace(" ", "_")] = value.strip()
        elif line.startswith("  ") and cachedir.is_project_id(line.strip()):
            out["projects"].append({"id": line.strip()})
        else:
            out["note"] = (out["note"] + "; " if out["note"] else "") + line.strip()
    return out


def doctor_json(host, userns_why, capabilities, works, backend, why, roots, caches, leftovers, code) -> dict:
    facts = {k: v for k, v in host.to_dict().items() if k != "listings"}
    facts["userns_why"] = userns_why
    return {
        "format": JSON_FORMAT,
        "host": facts,
        "capabilities": [_entry(l) for l in capabilities],
        "linux_backend_works": bool(works),
        "backend_auto": {"backend": backend if works or host.platform == "darwin" else None, "why": why},
        "caches": [_caches_json(root, c) for root, c in zip(roots, caches)],
        "leftover_throwaways": [l.strip() for l in leftovers[1:-1]],
        "exit": code,
    }
