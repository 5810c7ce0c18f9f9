"""A command that rewrites its own policy file (which usually lies in the writable project)
could loosen the next run. sbxc names the change as soon as the command ends."""
import os

import pytest

from conftest import base_env, own_code_rules, run, sbxc_argv, without_plan_warnings

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_rewritten_policy_is_named_after_the_run(sbxc, accept_all, backend):
    accept_all(os.path.join(sbxc.project, "sandbox.policy.yaml"))
    r = sbxc(POLICY, "sh", "-c", "echo 'network: true' >> sandbox.policy.yaml", args=("--backend", backend))
    assert r.rc == 0, r
    assert "sandbox.policy.yaml changed while the command ran" in r.err
    assert r.err.count("sbxc: warning: the policy file") == 1


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_untouched_policy_gives_no_warning(sbxc, backend):
    r = sbxc(POLICY, "sh", "-c", "echo hello > out.txt", args=("--backend", backend))
    assert r.rc == 0, r
    assert "changed while the command ran" not in r.err


# ------------------------------------------------------------------ taints: the next run refuses

PLANTED = "sbxc: 1\nextends: [builtin:default]\nnetwork: true\n"


def _exec(home, cwd, *cmd, args=()):
    return run(sbxc_argv("exec", *args, "--", *cmd), env=base_env(home), cwd=cwd)


def _accept(home, cwd, *paths):
    return run(sbxc_argv("compile", "--check", *paths), env=base_env(home), cwd=cwd)


def _refused_as_written(r, path):
    assert r.rc == 125, r
    assert r.err.strip().split("\n")[-1] == (
        f"sbxc: the policy {path} was written by a sandboxed command during an earlier run; "
        f"review it, then accept it with 'sbxc compile --check {path}'"), r


@pytest.fixture
def accept_all(bwrap_works):
    """Drop any taint a test left behind in the shared plans folder (its paths are the
    test's own tmp paths, so only this test's entries go)."""
    paths = []
    yield paths.append
    from sbxc.runtime import planstore

    fd = planstore.open_plans_dir(create=False)
    if fd >= 0:
        try:
            for p in paths:
                planstore.drop_taint(fd, p)
        finally:
            os.close(fd)


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_planted_policy_is_refused_until_accepted(sbxc, accept_all, backend):
    """The review's repro: no policy (builtin:default); the command plants one in the
    project; the next run must not silently use it."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    accept_all(ppath)
    marker = os.path.join(project, "marker")
    r = _exec(home, project, "sh", "-c", f"printf '{PLANTED}' > sandbox.policy.yaml", args=("--backend", backend))
    assert r.rc == 0, r
    assert f"sbxc: warning: the policy file {ppath} appeared while the command ran" in r.err, r
    r = _exec(home, project, "touch", marker, args=("--backend", backend))
    _refused_as_written(r, ppath)
    assert not os.path.exists(marker)
    # --policy naming the file is refused the same way
    r = _exec(home, project, "touch", marker, args=("--backend", backend, "--policy", ppath))
    _refused_as_written(r, ppath)
    assert not os.path.exists(marker)
    # compile --check accepts it (exit 0), says so, and the next run uses it
    r = _accept(home, project, ppath)
    assert r.rc == 0, r
    assert f"sbxc: accepted {ppath}" in r.out, r
    r = _exec(home, project, "touch", marker, args=("--backend", backend))
    assert r.rc == 0 and os.path.exists(marker), r
    assert "warning" not in without_plan_warnings(r.err), r


def test_policy_planted_in_the_current_subfolder(sbxc, accept_all):
    """Variant: the policy lies in proj/, the user runs from proj/sub, the command plants
    proj/sub/sandbox.policy.yaml (which discovery would find first next time)."""
    project, home = sbxc.project, sbxc.home
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    sub = os.path.join(project, "src")
    planted = os.path.join(sub, "sandbox.policy.yaml")
    accept_all(planted)
    r = _exec(home, sub, "sh", "-c", f"printf '{PLANTED}' > sandbox.policy.yaml")
    assert r.rc == 0 and "appeared while the command ran" in r.err, r
    _refused_as_written(_exec(home, sub, "true"), planted)
    # The parent's policy, in use, was not touched: runs from the project go on.
    assert _exec(home, project, "true").rc == 0


def test_a_taint_goes_when_the_caller_edits_the_file(sbxc, accept_all):
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    accept_all(ppath)
    sbxc("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n", "sh", "-c",
         "echo 'network: true' >> sandbox.policy.yaml")
    _refused_as_written(_exec(home, project, "true"), ppath)
    with open(ppath, "w") as f:  # the caller's own edit: a new content, no longer the command's
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    r = _exec(home, project, "true")
    assert r.rc == 0, r
    from sbxc.runtime import planstore

    fd = planstore.open_plans_dir(create=False)
    try:
        assert planstore.read_taint(fd, ppath) is None  # dropped, not just ignored
    finally:
        os.close(fd)


def test_a_taint_is_checked_on_a_cache_hit(sbxc, accept_all):
    """The plan cache entry can outlive the taint's cause (another sandboxed run wrote the
    file to what a cached plan was built from): the check runs on hits too."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    accept_all(ppath)
    with open(ppath, "w") as f:
        f.write(POLICY)
    assert _exec(home, project, "true").rc == 0  # compiled and cached
    assert _exec(home, project, "true").rc == 0  # a hit
    from sbxc.runtime import planstore

    assert planstore.record_taints([(ppath, planstore.policy_state(ppath))])
    _refused_as_written(_exec(home, project, "true"), ppath)


