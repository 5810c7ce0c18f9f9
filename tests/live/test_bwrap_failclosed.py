"""Fail closed: every doubt before the command starts is exit 125, one ``sbxc:`` line, and
the command never ran (it would have made a marker file). Each case has a control run
that shows the same command does run (and makes the marker) when nothing is wrong."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nnetwork: {net}\nfilesystem:\n  - read {{project}}/data\n"


@pytest.fixture
def setup(bwrap_works, project, home, tmp_path):
    os.mkdir(os.path.join(project, "data"))
    ppath = os.path.join(project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(POLICY.format(net="false"))
    plan = str(tmp_path / "plan.json")
    r = run(sbxc_argv("compile", "-o", plan), env=base_env(home), cwd=project)
    assert r.rc == 0, r
    marker = os.path.join(project, "marker")

    class S:
        pass

    s = S()
    s.project, s.home, s.plan, s.marker, s.policy, s.tmp = project, home, plan, marker, ppath, tmp_path
    s.cmd = ["/bin/sh", "-c", f"touch {marker}"]
    return s


def refused(r, marker, *words):
    assert r.rc == 125, r
    assert not os.path.exists(marker), r
    lines = [ln for ln in r.err.strip().split("\n") if ln]
    assert lines and lines[-1].startswith("sbxc: ") and "; " in lines[-1], r
    for w in words:
        assert w in r.err, r


def control(s, argv_flags=("--plan",), env=None):
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), env=env or base_env(s.home), cwd=s.project)
    assert r.rc == 0 and os.path.exists(s.marker), r
    os.unlink(s.marker)


def test_bwrap_missing(setup, tmp_path):
    s = setup
    control(s)
    # a PATH with the usual tools but no bwrap
    bindir = tmp_path / "bin-without-bwrap"
    bindir.mkdir()
    for tool in ("sh", "touch", "true"):
        p = shutil.which(tool)
        os.symlink(p, bindir / tool)
    env = base_env(s.home, {"PATH": str(bindir)})
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), env=env, cwd=s.project)
    refused(r, s.marker, "bwrap is not installed")
    r = run(sbxc_argv("exec", "--backend", "bwrap", "--", *s.cmd), env=env, cwd=s.project)
    refused(r, s.marker, "bwrap")


def test_path_became_symlink(setup, tmp_path):
    s = setup
    control(s)
    data = os.path.join(s.project, "data")
    os.rmdir(data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), data)
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "symlink")


def test_folder_on_the_way_became_symlink(bwrap_works, project, home, tmp_path):
    os.makedirs(os.path.join(project, "a", "b"))
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nfilesystem:\n  - mask {project}/a/b\n")
    plan = str(tmp_path / "plan.json")
    assert run(sbxc_argv("compile", "-o", plan), env=base_env(home), cwd=project).rc == 0
    os.rename(os.path.join(project, "a"), os.path.join(project, "a-real"))
    os.symlink(os.path.join(project, "a-real"), os.path.join(project, "a"))
    marker = os.path.join(project, "marker")
    r = run(sbxc_argv("exec", "--plan", plan, "--", "/bin/sh", "-c", f"touch {marker}"), env=base_env(home), cwd=project)
    refused(r, marker, "symlink")


def test_plan_from_another_host(setup, tmp_path):
    s = setup
    control(s)
    pf = json.load(open(s.plan))
    for key, value in (("uid", pf["host"]["uid"] + 4242), ("home", "/home/someone-else"), ("arch", "sparc64")):
        other = dict(pf)
        other["host"] = dict(pf["host"], **{key: value})
        path = str(tmp_path / f"plan-{key}.json")
        with open(path, "w") as f:
            json.dump(other, f)
        r = run(sbxc_argv("exec", "--plan", path, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
        refused(r, s.marker, "recompile")


def test_plan_for_another_bwrap_or_backend(setup, tmp_path):
    s = setup
    pf = json.load(open(s.plan))
    pf["lowered"]["bwrap"] = "/opt/elsewhere/bwrap"
    path = str(tmp_path / "plan-bwrap.json")
    json.dump(pf, open(path, "w"))
    r = run(sbxc_argv("exec", "--plan", path, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "/opt/elsewhere/bwrap")
    r = run(sbxc_argv("exec", "--plan", s.plan, "--network=true", "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "--network")
    if sys.platform != "darwin":
        r = run(sbxc_argv("exec", "--backend", "sandbox-exec", "--", *s.cmd), env=base_env(s.home), cwd=s.project)
        refused(r, s.marker, "macOS")


def test_plan_whose_bwrap_options_share_the_host_network(setup, tmp_path):
    """A plan whose network is off but whose bwrap options lost ``--unshare-net`` (edited,
    or made by a buggy compiler) would share the host's network, with no abstract-socket
    scope either: refused. Control: the same plan as compiled runs."""
    s = setup
    control(s)
    pf = json.load(open(s.plan))
    assert pf["runtime"]["network"] == "off" and "--unshare-net" in pf["lowered"]["argv"]
    pf["lowered"]["argv"] = [a for a in pf["lowered"]["argv"] if a != "--unshare-net"]
    path = str(tmp_path / "plan-shared-net.json")
    json.dump(pf, open(path, "w"))
    r = run(sbxc_argv("exec", "--plan", path, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "share the host's network")
    # Kept, but undone by a later --share-net (bwrap takes the last one).
    argv = json.load(open(s.plan))["lowered"]["argv"]
    pf["lowered"]["argv"] = argv + ["--share-net"]
    json.dump(pf, open(path, "w"))
    r = run(sbxc_argv("exec", "--plan", path, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "share the host's network")


def test_bad_plan_file(setup, tmp_path):
    s = setup
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run(sbxc_argv("exec", "--plan", str(bad), "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker)
    r = run(sbxc_argv("exec", "--plan", str(tmp_path / "nope.json"), "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker)
    r = run(sbxc_argv("exec", "--bogus", "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker)


def test_compile_errors_on_a_miss(setup):
    s = setup
    with open(s.policy, "w") as f:
        f.write("sbxc: 1\nfilesystem:\n  - wirte {project}\n")
    r = run(sbxc_argv("exec", "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "SBX")
    assert "wirte" in r.err


def _outer_bwrap(s, *inner, outer_opts=()):
    """Run ``inner`` inside an outer bwrap that gives it the host's view."""
    bwrap = shutil.which("bwrap")
    return [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--bind", "/tmp", "/tmp", "--bind", "/var/tmp", "/var/tmp", "--bind", s.project, s.project,
            "--bind", s.home, s.home, "--unshare-user", "--die-with-parent", *outer_opts, "--", *inner]


