"""On bwrap the core starts bwrap first and makes the run's last checks (sbxc's own code out
of the command's reach, the run's journal record) while bwrap sets the sandbox up. The
command waits for the seccomp program, which sbxc writes only once those checks passed.
On OCI runc waits for its config.json, a FIFO that sbxc fills only then (runtime/oci_gate).
These tests kill sbxc in that window and look for any trace of the command having run.
"""
import os
import signal
import time

import pytest

from conftest import PYTHON, base_env, processes_naming, reap_the_killed_oci_run, run

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nnetwork: false\n"

# sbxc's exec with the journal record's writer replaced: it waits until bwrap has set the
# sandbox up (its seccomp pipe is then the only thing the command waits for), then either
# kills sbxc itself (SIGKILL: no clean-up of any kind) or goes on as usual.
DRIVER = r"""
import os, signal, sys, time
import sbxc.runtime.journal as journal
real_begin = journal.begin
def begin(roots):
    time.sleep(0.5)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return real_begin(roots)
journal.begin = begin
from sbxc.commands.exec import exec_entry
exec_entry(sys.argv[2:])
"""


GATED = ["bwrap", "oci"]


@pytest.fixture
def gated(request, bwrap_works):
    """The backend under test; for OCI, runc must be there (the set-up installs it)."""
    backend = request.param
    if backend == "oci":
        from conftest import find_runc

        find_runc()
    return backend


def _policy(backend):
    return POLICY.replace("backend: bwrap", f"backend: {backend}")


def _drive(mode, project, home, marker, backend="bwrap"):
    env = base_env(home)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(_policy(backend))
    cmd = ["sh", "-c", f'echo ran > "{marker}"']
    first = run([PYTHON, "-m", "sbxc", "exec", "--", "true"], env=env, cwd=project)  # the plan, cached
    assert first.rc == 0, first
    return run([PYTHON, "-c", DRIVER, mode, "--", *cmd], env=env, cwd=project)


@pytest.mark.parametrize("gated", GATED, indirect=True)
def test_killed_before_release_command_never_runs(gated, project, home):
    marker = os.path.join(project, "MARKER")
    r = _drive("kill", project, home, marker, gated)
    assert r.rc == -signal.SIGKILL, r
    # bwrap dies with its parent (PR_SET_PDEATHSIG), and the child waiting for the program
    # reads an empty one; runc reads end of file for its config. Give a command that did
    # start more than enough time to show.
    time.sleep(1.0)
    assert not os.path.exists(marker), "the command ran although sbxc never released it"
    assert not processes_naming(marker)
    if gated == "oci":
        # runc read end of file for its config and ended, having made nothing.
        assert not [p for p in processes_naming(base_env(home)["SBXC_ROOT"]) if b"runc" in _cmdline(p)]
        reap_the_killed_oci_run(base_env(home)["SBXC_ROOT"])


