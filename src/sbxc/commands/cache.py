"""``sbxc cache path|clear``: where a project's dependency cache lives; empty it.

    sbxc cache path  [--project DIR] [--root ROOT]
    sbxc cache clear [--project DIR | --all | --id ID] [--root ROOT]

The root is ``--root`` when given, else the ``cache.root`` of the project's policy, else
the default ``/var/tmp/sbxc-{uid}``. Clearing opens every folder with ``O_NOFOLLOW``
relative to its parent and deletes entries relative to their folder's descriptor
(``sbxc.runtime.trees``), so a symlink a sandboxed command left in its cache is removed,
never followed out of the cache; deep trees, unreadable folders, FIFOs and sockets are
removed too. Exit 0 when everything it set out to remove is gone; otherwise 1, with one
line naming what is left.
"""
from __future__ import annotations

import os
import sys

from .. import cache as cachemod
from ..discovery import project_of
from ..runtime import cachedir, trees
from . import _args, _help


def find_project(start: str) -> str:
    """The project folder for ``start``: the nearest folder holding sandbox.policy.yaml (its
    ``project:`` key aside), else ``start`` itself; as a real path (``sbxc.discovery``)."""
    return project_of(start)


def policy_cache(project: str) -> tuple[str, str, bool] | None:
    """(root, dir, enabled) from the project's policy when it compiles, else None."""
    try:
        from ..compiler.api import compile_policy  # noqa: F401 (optional until it lands)
    except ImportError:
        return None
    try:
        from ..runtime.probe import probe_host

        result = compile_policy(None, cwd=project, environ=os.environ, host=probe_host(os.environ, full=False))
        plan = result.plan
        if plan is not None and plan.cache.dir:
            return plan.cache.root, plan.cache.dir, plan.cache.enabled
    except Exception:  # a broken policy must not keep anyone from finding or clearing a cache
        return None
    return None


def locate(project_arg: str | None, root_arg: str | None, uid: int) -> tuple[str, str, str, bool]:
    """(project real path, root, project cache folder, whether the policy uses a cache)."""
    project = os.path.realpath(project_arg) if project_arg else find_project(os.getcwd())
    if root_arg:
        root = os.path.normpath(os.path.abspath(root_arg))
        return project, root, cachemod.project_dir(root, project), True
    found = policy_cache(project)
    if found:
        return project, found[0], found[1], found[2]
    root = cachemod.default_root(uid, os.environ)
    return project, root, cachemod.project_dir(root, project), True


def main(argv) -> int:
    verbs = {c.name: c for c in _args.CACHE.subcommands}
    if argv and argv[0] in ("-h", "--help"):
        from ._help import command_help

        sys.stdout.write(command_help(_args.CACHE))
        return 0
    if not argv or argv[0] not in verbs:
        what = (_args.unknown("subcommand", argv[0], list(verbs)) if argv and not argv[0].startswith("-")
                else f"a subcommand is needed first (choose from: {', '.join(verbs)})")
        sys.stderr.write(f"sbxc cache: {what} (see: sbxc help cache)\n")
        return 2
    verb, rest = argv[0], argv[1:]
    args, code = _help.run_parse(verbs[verb], rest, sys.stdout, sys.stderr, parent="cache")
    if args is None:
        return code
    if args.root is not None and not args.root.startswith("/"):
        sys.stderr.write(f"sbxc cache {verb}: --root must be an absolute path, not {args.root!r} "
                         "(see: sbxc help cache)\n")
        return 2
    uid = os.getuid()
    project, root, pdir, enabled = locate(args.project, args.root, uid)
    if verb == "path":
        sys.stdout.write(pdir + "\n")
        if not enabled:
            sys.stderr.write("sbxc: note: the project's policy turns caching off (cache.tools is empty)\n")
        problem = check(root, os.path.basename(pdir), uid)
        if problem:
            sys.stderr.write(f"sbxc: note: {problem}; runs use a throwaway cache until it is fixed\n")
        return 0
    if args.id is not None:
        if not cachedir.is_project_id(args.id):
            sys.stderr.write(f"sbxc cache clear: {args.id!r} is not a project cache name\n")
            return 2
        pdir = os.path.join(root, args.id)
    pid = None if args.all else os.path.basename(pdir)
    rc = clear(root, pid, uid)
    # The plan cache is the user's, whatever cache root the project uses.
    if pid is None:
        return clear_plans(None) or rc
    return clear_plans(lambda p: bool(p) and (p == project or cachemod.project_id(p) == pid), project) or rc