def test_user_namespace_refused(setup):
    s = setup
    control(s)
    # An outer sandbox whose user namespace forbids creating more (max_user_namespaces=0
    # inside it): what a nested container or a locked-down host looks like to bwrap.
    # The cache is off here: as an unprivileged user, the host's root-owned folders show
    # as the overflow uid inside the outer namespace, which the cache checks rightly refuse.
    with open(s.policy, "a") as f:
        f.write("cache:\n  tools: []\n")
    # --policy, not --plan: as an unprivileged user "/" shows as the overflow uid in the
    # outer namespace, and a --plan file on a path whose owners sbxc cannot tell is refused.
    argv = _outer_bwrap(s, *sbxc_argv("exec", "--policy", s.policy, "--", *s.cmd), outer_opts=("--disable-userns",))
    r = run(argv, env=base_env(s.home), cwd=s.project)
    if os.geteuid() == 0:
        # The mapped cause, not only bwrap's own words: "namespace" alone is in both.
        refused(r, s.marker, "refused bwrap a new")
    else:
        # As an unprivileged user the plans folder's owners show as the overflow uid in
        # the outer namespace: the run cannot be recorded in the run journal, so it is
        # refused before bwrap is tried (the root pass checks the mapped bwrap cause).
        refused(r, s.marker, "so this run could not be recorded")
    if os.geteuid() != 0:
        argv = _outer_bwrap(s, *sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), outer_opts=("--disable-userns",))
        refused(run(argv, env=base_env(s.home), cwd=s.project), s.marker, "outside this user namespace")
    # (control: ``control(s)`` above, the same plan outside the outer sandbox. A nested
    # bwrap cannot be the control: the outer one's covered /proc forbids a new proc mount.)


