"""``exec --plan FILE``: a plan file chosen by the caller, trusted only from a place no one
else and no sandboxed command could have written, and parsed once per content.

Hot path for ``--plan``: ``os``, and the plans folder's marshal copy of the file; ``json``
only the first time a given file content is seen.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..layout import default_cache_root
from .errors import Refusal, one_line
from .planstore import MAX_PLAN_BYTES, open_plans_dir, read_all, read_entry, sha256_hex, write_entry

ENTRY_VERSION = 2  # the plan cache's numbering: one folder, one version


def load_planfile(path: str) -> dict:
    """A plan file written by ``sbxc compile -o``; parsed with ``json`` once per content,
    then served from the marshal copy keyed by the file's sha256."""
    from .safeopen import open_regular

    try:
        # Never a device's or a FIFO's open, whatever the name leads to by now (the file may
        # lie where a sandboxed command writes: the refusal for that place comes later).
        fd = open_regular(path)
    except OSError as e:
        raise Refusal(f"cannot read the plan {one_line(path, 200)} ({e.strerror})", "check the path; make it with sbxc compile -o PLAN") from None
    if fd < 0:
        raise Refusal(f"{one_line(path, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_PLAN_BYTES:
            raise Refusal(f"{one_line(path, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
        data = read_all(fd)
    finally:
        os.close(fd)
    name = "f-" + sha256_hex(data)
    dir_fd = open_plans_dir()
    try:
        if dir_fd >= 0:
            entry = read_entry(dir_fd, name, ENTRY_VERSION)
            if entry is not None and isinstance(entry.get("plan"), dict):
                return entry["plan"]
        import json

        try:
            pf = json.loads(data)
        except ValueError as e:
            raise Refusal(f"{one_line(path, 200)} is not valid JSON ({e})", "make it with sbxc compile -o PLAN") from None
        if not isinstance(pf, dict):
            raise Refusal(f"{one_line(path, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
        if dir_fd >= 0:
            if write_entry(dir_fd, name, {"v": ENTRY_VERSION, "plan": pf}):
                from .planprune import prune

                prune(dir_fd)
        return pf
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def access_at(checks, path: str) -> str:
    """The access the deepest rule containing ``path`` gives (``none`` when none does)."""
    best, depth = "none", -1
    for check in checks:
        rpath, access = check[0], check[2]
        inside = path == rpath or path.startswith(rpath.rstrip("/") + "/")
        d = 0 if rpath == "/" else rpath.count("/")
        if inside and d > depth:
            best, depth = access, d
    return best


_PLAN_FIX = "keep plan files outside anything sandboxed commands write (e.g. in a folder of your own outside the project)"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_plan_location(real: str, cwd: str) -> None:
    """Refuse a ``--plan`` file (``real``: its resolved path) that someone other than the
    caller, or a sandboxed command, could have written: it must be a regular file owned by
    the caller or root and not writable by group or others; every folder on the way owned
    by the caller or root and not writable by group or others, unless sticky (then the next
    step must be the caller's or root's, which the sticky bit keeps others from replacing);
    and it must not lie in the current folder's tree, where the commands run and usually
    write."""
    uid = os.getuid()
    trusted = (0, uid)
    try:
        st = os.stat(real)
    except OSError as e:
        raise Refusal(f"cannot read the plan {one_line(real, 200)} ({e.strerror})",
                      "check the path; make it with sbxc compile -o PLAN") from None
    if (st.st_mode & 0o170000) != 0o100000:
        raise Refusal(f"{one_line(real, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
    if st.st_uid not in trusted or st.st_mode & 0o022:
        who = f"owned by uid {st.st_uid}" if st.st_uid not in trusted else f"writable by others (mode {st.st_mode & 0o7777:04o})"
        raise Refusal(f"the plan {one_line(real, 200)} is {who}, so someone else could have rewritten it",
                      f"chmod go-w it and own it yourself; {_PLAN_FIX}")
    if _inside(real, cwd):
        raise Refusal(f"the plan {one_line(real, 200)} lies in the current folder's tree, where sandboxed commands "
                      "run, so one could have rewritten it", _PLAN_FIX)
    default_root = default_cache_root(uid, os.environ)
    if _inside(real, default_root):
        raise Refusal(f"the plan {one_line(real, 200)} lies under the cache root {default_root}, whose project "
                      "folders sandboxed commands write", _PLAN_FIX)
    # Every folder on the way is owned by the caller or root (so are the file and the
    # next folder after a sticky one): in a sticky shared folder (/tmp) no one else can
    # then rename our entries away and put their own in their place.
    folder = "/"
    for part in [""] + real.split("/")[1:-1]:
        folder = folder.rstrip("/") + "/" + part if part else folder
        try:
            dst = os.stat(folder)
        except OSError as e:
            raise Refusal(f"cannot check {one_line(folder, 200)} on the way to the plan ({e.strerror})", _PLAN_FIX) from None
        if dst.st_uid not in trusted:
            fix = _PLAN_FIX
            from .safeopen import nested_overflow_uid  # error path only

            if dst.st_uid == nested_overflow_uid():
                # Owners outside this user namespace all show as the overflow uid: root
                # and any other user alike, so sbxc cannot tell that no one else writes it.
                fix = "run sbxc outside this user namespace, or use --policy instead of --plan"
            raise Refusal(f"{one_line(folder, 200)} (on the way to the plan) is owned by uid {dst.st_uid}", fix)
        if dst.st_mode & 0o022 and not dst.st_mode & 0o1000:
            raise Refusal(f"{one_line(folder, 200)} (on the way to the plan) is writable by others and not sticky",
                          _PLAN_FIX)


def load_plan_file(plan: str, backend, network, cwd: str) -> dict:
    """The ``--plan`` file ``plan`` (relative to ``cwd``), after the checks of where it lies
    and of the flags against it; whether it still holds on this host is asked later, by the
    core (``staleness.why_stale``)."""
    # A plan the sandbox can rewrite is a plan the previous command chose: it could
    # have granted itself anything for this run. Its contents cannot vouch for that
    # (a rewritten plan lists whatever suits it), so its place is checked first, from
    # the filesystem alone; the plan's own rules are a second opinion below.
    real = os.path.realpath(os.path.join(cwd, plan))
    check_plan_location(real, cwd)
    pf = load_planfile(real)
    project = (pf.get("runtime") or {}).get("project") or ""
    if isinstance(project, str) and project.startswith("/") and _inside(real, os.path.realpath(project)):
        raise Refusal(f"the plan {one_line(real, 200)} lies in its own project {one_line(project, 200)}, where "
                      "sandboxed commands usually write, so one could have rewritten it", _PLAN_FIX)
    cache_root = ((pf.get("runtime") or {}).get("cache") or {}).get("root") or ""
    if isinstance(cache_root, str) and cache_root.startswith("/") and _inside(real, os.path.realpath(cache_root)):
        raise Refusal(f"the plan {one_line(real, 200)} lies under its own cache root {one_line(cache_root, 200)}, "
                      "whose project folders sandboxed commands write", _PLAN_FIX)
    checks = (pf.get("runtime") or {}).get("checks") or ()
    if access_at(checks, real) == "write":
        raise Refusal(f"the plan {one_line(real, 200)} lies where this plan lets commands write, so a "
                      "sandboxed command could have rewritten it",
                      "keep plan files outside the folders the policy makes writable")
    if backend not in (None, "auto") and backend != pf.get("backend"):
        raise Refusal(f"the plan is for {pf.get('backend')}, --backend asks for {backend}",
                      "recompile with --backend, or drop the flag")
    net = pf.get("runtime", {}).get("network")
    if network is not None and network != ("on" if net == "on" else "off"):
        raise Refusal(f"--network={'true' if network == 'on' else 'false'} differs from the plan (network {net})",
                      "recompile the plan with that setting, or use --policy")
    return pf