def clear_plans(match, project: str = "") -> int:
    """Remove the cached plans (``match`` None: all of them; else those whose project folder
    ``match`` accepts) from the plans folder; the taints and the run journal stay, since
    later runs need them (``sbxc.runtime.planprune``)."""
    from ..runtime import planprune, planstore

    where = planstore.plans_dir()
    dir_fd = planstore.open_plans_dir(create=False)
    if dir_fd < 0:
        if os.path.lexists(where):
            sys.stderr.write(f"sbxc: the plans folder {where} is not this user's private folder; not clearing through "
                             f"it; remove it or fix its owner and mode (chmod 700 {where})\n")
            return 1
        return 0  # no plan cache yet: nothing to clear
    try:
        removed, failed = planprune.clear(dir_fd, match)
        kept = planprune.summary(dir_fd) if match is None else None
    finally:
        os.close(dir_fd)
    if match is None:
        sys.stdout.write(f"cleared {removed} cached plan(s) in {where}")
        if kept is not None and (kept.taints or kept.runs or kept.accepted or kept.journal_bytes):
            sys.stdout.write(f"; kept the run journal and {kept.taints} taint(s), which later runs need to refuse "
                             "policy files a sandboxed command wrote")
        sys.stdout.write("\n")
    else:
        sys.stdout.write(f"cleared {removed} cached plan(s) of {project} in {where}\n")
    if failed:
        sys.stderr.write(f"sbxc: {failed} cached plan(s) in {where} could not be removed; they are left in place, the "
                         "rest was removed; remove them by hand and run the command again\n")
        return 1
    return 0


def check(root: str, pid: str, uid: int) -> str:
    """What is wrong with an existing cache folder (empty: nothing, or not made yet)."""
    try:
        root_fd, proj_fd, _ = cachedir.open_cache(root, pid, uid, create=False)
    except FileNotFoundError:
        return ""
    except cachedir.Unsafe as e:
        return e.problem + (f" (fix: {e.fix})" if e.fix else "")
    os.close(proj_fd)
    os.close(root_fd)
    return ""


def clear(root: str, pid: str | None, uid: int) -> int:
    """Empty one project's cache folder (``pid``) or, with ``pid=None``, remove every project
    folder and marker under ``root`` and this user's leftover throwaway caches. The root and
    project folders must be ours and no symlinks; a mode wider than 0700 does not stop
    clearing (deleting never follows a link, and emptying such a folder is part of the fix)."""
    failed = 0
    if pid is None:
        n, left = cachedir.remove_leftover_throwaways(uid)
        if n:
            sys.stdout.write(f"removed {n} leftover throwaway cache(s)\n")
        for e in left:
            failed = _left("", e)
    try:
        root_fd = cachedir.open_root(root, uid, create=False, check_mode=False)
    except FileNotFoundError:
        sys.stdout.write(f"nothing to clear: {root} does not exist\n")
        return failed
    except cachedir.Unsafe as e:
        sys.stderr.write(f"sbxc: {e.problem}; not clearing through it; {e.fix or 'remove it as its owner or root'}\n")
        return 1
    try:
        if pid is None:
            return _clear_all(root, root_fd) or failed
        try:
            pfd = cachedir.open_project(root_fd, root, pid, uid, check_mode=False)
        except FileNotFoundError:
            sys.stdout.write(f"nothing to clear: {root}/{pid} does not exist\n")
            return 0
        except cachedir.Unsafe as e:
            sys.stderr.write(f"sbxc: {e.problem}; not clearing through it; {e.fix or 'remove it by hand'}\n")
            return 1
        os.close(pfd)
        try:
            # Checked above as ours and no symlink; a command may have made it unreadable.
            fd = trees.open_for_removal(root_fd, pid)
            try:
                trees.empty_dir(fd)
            finally:
                os.close(fd)
        except OSError as e:
            return _left(f"{root}/{pid}", e)
        sys.stdout.write(f"cleared {root}/{pid}\n")
        return 0
    except OSError as e:
        return _left(root, e)
    finally:
        os.close(root_fd)


def _left(where: str, e: OSError) -> int:
    """One line naming what could not be removed (the rest was), and exit status 1."""
    from ..runtime.errors import one_line

    name = e.filename if isinstance(e.filename, str) and e.filename not in ("", ".") else ""
    what = "/".join(p for p in (where.rstrip("/"), name) if p) or "?"
    sys.stderr.write(f"sbxc: could not remove {one_line(what, 300)} ({e.strerror or e}); it is left in place, "
                     "the rest was removed; remove it by hand (as its owner, or root) and run the command again\n")
    return 1


def _clear_all(root: str, root_fd: int) -> int:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        with os.scandir(fd) as it:
            names = sorted(e.name for e in it)
    finally:
        os.close(fd)
    # Project folders and their markers only: the root also holds the plan cache (plans/).
    projects = [n for n in names if cachedir.is_project_id(n)]
    code = 0
    for name in projects:
        try:
            cachedir.remove_project(root_fd, name)  # unlinks files and links, removes folders
        except OSError as e:
            code = _left(root, e)
    if code == 0:
        sys.stdout.write(f"cleared {len(projects)} project cache(s) in {root}\n")
    return code