def test_removed_nearer_policy_is_refused_until_accepted(sbxc, accept_all):
    """Removing proj/src/sandbox.policy.yaml would make discovery fall back to the
    project's looser one (or builtin:default)."""
    project, home = sbxc.project, sbxc.home
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: true\n")
    sub = os.path.join(project, "src")
    strict = os.path.join(sub, "sandbox.policy.yaml")
    accept_all(strict)
    with open(strict, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    r = _exec(home, sub, "rm", "sandbox.policy.yaml")
    assert r.rc == 0 and f"the policy file {strict} was removed while the command ran" in r.err, r
    r = _exec(home, sub, "true")
    assert r.rc == 125 and f"sbxc: the policy {strict} was removed by a sandboxed command" in r.err, r
    r = _accept(home, sub)
    assert r.rc == 0 and f"sbxc: accepted {strict}" in r.out, r
    assert _exec(home, sub, "true").rc == 0


def test_plan_run_watches_discovery_candidates(sbxc, accept_all, tmp_path):
    """A --plan run's command can plant a policy for a later run with discovery."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    accept_all(ppath)
    plan = str(tmp_path / "plan.json")
    assert run(sbxc_argv("compile", "-o", plan), env=base_env(home), cwd=project).rc == 0
    r = _exec(home, project, "sh", "-c", f"printf '{PLANTED}' > sandbox.policy.yaml", args=("--plan", plan))
    assert r.rc == 0 and "appeared while the command ran" in r.err, r
    _refused_as_written(_exec(home, project, "true"), ppath)


def test_rewritten_plan_in_the_project_is_refused(sbxc, tmp_path):
    """A command rewrites a plan kept in the project so that its checks no longer show the
    project writable (and drops the masks): the plan's place decides, not its contents."""
    import json

    project, home = sbxc.project, sbxc.home
    plan = os.path.join(project, "plan.json")
    assert run(sbxc_argv("compile", "-o", plan), env=base_env(home), cwd=project).rc == 0
    with open(plan) as f:
        pf = json.load(f)
    rt = pf["runtime"]
    rt["checks"] = [c for c in rt["checks"] if c[2] not in ("write", "mask")]
    with open(plan, "w") as f:
        json.dump(pf, f)
    marker = os.path.join(project, "marker")
    other = tmp_path / "elsewhere"
    other.mkdir()
    for cwd in (project, os.path.join(project, "src"), str(other)):
        r = _exec(home, cwd, "touch", marker, args=("--plan", plan))
        assert r.rc == 125 and "could have rewritten it" in r.err, (cwd, r)
        assert not os.path.exists(marker)


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_taints_are_out_of_reach_with_a_custom_cache_root(sbxc, backend, tmp_path):
    """The taints live in the plans folder under the default root, also when the policy
    moves the cache elsewhere and makes /var/tmp writable: the default root stays masked,
    so no command can add, remove or rename the way to an entry."""
    import shutil

    from conftest import remove_project_cache
    from sbxc.runtime import planstore

    plans = planstore.plans_dir()
    assert planstore.record_taints([(str(tmp_path / "probe.yaml"), "0" * 64)])
    root = f"/var/tmp/sbxc-test-root-{os.getpid()}-{backend}"
    policy = (f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\ncache:\n  root: {root}\n"
              "filesystem:\n  - write /var/tmp\n" + own_code_rules())
    droot = os.path.dirname(plans)
    cmd = (f"for f in {plans}/t-*; do [ -e \"$f\" ] && rm \"$f\" && echo removed; done; touch {plans}/x && echo touched; "
           f"mv {droot} {droot}.moved && echo moved; true")
    try:
        r = sbxc(policy, "sh", "-c", cmd)
        assert r.rc == 0, r
        assert "removed" not in r.out and "touched" not in r.out and "moved" not in r.out, r
        assert os.path.isdir(plans) and not os.path.exists(os.path.join(plans, "x"))
        fd = planstore.open_plans_dir(create=False)
        try:
            assert planstore.read_taint(fd, str(tmp_path / "probe.yaml")) == "0" * 64
        finally:
            planstore.drop_taint(fd, str(tmp_path / "probe.yaml"))
            os.close(fd)
    finally:
        if os.path.isdir(droot + ".moved") and not os.path.exists(droot):
            os.rename(droot + ".moved", droot)
        remove_project_cache(sbxc.project, root)
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ second review's bypasses

def test_taint_holds_through_a_linked_folder(sbxc, accept_all, tmp_path):
    """The same file reached through a folder link is the same file: changed through one
    spelling, it stays refused through the other."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(POLICY)
    link = str(tmp_path / "link")
    os.symlink(project, link)
    accept_all(ppath)
    # From outside the project (home), so that only the linked spelling is watched.
    r = _exec(home, home, "sh", "-c", f"printf '{PLANTED}' > {ppath}",
              args=("--policy", os.path.join(link, "sandbox.policy.yaml")))
    assert r.rc == 0 and "changed while the command ran" in r.err, r
    marker = os.path.join(project, "marker")
    r = _exec(home, project, "touch", marker)  # discovery, through the real path
    assert r.rc == 125 and "was written by a sandboxed command" in r.err, r
    assert not os.path.exists(marker)


def test_oversized_policy_is_not_hashed_and_is_tainted(sbxc, accept_all):
    """A sparse 1 TiB file named like a policy must not hold sbxc after the run."""
    project, home = sbxc.project, sbxc.home
    sub = os.path.join(project, "src")
    cand = os.path.join(sub, "sandbox.policy.yaml")
    accept_all(cand)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    r = run(sbxc_argv("exec", "--", "truncate", "-s", "1T", cand), env=base_env(home), cwd=sub, timeout=60)
    assert r.rc == 0 and "appeared while the command ran" in r.err, r
    os.unlink(cand)


def test_taint_is_recorded_when_the_reserve_is_needed(sbxc, accept_all, monkeypatch):
    """A taint write that fails (a full disk) is retried after freeing the reserved space;
    only when that fails too does sbxc say it could not record it."""
    from sbxc.runtime import planstore

    fd = planstore.open_plans_dir()
    assert fd >= 0
    try:
        planstore.ensure_reserve(fd)
        assert os.stat(planstore.RESERVE_NAME, dir_fd=fd).st_size == planstore.RESERVE_BYTES
    finally:
        os.close(fd)
    path = os.path.join(sbxc.project, "sandbox.policy.yaml")
    accept_all(path)
    real_write = planstore.write_entry
    calls = []

    def first_write_fails(dir_fd, name, entry):
        calls.append(name)
        if len(calls) == 1:
            return False  # as ENOSPC would
        return real_write(dir_fd, name, entry)

    monkeypatch.setattr(planstore, "write_entry", first_write_fails)
    assert planstore.record_taints([(path, "0" * 64)])
    fd = planstore.open_plans_dir()
    try:
        assert planstore.read_taint(fd, path) == "0" * 64
        # the reserve was spent on it, then made again
        assert os.stat(planstore.RESERVE_NAME, dir_fd=fd).st_size == planstore.RESERVE_BYTES
    finally:
        os.close(fd)


def test_plan_under_the_cache_root_is_refused(sbxc, tmp_path):
    """The project's cache folder is writable inside every run: a plan kept there could
    have been rewritten by one."""
    project, home = sbxc.project, sbxc.home
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    r = run(sbxc_argv("cache", "path"), env=base_env(home), cwd=project)
    cache_dir = r.out.strip().splitlines()[0]
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    plan = os.path.join(cache_dir, "plan.json")
    r = run(sbxc_argv("compile", "-o", plan), env=base_env(home), cwd=project)
    assert r.rc == 0, r
    marker = str(tmp_path / "ran")
    r = run(sbxc_argv("exec", "--plan", plan, "--", "touch", marker), env=base_env(home), cwd=str(tmp_path))
    assert r.rc == 125 and "cache root" in r.err, r
    assert not os.path.exists(marker)
    # control: the same plan elsewhere (outside cwd, project and cache) runs
    safe = str(tmp_path / "plans")
    os.mkdir(safe, 0o700)
    os.rename(plan, os.path.join(safe, "plan.json"))
    in_project = os.path.join(project, "ran")  # under /tmp only the project is the host's
    r = run(sbxc_argv("exec", "--plan", os.path.join(safe, "plan.json"), "--", "touch", in_project),
            env=base_env(home), cwd=home)
    assert r.rc == 0 and os.path.exists(in_project), r
