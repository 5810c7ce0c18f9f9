"""The plan cache stays bounded (by age, count and size) without ever dropping a taint or
the run journal; ``sbxc doctor`` shows it; ``sbxc cache clear`` removes its plans, for one
project or all of them. Through the real command line, each test in a root of its own."""
import os
import time

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
PLANTED = "sbxc: 1\nextends: [builtin:default]\nnetwork: true\n"


@pytest.fixture
def world(bwrap_works, tmp_path, home):
    """Two projects with a policy each, and an environment whose SBXC_ROOT is this test's."""
    root = str(tmp_path / "root")
    projects = []
    for name in ("one", "two"):
        p = tmp_path / name
        p.mkdir()
        (p / "sandbox.policy.yaml").write_text(POLICY)
        projects.append(str(p.resolve()))
    env = base_env(home, {"SBXC_ROOT": root})
    return env, projects, os.path.join(root, "plans")


def sbxc(env, cwd, *args):
    return run(sbxc_argv(*args), env=env, cwd=cwd)


def plans(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith(("p-", "f-")))


def kind(folder, prefix):
    return sorted(n for n in os.listdir(folder) if n.startswith(prefix))


def test_doctor_shows_the_plan_cache_and_clear_project_removes_only_its_plans(world):
    env, (one, two), folder = world
    for p in (one, two):
        r = sbxc(env, p, "exec", "--", "true")
        assert r.rc == 0, r
    assert len(plans(folder)) == 2
    r = sbxc(env, one, "doctor")
    assert f"plan cache in {folder}:" in r.out, r
    assert "  plans:     2, " in r.out, r
    assert "  limits:    256 plans, 16.0 MiB, 14 days" in r.out, r

    before = set(plans(folder))
    r = sbxc(env, two, "cache", "clear", "--project", one)
    assert r.rc == 0, r
    assert f"cleared 1 cached plan(s) of {one} in {folder}" in r.out, r
    left = set(plans(folder))
    assert len(left) == 1 and left < before
    # What is left is two's: its next run is a hit (no compile: the entry's mtime stays).
    (name,) = left
    mtime = os.stat(os.path.join(folder, name)).st_mtime_ns
    r = sbxc(env, two, "exec", "--", "true")
    assert r.rc == 0, r
    assert os.stat(os.path.join(folder, name)).st_mtime_ns == mtime
    # One's next run compiles its plan again.
    r = sbxc(env, one, "exec", "--", "true")
    assert r.rc == 0 and len(plans(folder)) == 2, r


def test_clear_all_keeps_the_taints_and_the_journal_so_a_planted_policy_stays_refused(world):
    env, (one, _two), folder = world
    policy = os.path.join(one, "sandbox.policy.yaml")
    # The command rewrites its own policy (the project is writable): a taint is recorded.
    r = sbxc(env, one, "exec", "--", "sh", "-c", f"printf '{PLANTED}' > sandbox.policy.yaml")
    assert r.rc == 0 and "changed while the command ran" in r.err, r
    taints = kind(folder, "t-")
    journal = kind(folder, "j-")
    assert taints and journal
    r = sbxc(env, one, "cache", "clear", "--all")
    assert r.rc == 0, r
    assert f"cleared 1 cached plan(s) in {folder}; kept the run journal and 1 taint(s)" in r.out, r
    assert plans(folder) == []
    assert kind(folder, "t-") == taints and kind(folder, "j-") == journal
    # The planted policy is still refused after the clear.
    r = sbxc(env, one, "exec", "--", "true")
    assert r.rc == 125, r
    assert f"the policy {policy} was written by a sandboxed command" in r.err, r
    r = sbxc(env, one, "doctor")
    assert "  plans:     none" in r.out and "  kept:      1 taint(s)" in r.out, r


def _plant(folder, name, size, age_s):
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    t = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(t, t))


def test_a_miss_prunes_old_and_surplus_plans_and_nothing_else(world):
    env, (one, two), folder = world
    r = sbxc(env, one, "exec", "--", "true")  # makes the folder and one's plan
    assert r.rc == 0, r
    kept_records = sorted(os.listdir(folder))
    # A taint and an acceptance record older than any limit (the run journal's own files
    # are in kept_records): never pruned. (A run record is left out: an unreadable one
    # stands for a run that could have written anywhere, and refuses every policy.)
    _plant(folder, "t-" + "0" * 64, 100, 400 * 86400)
    _plant(folder, "a-" + "1" * 64, 100, 400 * 86400)
    for name in kept_records:
        t = time.time_ns() - 400 * 86400 * 10**9
        os.utime(os.path.join(folder, name), ns=(t, t))
    _plant(folder, "p-expired", 100, 15 * 86400)  # past the age limit
    _plant(folder, ".tmp-1-dead", 100, 2 * 3600)  # a write that died
    _plant(folder, ".tmp-2-young", 100, 1)  # may be a write in progress
    # Past the entry limit: 300 recent plans of 1 KiB, the oldest ones older.
    for i in range(300):
        _plant(folder, f"p-{i:03d}", 1024, 3600 + (300 - i))
    r = sbxc(env, two, "exec", "--", "true")  # a miss: compiles and prunes
    assert r.rc == 0, r
    names = set(os.listdir(folder))
    assert {"t-" + "0" * 64, "a-" + "1" * 64, ".tmp-2-young"} <= names
    journal = [n for n in kept_records if not n.startswith(("p-", "f-"))]
    assert journal and set(journal) <= names  # the journal's files, 400 days old: kept
    assert "p-expired" not in names and ".tmp-1-dead" not in names
    left = plans(folder)
    assert len(left) == 192, len(left)
    # The least recently compiled went first.
    assert "p-000" not in names and "p-299" in names
    r = sbxc(env, two, "exec", "--", "true")  # two's plan survived: a hit
    assert r.rc == 0 and len(plans(folder)) == 192, r


def test_the_size_limit_prunes_big_plans(world):
    env, (one, two), folder = world
    r = sbxc(env, one, "exec", "--", "true")
    assert r.rc == 0, r
    for i in range(20):  # 20 MiB of plans: past 16 MiB
        _plant(folder, f"p-big{i:02d}", 1 << 20, 3600 + (20 - i))
    r = sbxc(env, two, "exec", "--", "true")
    assert r.rc == 0, r
    total = sum(os.stat(os.path.join(folder, n)).st_size for n in plans(folder))
    assert total <= 12 << 20, total
    assert "p-big00" not in os.listdir(folder) and "p-big19" in os.listdir(folder)


def test_a_hit_does_not_prune(world):
    env, (one, _two), folder = world
    r = sbxc(env, one, "exec", "--", "true")
    assert r.rc == 0, r
    _plant(folder, "p-expired", 100, 15 * 86400)
    r = sbxc(env, one, "exec", "--", "true")  # a hit: the folder is not listed
    assert r.rc == 0, r
    assert "p-expired" in os.listdir(folder)
