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

BACKENDS = ("bwrap", "landlock", "oci")


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
    if backend == "oci":
        return bool(host_program("runc", os.environ)[0])
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_library_folder_on_ld_library_path_in_the_project_is_refused(project, home, tmp_path, backend):
    """The dynamic loader reads LD_LIBRARY_PATH before the interpreter runs: a folder on it
    that the plan lets the command write is a place to plant a library (a libz.so.1 there)
    that the next sbxc run maps unsandboxed. Refused like a writable package folder (125,
    one line naming it); an empty entry is the current folder. The controls: the same run
    with that folder off LD_LIBRARY_PATH (or with a folder outside the project on it) runs."""
    if not _available(backend):
        pytest.fail(f"{backend} is not usable on this host")
    libs = os.path.join(project, "libs")
    os.mkdir(libs)
    outside = tmp_path / "outside-libs"
    outside.mkdir()

    def go(value):
        env = base_env(home, {"LD_LIBRARY_PATH": value} if value is not None else None)
        return run([sys.executable, "-m", "sbxc", "exec", "--backend", backend, "--", "true"], env=env, cwd=project)

    for value in (libs, f"{outside}:{libs}", f"{outside}:"):
        r = go(value)
        assert r.rc == 125 and "sbxc runs its own code from " in r.err and r.err.count("\n") == 1, (value, r)
        assert (libs if value != f"{outside}:" else project) in r.err, (value, r)
    assert go(None).rc == 0  # the controls
    assert go(str(outside)).rc == 0


def test_a_plan_that_writes_the_loaders_files_is_refused(project, home):
    """`write /etc` would let a command make /etc/ld.so.preload, which the loader maps into
    every program, sbxc's next start among them. Refused; the control: `read /etc` runs."""
    if not _available("bwrap"):
        pytest.fail("bwrap is not usable on this host")
    for access, want in (("write", 125), ("read", 0)):
        with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
            f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: false\nfilesystem:\n  - {access} /etc\n")
        r = run([sys.executable, "-m", "sbxc", "exec", "--backend", "bwrap", "--", "true"], env=base_env(home),
                cwd=project)
        assert r.rc == want, (access, r)
        if want:
            assert "/etc/ld.so" in r.err, r
