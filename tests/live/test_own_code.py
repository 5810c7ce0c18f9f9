"""sbxc refuses to run when the command could rewrite sbxc's own code.

sbxc runs outside the sandbox, so a planted line in its package would run unsandboxed on
the next ``sbxc exec``. The test builds a real virtualenv holding a copy of sbxc, once
inside the project (which builtin:default makes writable) and once outside it.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC, base_env, run

pytestmark = pytest.mark.live

BACKENDS = ("bwrap", "landlock")


def _venv_with_sbxc(where: str) -> str:
    """A virtualenv at ``where`` with a copy of sbxc in its site-packages; its other
    packages (yaml, lark, ...) come from the test's own environment through a .pth line."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", where], check=True, timeout=60)
    site = glob.glob(os.path.join(where, "lib", "python3*", "site-packages"))[0]
    shutil.copytree(os.path.join(SRC, "sbxc"), os.path.join(site, "sbxc"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write("\n".join(deps) + "\n")
    return site


def _sbxc(venv, project, home, backend, *cmd):
    env = base_env(home)
    env.pop("PYTHONPATH")  # the venv's own copy of sbxc, not the checkout's
    return run([os.path.join(venv, "bin", "python"), "-m", "sbxc", "exec", "--backend", backend, "--", *cmd],
               env=env, cwd=project)


def _available(backend):
    from sbxc.runtime.probe import host_program, landlock_abi, userns_works

    if backend == "landlock":
        return landlock_abi() >= 1
    b = host_program("bwrap", os.environ)[0]
    return bool(b) and userns_works(b)[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_venv_in_project_is_refused_and_nothing_planted(project, home, tmp_path, backend):
    if not _available(backend):
        pytest.fail(f"{backend} is not usable on this host")
    venv = os.path.join(project, ".venv")
    site = _venv_with_sbxc(venv)
    init = os.path.join(site, "sbxc", "__init__.py")
    before = open(init).read()
    marker = tmp_path / "PWNED"
    plant = f"open({str(marker)!r}, 'w').write('x')\n"
    r = _sbxc(venv, project, home, backend, "sh", "-c", f'printf "%s" "$1" >> "$2"', "sh", plant, init)
    assert r.rc == 125, r
    assert r.err.startswith("sbxc: sbxc runs its own code from ") and r.err.count("\n") == 1, r
    assert "install sbxc outside" in r.err
    assert open(init).read() == before
    r = _sbxc(venv, project, home, backend, "true")
    assert r.rc == 125, r
    assert not marker.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_venv_outside_project_runs(project, home, tmp_path, backend):
    if not _available(backend):
        pytest.fail(f"{backend} is not usable on this host")
    venv = str(tmp_path / "tools" / ".venv")
    site = _venv_with_sbxc(venv)
    init = os.path.join(site, "sbxc", "__init__.py")
    before = open(init).read()
    r = _sbxc(venv, project, home, backend, "sh", "-c", "echo ok > out.txt && cat out.txt")
    assert (r.rc, r.out) == (0, "ok\n"), r
    # The same plant attempt on the venv outside: the sandbox cannot write there.
    r = _sbxc(venv, project, home, backend, "sh", "-c", 'echo "raise SystemExit(3)" >> "$1"', "sh", init)
    assert r.rc != 0, r
    assert open(init).read() == before