_NO_NETNS = r"""
import os, sys
import pyseccomp as s
f = s.SyscallFilter(s.ALLOW)
CLONE_NEWNET = 0x40000000
f.add_rule(s.ERRNO(1), "clone", s.Arg(0, s.MASKED_EQ, CLONE_NEWNET, CLONE_NEWNET))
f.add_rule(s.ERRNO(1), "unshare", s.Arg(0, s.MASKED_EQ, CLONE_NEWNET, CLONE_NEWNET))
f.add_rule(s.ERRNO(38), "clone3")
f.load()
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_network_namespace_refused_never_falls_back(setup, tmp_path):
    s = setup
    pytest.importorskip("pyseccomp")
    wrapper = tmp_path / "no_netns.py"
    wrapper.write_text(_NO_NETNS)
    env = base_env(s.home)
    # network off (the policy): bwrap cannot make the network namespace -> 125, nothing ran
    r = run([sys.executable, str(wrapper), *sbxc_argv("exec", "--", *s.cmd)], env=env, cwd=s.project)
    refused(r, s.marker, "bwrap")
    # control: with the network on no network namespace is needed, and the command runs
    r = run([sys.executable, str(wrapper), *sbxc_argv("exec", "--network=true", "--", *s.cmd)], env=env, cwd=s.project)
    assert r.rc == 0 and os.path.exists(s.marker), r


def test_plan_in_a_writable_folder_is_refused(setup):
    """A plan the sandbox could rewrite must not be trusted by the next run."""
    s = setup
    inside = os.path.join(s.project, "plan.json")
    shutil.copy(s.plan, inside)
    r = run(sbxc_argv("exec", "--plan", inside, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "rewritten")
    control(s)  # the same plan outside the project runs


def test_current_folder_not_in_the_sandbox(setup, tmp_path):
    """bwrap would fall back to $HOME or / for a folder it cannot see: sbxc refuses instead."""
    s = setup
    masked = os.path.join(s.home, ".ssh")
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), env=base_env(s.home), cwd=masked)
    refused(r, s.marker, "current folder")
    hidden = tmp_path / "under-private-tmp"  # /tmp is a private tmpfs in the plan
    hidden.mkdir()
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", *s.cmd), env=base_env(s.home), cwd=str(hidden))
    refused(r, s.marker, "current folder")
    # control: from a folder of the project, the command runs there
    sub = os.path.join(s.project, "src")
    r = run(sbxc_argv("exec", "--plan", s.plan, "--", "sh", "-c", f"pwd; touch {s.marker}"), env=base_env(s.home), cwd=sub)
    assert r.rc == 0 and r.out == sub + "\n" and os.path.exists(s.marker), r


def test_filter_the_kernel_refuses(setup, tmp_path):
    """A failure in bwrap's last steps (here: loading the seccomp filter, after all mounts)
    is still a refusal, not the command's status 1."""
    s = setup
    pf = json.load(open(s.plan))
    pf["lowered"]["seccomp"] = "ffff000000000000"  # one instruction with an invalid opcode
    bad = str(tmp_path / "plan-bad-filter.json")
    json.dump(pf, open(bad, "w"))
    r = run(sbxc_argv("exec", "--plan", bad, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker, "seccomp")
    control(s)


@pytest.mark.parametrize("damage", ["no-runtime", "argv-not-list", "checks-garbage", "lowered-missing"])
def test_malformed_plan_is_a_refusal(setup, tmp_path, damage):
    s = setup
    pf = json.load(open(s.plan))
    if damage == "no-runtime":
        del pf["runtime"]
    elif damage == "argv-not-list":
        pf["lowered"]["argv"] = 7
    elif damage == "checks-garbage":
        pf["runtime"]["checks"] = [["/", "dir"]]
    else:
        del pf["lowered"]
    bad = str(tmp_path / f"plan-{damage}.json")
    json.dump(pf, open(bad, "w"))
    r = run(sbxc_argv("exec", "--plan", bad, "--", *s.cmd), env=base_env(s.home), cwd=s.project)
    refused(r, s.marker)
    assert "Traceback" not in r.err


def test_a_bwrap_that_exits_0_without_starting_anything_is_125(sbxc):
    """SBXC_BWRAP naming a program that ends at once with 0 (/bin/true, a wrapper that gave
    up): bwrap reports an exit code for every command it ran, so none reported is no command
    run: 125 and one line, never the 0 that said the command ran (it was 0, with no line)."""
    marker = os.path.join(sbxc.project, "ran")
    r = sbxc("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\n", "/bin/sh", "-c", f"touch {marker}",
             env={"SBXC_BWRAP": "/bin/true"})
    assert r.rc == 125, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "bwrap exited with status 0 before the command started" in lines[0], r
    assert not os.path.exists(marker)
    # Control: the real bwrap runs it.
    r = sbxc("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\n", "/bin/sh", "-c", f"touch {marker}")
    assert r.rc == 0 and os.path.exists(marker), r