def _cmdline(pid) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_reaper_ends_a_runc_left_waiting_for_its_config(tmp_path):
    """sbxc killed before runc even opened its config FIFO leaves runc blocked in that
    open, with no writer left. The next run's reaper of stale per-run folders opens the
    FIFO for writing and closes it: runc reads end of file and ends, having made nothing,
    and the folder goes. Control: before the reaper, runc is still waiting."""
    import subprocess

    from conftest import find_runc
    from sbxc.layout import RUN_DIR_PREFIX
    from sbxc.runtime import rundirs

    runc = find_runc()
    base = tmp_path / "base"
    run_dir = base / (RUN_DIR_PREFIX + "0123456789abcdef")
    run_dir.mkdir(parents=True)
    os.mkfifo(run_dir / "config.json", 0o600)
    argv = [runc, "--root", str(run_dir)] + (["--rootless", "true"] if os.geteuid() else [])
    p = subprocess.Popen(argv + ["run", "--bundle", str(run_dir), "stuck"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        assert p.poll() is None, "runc should be waiting to open its config"  # the control
        old = time.time() - 2 * rundirs.STALE_AFTER
        os.utime(run_dir, (old, old))
        assert rundirs.reap_run_dirs(str(base)) == 1
        assert p.wait(timeout=10) == 1
        assert b"EOF" in p.stderr.read()
        assert not run_dir.exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("gated", GATED, indirect=True)
def test_control_released_command_runs(gated, project, home):
    marker = os.path.join(project, "MARKER")
    r = _drive("go", project, home, marker, gated)
    assert r.rc == 0, r
    assert open(marker).read() == "ran\n"


@pytest.mark.parametrize("gated", GATED, indirect=True)
def test_refusal_after_bwrap_started_leaves_no_process(gated, project, home, tmp_path):
    """A check that refuses after bwrap (runc) was started (here: the journal cannot be
    written) ends it before the command, says so in one line, and exits 125."""
    env = base_env(home)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(_policy(gated))
    assert run([PYTHON, "-m", "sbxc", "exec", "--", "true"], env=env, cwd=project).rc == 0
    marker = os.path.join(project, "MARKER")
    driver = (
        "import sys\n"
        "import sbxc.runtime.journal as journal\n"
        "from sbxc.runtime.errors import Refusal\n"
        "def begin(roots):\n"
        "    raise Refusal('this run could not be recorded (test)', 'free some space')\n"
        "journal.begin = begin\n"
        "from sbxc.commands.exec import exec_entry\n"
        "exec_entry(sys.argv[1:])\n")
    r = run([PYTHON, "-c", driver, "--", "sh", "-c", f'echo ran > "{marker}"; sleep 30'], env=env, cwd=project)
    assert r.rc == 125, r
    assert r.err == "sbxc: this run could not be recorded (test); free some space\n", r
    time.sleep(0.5)
    assert not os.path.exists(marker)
    # No bwrap of this run is left (its child would hold the project folder open).
    assert not processes_naming(marker)


def _entry_for(project, env):
    """The plan cache's entry for the project's policy (the newest p- entry of the root)."""
    import glob
    import marshal

    root = env["SBXC_ROOT"]
    entries = sorted(glob.glob(os.path.join(root, "plans", "p-*")), key=os.path.getmtime)
    assert entries, os.listdir(root)
    with open(entries[-1], "rb") as f:
        return entries[-1], marshal.loads(f.read())


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_plan_of_other_compiler_code_is_compiled_again_and_run_once(bwrap_works, project, home, tmp_path, backend):
    """The compiler's code is checked in the run's last checks (on bwrap while bwrap sets
    up): a cached plan made by other code is compiled anew and the command runs exactly
    once, from the new plan. Control: with the code unchanged the entry is used as it is."""
    import shutil

    from conftest import SRC

    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "sbxc"), src / "sbxc", ignore=shutil.ignore_patterns("__pycache__"))
    env = base_env(home)
    env["PYTHONPATH"] = str(src)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY.replace("backend: bwrap", f"backend: {backend}"))
    count = os.path.join(project, "COUNT")
    cmd = [PYTHON, "-m", "sbxc", "exec", "--", "sh", "-c", f'echo x >> "{count}"']
    assert run(cmd, env=env, cwd=project).rc == 0
    path, first = _entry_for(project, env)
    made = os.stat(path).st_mtime_ns
    # Control: unchanged code, the same entry serves (not rewritten).
    r = run(cmd, env=env, cwd=project)
    assert r.rc == 0, r
    assert os.stat(path).st_mtime_ns == made
    # The compiler changes (a file grows): the next run compiles again, runs once.
    with open(src / "sbxc" / "compiler" / "normalize.py", "a") as f:
        f.write("# changed\n")
    r = run(cmd, env=env, cwd=project)
    assert r.rc == 0, r
    path2, second = _entry_for(project, env)
    assert path2 == path and os.stat(path).st_mtime_ns != made
    assert second["code"] != first["code"] and "normalize.py" in second["code"]
    assert open(count).read() == "x\nx\nx\n", "the command must run exactly once per exec"
