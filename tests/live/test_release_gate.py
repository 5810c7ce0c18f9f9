"""On bwrap the core starts bwrap first and makes the run's last checks (sbxc's own code out
of the command's reach, the run's journal record) while bwrap sets the sandbox up. The
command waits for the seccomp program, which sbxc writes only once those checks passed:
these tests kill sbxc in that window and look for any trace of the command having run.
"""
import os
import signal
import time

import pytest

from conftest import PYTHON, base_env, run

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


def _drive(mode, project, home, marker):
    env = base_env(home)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    cmd = ["sh", "-c", f'echo ran > "{marker}"']
    first = run([PYTHON, "-m", "sbxc", "exec", "--", "true"], env=env, cwd=project)  # the plan, cached
    assert first.rc == 0, first
    return run([PYTHON, "-c", DRIVER, mode, "--", *cmd], env=env, cwd=project)


def test_killed_before_release_command_never_runs(bwrap_works, project, home):
    marker = os.path.join(project, "MARKER")
    r = _drive("kill", project, home, marker)
    assert r.rc == -signal.SIGKILL, r
    # bwrap dies with its parent (PR_SET_PDEATHSIG), and the child waiting for the program
    # reads an empty one; give a command that did start more than enough time to show.
    time.sleep(1.0)
    assert not os.path.exists(marker), "the command ran although sbxc never released it"


def test_control_released_command_runs(bwrap_works, project, home):
    marker = os.path.join(project, "MARKER")
    r = _drive("go", project, home, marker)
    assert r.rc == 0, r
    assert open(marker).read() == "ran\n"


def test_refusal_after_bwrap_started_leaves_no_process(bwrap_works, project, home, tmp_path):
    """A check that refuses after bwrap was started (here: the journal cannot be written)
    ends bwrap before the command, says so in one line, and exits 125."""
    env = base_env(home)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
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
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        left.append(pid)
            except OSError:
                pass
    assert not left, left


def _entry_for(project, env):
    """The plan cache's entry for the project's policy (the newest p- entry of the root)."""
    import glob
    import marshal

    root = env["SBXC_ROOT"]
    entries = sorted(glob.glob(os.path.join(root, "plans", "p-*")), key=os.path.getmtime)
    assert entries, os.listdir(root)
    with open(entries[-1], "rb") as f:
        return entries[-1], marshal.loads(f.read())


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
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
