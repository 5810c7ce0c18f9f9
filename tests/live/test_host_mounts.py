"""A mount the host makes while a sandboxed command runs does not appear inside.

bwrap makes every mount of its namespace a slave of the host's, and so does runc by
default: a mount the host adds later under a shared mount (an automount, a USB stick,
another container's overlay) propagated in, with its own options, writable under a `read`
rule that the report calls enforced. Now runc's config asks for private mounts
(``rootfsPropagation: rprivate``), and bwrap runs inside a mount namespace whose mounts are
private (``unshare --mount``, with a user namespace of the caller's for a plain user); under
Landlock the rules are on the paths and hold over a new mount anyway.

The test makes a shared tmpfs under /var/tmp (which `read /` shows read-only), starts the
command (which waits for a go file in the project), mounts a writable tmpfs beneath the
shared one on the host, lets the command try to write there, and looks at what reached the
host's new mount. Controls: bwrap started directly, and the OCI bundle that ``sbxc compile
--backend oci -o`` writes without the key under raw runc: the write lands. Root only: it
mounts on the host.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import base_env, run, runc_for, sbxc_argv

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


def _probe(project: str, d: str) -> str:
    """The command: says it started, waits for the go file, tries the write beneath ``d``."""
    return "touch " + os.path.join(project, "started") + "; " + PROBE.format(go=os.path.join(project, "go"), d=d)


def _run_probe(argv: list, project: str, d: str, **kw) -> tuple:
    """Start ``argv`` (which runs ``_probe``), mount beneath ``d`` once it started, and
    return (status, stdout, stderr); the process is killed if anything fails on the way."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    try:
        _mount_beneath_when_started(project, d, proc, os.path.join(project, "started"))
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("backend", ["bwrap", "oci", "landlock"])
def test_a_host_mount_made_during_the_run_stays_out(sbxc, shared, backend, request):
    runc_for(request)
    project, d = sbxc.project, shared
    pol = os.path.join(project, "sandbox.policy.yaml")
    with open(pol, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n")
    rc, out, err = _run_probe(sbxc_argv("exec", "--policy", pol, "--", "sh", "-c", _probe(project, d)), project, d,
                              env=base_env(sbxc.home), cwd=project)
    assert rc == 0, err
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
    cfg["process"]["args"] = ["sh", "-c", _probe(project, d)]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    state = str(tmp_path / "state")
    os.mkdir(state, 0o700)
    _rc, out, err = _run_probe([runc, "--root", state, "run", "--bundle", bundle, "sbxc-prop-" + uuid.uuid4().hex[:8]],
                               project, d, cwd=bundle)
    assert out.decode().strip() == "wrote", (out, err)
    assert open(os.path.join(d, "sub", "w")).read() == "PWNED\n"


def _bwrap_alone(bwrap: str, project: str, d: str) -> tuple:
    """The probe under bwrap started directly (no private namespace around it)."""
    _rc, out, err = _run_probe([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--bind", project,
                                project, "--dev", "/dev", "--proc", "/proc", "--", "sh", "-c", _probe(project, d)],
                               project, d)
    return out, err


def test_control_bwrap_alone_lets_the_mount_in(bwrap_works, sbxc, shared):
    out, err = _bwrap_alone(bwrap_works, sbxc.project, shared)
    assert out.decode().strip() == "wrote", (out, err)
    assert open(os.path.join(shared, "sub", "w")).read() == "PWNED\n"


def test_without_a_shared_mount_nothing_reaches_bwrap_alone(bwrap_works, sbxc):
    """Why the bwrap runner needs no private namespace where no mount is shared (it then
    starts bwrap directly, saving unshare's start): bwrap's copy of a private mount is
    private, and a mount the host makes beneath it later stays out. The same probe as the
    control above, with the folder private instead of shared."""
    import tempfile

    d = tempfile.mkdtemp(prefix="sbxc-test-private-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "sbxc-test", d], check=True)
    try:
        subprocess.run(["mount", "--make-private", d], check=True)
        os.mkdir(os.path.join(d, "sub"))
        out, err = _bwrap_alone(bwrap_works, sbxc.project, d)
        assert out.decode().strip() == "refused", (out, err)
        assert not os.path.exists(os.path.join(d, "sub", "w"))
    finally:
        subprocess.run(["umount", "-R", d], check=False)
        os.rmdir(d)
