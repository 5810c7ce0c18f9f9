"""The policy ``sbxc init`` writes, run for real (bwrap, and Landlock + seccomp where the
kernel has ABI 6): from inside, the command writes the project but cannot change git's
hooks or config, and cannot reach a loopback server of the test's own on the host; the
same probes run unsandboxed succeed (the control)."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import SANDBOX_PYTHON, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

PROBE = r"""
import os, socket, sys
port = int(sys.argv[1])
def attempt(what, fn):
    try:
        fn()
        print(what, "ok")
    except OSError as e:
        print(what, "refused", e.errno)
def write(path):
    with open(path, "w") as f:
        f.write("x\n")
attempt("project", lambda: write("built.txt"))
attempt("hook", lambda: write(".git/hooks/pre-commit"))
attempt("config", lambda: write(".git/config"))
attempt("net", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
"""


def _landlock_abi() -> int:
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi()


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_the_starter_policy_protects_git_and_turns_the_network_off(project, home, tcp_server, backend, request):
    if backend == "bwrap":
        request.getfixturevalue("bwrap_works")
    elif _landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {_landlock_abi()} here; the Landlock case needs 6")
    for name in ("pyproject.toml", "package.json"):
        open(os.path.join(project, name), "w").close()
    env = base_env(home)
    r = run(sbxc_argv("init"), env=env, cwd=project)
    assert r.rc == 0, r
    probe = os.path.join(project, "probe.py")
    with open(probe, "w") as f:
        f.write(PROBE)
    port = str(tcp_server.port)

    control = subprocess.run([SANDBOX_PYTHON, probe, port], cwd=project, capture_output=True, text=True, timeout=60)
    assert control.stdout.split("\n")[:4] == ["project ok", "hook ok", "config ok", "net ok"], control
    os.unlink(os.path.join(project, ".git", "hooks", "pre-commit"))
    with open(os.path.join(project, ".git", "config"), "w") as f:
        f.write("[core]\n")

    r = run(sbxc_argv("exec", "--backend", backend, "--", SANDBOX_PYTHON, probe, port), env=env, cwd=project)
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert lines[0] == "project ok", r
    assert lines[1].startswith("hook refused") and lines[2].startswith("config refused"), r
    assert lines[3].startswith("net refused"), r
    assert not os.path.exists(os.path.join(project, ".git", "hooks", "pre-commit"))
    assert open(os.path.join(project, ".git", "config")).read() == "[core]\n"
