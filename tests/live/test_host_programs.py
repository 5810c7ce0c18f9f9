"""sbxc never starts a program from a folder a sandboxed command could write (SPEC §5).

The caller's PATH starts with a folder the caller can write (what an activated project
venv's bin/ is) holding a fake ``bwrap`` that leaves a marker outside when it runs. Every
sbxc path that starts bwrap is taken: a plan-cache miss (the host probe runs
``bwrap --version`` and a namespace trial), a hit, both backends (Landlock probes bwrap
too on a miss), and ``sbxc doctor``. The marker must never appear; each run either uses
the system's bwrap or refuses (125) naming the fake. The control runs the fake directly
and sees the marker, so the test can see an escape.
"""
import os
import stat
import subprocess

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live


@pytest.fixture
def fake(tmp_path, bwrap_works):
    bindir = tmp_path / "venv-bin"
    bindir.mkdir()
    marker = tmp_path / "outside" / "fake-bwrap-ran"
    marker.parent.mkdir()
    prog = bindir / "bwrap"
    prog.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\nexit 0\n")
    prog.chmod(0o755)
    # control: run directly, the fake does leave its marker
    subprocess.run([str(prog), "--version"], check=True)
    assert marker.exists()
    marker.unlink()

    class Fake:
        pass

    f = Fake()
    f.bindir, f.prog, f.marker, f.system = str(bindir), str(prog), str(marker), bwrap_works
    return f


def _env(home, fake, path):
    return base_env(home, {"PATH": path})


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_planted_bwrap_first_on_path_never_runs(fake, project, home, backend):
    from sbxc.runtime.probe import landlock_abi

    if backend == "landlock" and landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    env = _env(home, fake, fake.bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    for attempt in ("miss", "hit"):
        r = run(sbxc_argv("exec", "--backend", backend, "--", "/bin/sh", "-c", "echo inside"), env=env, cwd=project)
        assert r.rc == 0 and r.out == "inside\n", (attempt, r)
        assert not os.path.exists(fake.marker), (attempt, open(fake.marker).read())
    if backend == "bwrap":
        # the run went through the system's bwrap: a PID namespace of its own
        r = run(sbxc_argv("exec", "--backend", "bwrap", "--", "/bin/sh", "-c", "echo $$"), env=env, cwd=project)
        assert r.rc == 0 and int(r.out.split()[-1]) < 10, r
    assert not os.path.exists(fake.marker)


def test_only_a_planted_bwrap_is_refused_naming_it(fake, project, home):
    env = _env(home, fake, fake.bindir)
    r = run(sbxc_argv("exec", "--backend", "bwrap", "--", "/bin/true"), env=env, cwd=project)
    assert r.rc == 125, r
    assert fake.prog in r.err and r.err.startswith("sbxc: "), r
    assert not os.path.exists(fake.marker)
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() > 0:
        # Landlock needs no bwrap: the probe on the miss must not run the fake either
        r = run(sbxc_argv("exec", "--backend", "landlock", "--", "/bin/sh", "-c", "echo inside"), env=env, cwd=project)
        assert r.rc == 0 and r.out == "inside\n", r
        assert not os.path.exists(fake.marker)


@pytest.mark.parametrize("path_first", [True, False], ids=["fake-first", "fake-only"])
def test_doctor_never_runs_a_planted_bwrap(fake, project, home, path_first):
    path = fake.bindir + (":" + os.environ.get("PATH", "/usr/bin:/bin") if path_first else "")
    r = run(sbxc_argv("doctor"), env=_env(home, fake, path), cwd=project)
    assert not os.path.exists(fake.marker), r
    assert "Traceback" not in r.err, r
    assert fake.prog in r.out, r  # doctor says which bwrap it passed over
    if path_first:
        assert f"bwrap: {fake.system}," in r.out, r


def test_sbxc_bwrap_names_the_program_and_is_checked(fake, project, home, tmp_path):
    base_path = os.environ.get("PATH", "/usr/bin:/bin")
    env = base_env(home, {"PATH": base_path, "SBXC_BWRAP": fake.system})
    r = run(sbxc_argv("exec", "--backend", "bwrap", "--", "/bin/true"), env=env, cwd=project)
    assert r.rc == 0, r
    # a folder others (or the group) can write: anyone there could replace the program
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    prog = shared / "bwrap"
    prog.write_text(open(fake.prog).read())
    prog.chmod(0o755)
    os.chmod(shared, 0o777 & ~stat.S_ISVTX)
    for value in (str(prog), "bwrap", str(tmp_path / "missing" / "bwrap")):
        env = base_env(home, {"PATH": base_path, "SBXC_BWRAP": value})
        r = run(sbxc_argv("exec", "--backend", "bwrap", "--", "/bin/true"), env=env, cwd=project)
        assert r.rc == 125 and "SBXC_BWRAP" in r.err and value in r.err, (value, r)
        assert not os.path.exists(fake.marker), value
