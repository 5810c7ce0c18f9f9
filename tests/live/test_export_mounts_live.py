"""The Kubernetes export's mounts of the project's volume claim, applied for real: each
``volumeMount`` of the claim becomes a bind mount of the claim's folder (its ``subPath``)
at its ``mountPath``, in the workload's order, read-only where it says so, the way the
kubelet and the container runtime mount them; bwrap makes them here (no cluster needed).

The attack: ``read {project}/.git/hooks`` is a read-only mount inside the writable claim.
Renaming ``.git`` moves that mount along with it, and the command makes ``.git/hooks`` anew
in the claim, with a hook of its own that the next Pod's git runs. The export makes the
folders between the claim and such a mount mounts of the claim too (``pin`` in
sbxc/commands/export.py), so the rename fails (EBUSY). Control: the same mounts without
those pins let the attack through, so the probe can see it.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess

import pytest
import yaml

from conftest import base_env

pytestmark = pytest.mark.live

POLICY = ("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
          "filesystem:\n  - read {project}/.git/hooks\n  - read {project}/.git/config\n")
ATTACK = ("mv .git .git-old; mkdir -p .git/hooks; echo evil > .git/hooks/pre-commit; "
          "printf '[core]\\n\\tfsmonitor=/tmp/evil\\n' > .git/config; cat .git/hooks/pre-commit")


def _claim_mounts(project: str, home: str) -> list:
    from sbxc.commands import export
    from sbxc.runtime.probe import probe_host

    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    env = base_env(home)
    out, err = io.StringIO(), io.StringIO()
    code = export.run(["kubernetes"], cwd=project, environ=env, host=None, probe=probe_host, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    pod = list(yaml.safe_load_all(out.getvalue()))[-1]["spec"]
    (claim,) = [v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    return [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim]


def _attack(bwrap: str, claim_dir: str, project: str, mounts: list) -> subprocess.CompletedProcess:
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for m in mounts:
        src = os.path.join(claim_dir, m.get("subPath", "")) if m.get("subPath") else claim_dir
        if not os.path.lexists(src):
            os.makedirs(src)  # the kubelet makes a missing subPath
        argv += ["--ro-bind" if m["readOnly"] else "--bind", src, m["mountPath"]]
    argv += ["--chdir", project, "--", "sh", "-c", ATTACK]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _claim(tmp_path, project: str) -> str:
    claim = str(tmp_path / "claim")
    shutil.copytree(project, claim, symlinks=True)
    return claim


def test_renaming_a_folder_above_a_read_only_mount_of_the_claim_fails(bwrap_works, project, home, tmp_path):
    os.makedirs(os.path.join(project, ".git", "hooks"), exist_ok=True)
    with open(os.path.join(project, ".git", "hooks", "pre-commit"), "w") as f:
        f.write("orig\n")
    mounts = _claim_mounts(project, home)
    paths = [m["mountPath"] for m in mounts]
    assert project + "/.git" in paths and paths.index(project + "/.git") < paths.index(project + "/.git/hooks"), paths

    claim = _claim(tmp_path, project)
    r = _attack(bwrap_works, claim, project, mounts)
    assert "busy" in r.stderr.lower(), r  # mv: cannot move '.git': Device or resource busy
    assert not os.path.exists(os.path.join(claim, ".git-old"))
    assert open(os.path.join(claim, ".git", "hooks", "pre-commit")).read() == "orig\n"
    assert open(os.path.join(claim, ".git", "config")).read() == "[core]\n"

    # Control: without the pins (the writable mounts of folders no rule names) the rename
    # goes through and the claim holds the command's hook and config at the guarded paths.
    bare = [m for m in mounts if m["readOnly"] or not m.get("subPath")]
    assert len(bare) < len(mounts)
    claim = _claim(tmp_path / "control", project)
    r = _attack(bwrap_works, claim, project, bare)
    assert r.returncode == 0 and r.stdout == "evil\n", r
    assert open(os.path.join(claim, ".git", "hooks", "pre-commit")).read() == "evil\n"
    assert "fsmonitor" in open(os.path.join(claim, ".git", "config")).read()
