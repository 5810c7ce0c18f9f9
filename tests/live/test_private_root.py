"""``$SBXC_ROOT`` moves the default root: the plans folder, the run journal and the default
per-project caches go there and nowhere else; a value that is not a normal absolute path
stops every command before anything runs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SRC, base_env, run, runc_for, sbxc_argv
from support.rootscan import naming

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n"


def _listing(root):
    out = set()
    for dirpath, dirs, files in os.walk(root):
        out.update(os.path.join(dirpath, n) for n in dirs + files)
    return out


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_a_run_keeps_everything_in_the_named_root(backend, bwrap_works, project, home, tmp_path, request):
    runc_for(request)  # an OCI run's bundle lies in the named root's plans folder too
    root = str(tmp_path / "private-root")
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY.format(backend=backend))
    real = f"/var/tmp/sbxc-{os.getuid()}"
    before = _listing(real)
    env = base_env(home, {"SBXC_ROOT": root})
    r = run(sbxc_argv("exec", "--", "sh", "-c", "echo $PIP_CACHE_DIR; ls -A " + real + " | wc -l"), env=env, cwd=project)
    assert r.rc == 0, r
    cache_var, count = r.out.split("\n")[:2]
    assert cache_var.startswith(root + "/"), r.out  # the project's cache lies in the named root
    assert os.path.isdir(os.path.join(root, "plans")) and os.listdir(os.path.join(root, "plans"))
    assert os.stat(root).st_mode & 0o777 == 0o700
    # The run wrote nothing about this project into the caller's real root (the control:
    # the same check sees such a file made there, below).
    from sbxc import cache

    new = _listing(real) - before
    assert naming(new, project) == [] and naming(new, cache.project_id(project)) == []
    r = run(sbxc_argv("cache", "path"), env=env, cwd=project)
    assert r.rc == 0 and r.out.strip().startswith(root + "/"), r


def test_the_listing_sees_a_change_in_the_real_root(tmp_path):
    real = f"/var/tmp/sbxc-{os.getuid()}"
    os.makedirs(real, mode=0o700, exist_ok=True)
    before = _listing(real)
    marker = os.path.join(real, f"listing-control-{os.getpid()}")
    with open(marker, "w") as f:
        f.write(str(tmp_path))
    try:
        assert naming(_listing(real) - before, str(tmp_path)) == [marker]
    finally:
        os.unlink(marker)


@pytest.mark.parametrize("value", ["relative/root", "/var/tmp/../tmp/x", "/var/tmp/x/", "/"])
def test_a_root_that_is_no_normal_absolute_path_stops_exec(value, project, home, tmp_path):
    flag = tmp_path / "ran"
    env = base_env(home, {"SBXC_ROOT": value})
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", "touch", str(flag)), env=env, cwd=project)
    assert r.rc == 125 and not flag.exists(), r
    assert r.err.startswith("sbxc: SBXC_ROOT=") and len(r.err.strip().splitlines()) == 1, r.err
    r = run(sbxc_argv("compile", "--check"), env=env, cwd=project)
    assert r.rc == 2 and "SBXC_ROOT" in r.err, r
