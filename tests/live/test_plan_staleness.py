"""A cached or compiled plan must not outlive the filesystem it was resolved against.

A `mask` of a path that did not exist at compile time has nothing to hide then; when the
path appears later (a user runs `aws configure`), a stale plan would show it. A cached plan
is compiled again; an explicit `--plan` file refuses (125).
"""
import os
import shutil

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - mask ~/.late\n"
BACKENDS = ["bwrap", "landlock"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_path_created_after_caching_stays_hidden(sbxc, backend):
    late = os.path.join(sbxc.home, ".late")
    cat = ("sh", "-c", "cat ~/.late/token")
    first = sbxc(POLICY, *cat, args=("--backend", backend))
    assert first.rc != 0 and "No such file" in first.err  # cached now, with ~/.late missing
    os.mkdir(late)
    with open(os.path.join(late, "token"), "w") as f:
        f.write("LATE-SECRET\n")
    try:
        second = sbxc(POLICY, *cat, args=("--backend", backend))
        assert "LATE-SECRET" not in second.out
        assert second.rc != 0
        # control: the same file outside the mask is readable
        shutil.copy(os.path.join(late, "token"), os.path.join(sbxc.home, "visible-token"))
        third = sbxc(POLICY, "cat", os.path.join(sbxc.home, "visible-token"), args=("--backend", backend))
        assert third.rc == 0 and "LATE-SECRET" in third.out
    finally:
        shutil.rmtree(late)


@pytest.mark.parametrize("backend", BACKENDS)
def test_plan_file_refuses_when_a_masked_path_appeared(bwrap_works, project, home, tmp_path, backend):
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    plan = str(tmp_path / "plan.json")
    env = base_env(home)
    r = run(sbxc_argv("compile", "--backend", backend, "-o", plan), env=env, cwd=project)
    assert r.rc == 0, r
    marker = os.path.join(project, "ran")
    ok = run(sbxc_argv("exec", "--plan", plan, "--", "touch", marker), env=env, cwd=project)
    assert ok.rc == 0 and os.path.exists(marker), ok  # control: the plan runs as compiled
    os.unlink(marker)
    os.mkdir(os.path.join(home, ".late"))
    r = run(sbxc_argv("exec", "--plan", plan, "--", "touch", marker), env=env, cwd=project)
    assert r.rc == 125, r
    assert ".late" in r.err and "appeared after the plan was compiled" in r.err
    assert not os.path.exists(marker)


@pytest.mark.parametrize("backend", BACKENDS)
def test_refusal_names_the_rule_whose_path_changed(bwrap_works, project, home, tmp_path, backend):
    """A run-time refusal from a plan's check points at the policy line, as a diagnostic does."""
    out = os.path.join(project, "out")
    os.mkdir(out)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - write {project}/out\n")
    plan = str(tmp_path / "plan.json")
    env = base_env(home)
    assert run(sbxc_argv("compile", "--backend", backend, "-o", plan), env=env, cwd=project).rc == 0
    ok = run(sbxc_argv("exec", "--plan", plan, "--", "touch", os.path.join(out, "x")), env=env, cwd=project)
    assert ok.rc == 0, ok  # control: the plan runs as compiled
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(out)
    os.symlink(str(elsewhere), out)  # the write rule would now land outside the project
    r = run(sbxc_argv("exec", "--plan", plan, "--", "touch", os.path.join(out, "y")), env=env, cwd=project)
    assert r.rc == 125, r
    assert f"{out} became a symlink since the plan was compiled (rule sandbox.policy.yaml:4:" in r.err, r
    assert '"write {project}/out")' in r.err, r
    assert not (elsewhere / "y").exists()


def test_plan_file_of_an_earlier_version_without_spans_still_runs_and_refuses(bwrap_works, project, home, tmp_path):
    """Plan files written before the checks carried spans: read as before, the refusal
    without a rule."""
    import json

    out = os.path.join(project, "out")
    os.mkdir(out)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - write {project}/out\n")
    plan = str(tmp_path / "plan.json")
    env = base_env(home)
    assert run(sbxc_argv("compile", "--backend", "bwrap", "-o", plan), env=env, cwd=project).rc == 0
    with open(plan) as f:
        pf = json.load(f)
    pf["runtime"]["checks"] = [c[:3] for c in pf["runtime"]["checks"]]
    with open(plan, "w") as f:
        json.dump(pf, f)
    assert run(sbxc_argv("exec", "--plan", plan, "--", "true"), env=env, cwd=project).rc == 0
    shutil.rmtree(out)
    os.symlink(str(tmp_path), out)
    r = run(sbxc_argv("exec", "--plan", plan, "--", "true"), env=env, cwd=project)
    assert r.rc == 125 and f"{out} became a symlink since the plan was compiled;" in r.err, r


@pytest.mark.parametrize("backend", ["bwrap", "oci", "landlock"])
def test_a_mount_point_that_vanished_is_not_made_on_the_host(sbxc, backend, request):
    """A cached plan's path checks run beside bwrap's set-up. A folder masked under a
    `write` rule, removed after the plan was cached, was made again on the host by bwrap
    (its mount point, through the writable bind: a folder of mode 0755 the user never
    made), and the late check then found it there and let the run go on. The runner now
    looks at such mount points before it starts: the plan is compiled again, with the
    folder missing, and nothing is made. The control: bwrap alone with the same two
    mounts makes the folder on the host."""
    from conftest import runc_for

    runc_for(request) if backend == "oci" else None
    proj = sbxc.project
    hidden = os.path.join(proj, "hidden")
    os.mkdir(hidden, 0o700)
    policy = "sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - mask {project}/hidden\n"
    look = ("sh", "-c", "test -e hidden && echo THERE || echo ABSENT")
    first = sbxc(policy, *look, args=("--backend", backend))
    assert first.rc == 0 and first.out.strip() in ("THERE", "ABSENT"), first  # cached, with the folder
    os.rmdir(hidden)
    second = sbxc(policy, *look, args=("--backend", backend))
    assert (second.rc, second.out) == (0, "ABSENT\n"), second
    assert not os.path.lexists(hidden), f"{backend} made {hidden} on the host: {oct(os.stat(hidden).st_mode)}"


def test_control_bwrap_makes_a_missing_mount_point_on_the_host(bwrap_works, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    r = run(["bwrap", "--ro-bind", "/", "/", "--bind", str(proj), str(proj), "--tmpfs", str(proj / "hidden"),
             "--unshare-user", "--", "/bin/true"], env={"PATH": "/usr/bin:/bin"}, cwd=str(tmp_path))
    assert r.rc == 0, r
    assert (proj / "hidden").is_dir()
