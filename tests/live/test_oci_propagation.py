"""A mount the host makes while an OCI run's command runs does not appear inside it.

runc's default makes the container's mounts slaves of the host's: a mount the host adds
later under a shared mount (an automount, a USB stick, another container's overlay)
propagated in, with its own options, writable under a `read` rule that the report calls
enforced. The config asks for private mounts (``rootfsPropagation: rprivate``).

The test makes a shared tmpfs, starts the command (which waits for a go file in the
project), mounts a writable tmpfs beneath the shared one on the host, lets the command try
to write there, and looks at what reached the host's new mount. Control: the same bundle,
as ``sbxc compile --backend oci -o`` writes it but without the key, under raw runc: the
write lands. Root only: it mounts on the host.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = [pytest.mark.live, pytest.mark.root_only]

PROBE = ('while [ ! -e "{go}" ]; do sleep 0.05; done; '
         'echo PWNED > "{d}/sub/w" 2>/dev/null && echo wrote || echo refused')


@pytest.fixture
def shared():
    # Under /var/tmp, which `read /` shows read-only (builtin:default's /tmp is a private tmpfs).
    import tempfile

    d = tempfile.mkdtemp(prefix="sbxc-test-shared-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "sbxc-test", d], check=True)
    subprocess.run(["mount", "--make-shared", d], check=True)
    os.mkdir(os.path.join(d, "sub"))
    yield d
    subprocess.run(["umount", "-R", d], check=False)
    os.rmdir(d)


def _mount_beneath_when_started(project: str, d: str, proc: subprocess.Popen, started: str) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(started) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(started), ("the command never started", proc.poll(), proc.stderr.read() if proc.poll() is not None else b"")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0777", "sbxc-test-later", os.path.join(d, "sub")], check=True)
    with open(os.path.join(project, "go"), "w"):
        pass


def test_a_host_mount_made_during_the_run_stays_out(runc, sbxc, shared):
    project, d = sbxc.project, shared
    started = os.path.join(project, "started")
    go = os.path.join(project, "go")
    pol = os.path.join(project, "sandbox.policy.yaml")
    with open(pol, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: false\n")
    cmd = "touch " + started + "; " + PROBE.format(go=go, d=d)
    proc = subprocess.Popen(sbxc_argv("exec", "--policy", pol, "--", "sh", "-c", cmd), env=base_env(sbxc.home),
                            cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _mount_beneath_when_started(project, d, proc, started)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.decode().strip() == "refused", (out, err)
    assert not os.path.exists(os.path.join(d, "sub", "w"))


def test_control_runc_default_propagation_lets_the_mount_in(runc, sbxc, shared, tmp_path):
    project, d = sbxc.project, shared
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: false\n")
    # A run first: it makes the project's cache folder, which the bundle binds.
    r = run(sbxc_argv("exec", "--", "true"), env=base_env(sbxc.home), cwd=project)
    assert r.rc == 0, r
    bundle = str(tmp_path / "bundle")
    r = run(sbxc_argv("compile", "--backend", "oci", "-o", bundle), env=base_env(sbxc.home), cwd=project)
    assert r.rc == 0, r
    cfg_path = os.path.join(bundle, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    assert cfg["linux"].pop("rootfsPropagation") == "rprivate"  # what the fix added, taken out again
    started = os.path.join(project, "started")
    cfg["process"]["args"] = ["sh", "-c", "touch " + started + "; " + PROBE.format(go=os.path.join(project, "go"), d=d)]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    state = str(tmp_path / "state")
    os.mkdir(state, 0o700)
    proc = subprocess.Popen([runc, "--root", state, "run", "--bundle", bundle, "sbxc-prop-" + uuid.uuid4().hex[:8]],
                            cwd=bundle, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _mount_beneath_when_started(project, d, proc, started)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.decode().strip() == "wrote", (out, err)
    assert open(os.path.join(d, "sub", "w")).read() == "PWNED\n"
