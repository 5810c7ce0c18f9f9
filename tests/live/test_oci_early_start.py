"""The OCI runner's early start: runc is started as soon as the plan is loaded, or with
``--backend oci`` on the command line before the plan is read (its own start, before it
reads its config, overlaps the plan, the cache, the environment and the rest of the
run's preparation), and it still reads nothing before the release. These tests stop the
run in that window, from the step that loads the plan (``launch.load_plan``) or the one
that prepares the cache (``cachedir.prepare``), and look at what runc did. bwrap has no
early start: its runs are the control that the probe sees the difference.
"""
import os
import signal
import time

import pytest

from conftest import PYTHON, base_env, run

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n"

# sbxc's exec with one step wrapped (argv[4]: "cache", the cache's preparation, or "plan",
# the plan's loading): it writes the command lines of sbxc's child processes at that
# moment (each after its state letter) to the file in argv[1], then, by argv[2]: goes on ("go"), refuses the run
# ("refuse"), or kills sbxc itself ("kill"), after argv[3] seconds.
DRIVER = r"""
import os, signal, sys, time
import sbxc.runtime.cachedir as cachedir
import sbxc.runtime.launch as launch
step, name = (cachedir, "prepare") if sys.argv[4] == "cache" else (launch, "load_plan")
real = getattr(step, name)
def children():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state, ppid = f.read().rpartition(b")")[2].split()[:2]
            if int(ppid) == os.getpid():
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append(state.decode() + " " + f.read().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out
def prepare(*a, **k):
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(children()))
    time.sleep(float(sys.argv[3]))
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[2] == "refuse":
        from sbxc.runtime.errors import Refusal
        raise Refusal("this step failed (test)", "free some space")
    return real(*a, **k)
setattr(step, name, prepare)
from sbxc.commands.exec import exec_entry
exec_entry(sys.argv[5:])
"""


@pytest.fixture
def backend(request, bwrap_works):
    if request.param == "oci":
        from conftest import find_runc

        find_runc()
    return request.param


def _drive(backend, project, home, mode, wait=0.0, where="cache", args=(), network="false"):
    env = base_env(home)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY.format(backend=backend).replace("network: false", f"network: {network}"))
    first = run([PYTHON, "-m", "sbxc", "exec", "--", "true"], env=env, cwd=project)  # the plan, cached
    assert first.rc == 0, first
    marker = os.path.join(project, "MARKER")
    seen = os.path.join(project, "SEEN")
    began = time.monotonic()
    r = run([PYTHON, "-c", DRIVER, seen, mode, str(wait), where, *args, "--", "sh", "-c", f'echo ran > "{marker}"'],
            env=env, cwd=project)
    took = time.monotonic() - began
    with open(seen) as f:
        children = [line for line in f.read().splitlines() if line]
    assert not [c for c in children if c.startswith("Z")], children  # none ended and left unreaped
    return r, [c.partition(" ")[2] for c in children], marker, took


def _runcs(home) -> list:
    """runc processes of this test's sbxc root (their command lines name its folders)."""
    root = base_env(home)["SBXC_ROOT"].encode()
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"runc") and any(root in a for a in argv):
                out.append(pid)
    return out


def _runs_left(home) -> list:
    runs = os.path.join(base_env(home)["SBXC_ROOT"], "plans", "runs")
    return os.listdir(runs) if os.path.isdir(runs) else []


def _is_runc_run(line: str) -> bool:
    argv = line.split()
    return bool(argv) and argv[0].endswith("runc") and "run" in argv and "--bundle" in argv


@pytest.mark.parametrize("args", [(), ("--backend", "oci")])
@pytest.mark.parametrize("backend", ["oci", "bwrap"], indirect=True)
def test_runc_runs_while_the_run_is_prepared(backend, project, home, args):
    """OCI (the policy's backend, or the flag): when the cache is prepared, runc (`runc
    run` of the run's bundle) is already sbxc's child, and the run goes on as usual.
    Control: on bwrap nothing is started yet."""
    if backend == "bwrap" and args:
        args = ("--backend", "bwrap")
    r, children, marker, _ = _drive(backend, project, home, "go", args=args)
    assert r.rc == 0, r
    assert open(marker).read() == "ran\n"
    if backend == "oci":
        assert len(children) == 1 and _is_runc_run(children[0]), children
    else:
        assert children == [], children
    assert not _runs_left(home)


@pytest.mark.parametrize("args", [("--backend", "oci"), ()])
@pytest.mark.parametrize("backend", ["oci"], indirect=True)
def test_flag_starts_runc_before_the_plan_is_read(backend, project, home, args):
    """With --backend oci runc is already sbxc's child when the plan is loaded. Control:
    the policy's own `backend: oci` is known only from the plan, so nothing runs yet."""
    r, children, marker, _ = _drive(backend, project, home, "go", where="plan", args=args)
    assert r.rc == 0, r
    assert open(marker).read() == "ran\n"
    if args:
        assert len(children) == 1 and _is_runc_run(children[0]), children
    else:
        assert children == [], children
    assert not _runs_left(home)


@pytest.mark.parametrize("backend", ["oci"], indirect=True)
def test_plan_with_the_host_network_gets_a_runc_of_its_own(backend, project, home):
    """The runc started before the plan was read has no abstract-socket scope, which a plan
    with the host's network needs (where the kernel has it): it is ended unreleased and
    another runc is started for the plan. When the cache is prepared, that one is the only
    child (the first is reaped), and the command runs."""
    r, children, marker, _ = _drive(backend, project, home, "go", args=("--backend", "oci"), network="true")
    assert r.rc == 0, r
    assert open(marker).read() == "ran\n"
    assert len(children) == 1 and _is_runc_run(children[0]), children
    assert not _runcs(home)
    assert not _runs_left(home)


@pytest.mark.parametrize("where,args", [("cache", ()), ("plan", ("--backend", "oci"))])
@pytest.mark.parametrize("wait", [0.0, 0.5])
@pytest.mark.parametrize("backend", ["oci"], indirect=True)
def test_refused_after_runc_started_ends_it_unreleased(backend, project, home, wait, where, args):
    """A refusal between runc's start and the release (right away, or once runc waits on
    its config): one sbxc line, 125, the command never ran, runc is gone without a word
    of its own, and the run's folder is removed. At once, not after the 5 s a child that
    does not end is given before SIGKILL."""
    r, children, marker, took = _drive(backend, project, home, "refuse", wait, where=where, args=args)
    assert len(children) == 1 and children[0].split()[0].endswith("runc"), children  # it had started
    assert r.rc == 125, r
    assert r.err == "sbxc: this step failed (test); free some space\n", r
    assert took < wait + 4.0, took
    time.sleep(0.5)
    assert not os.path.exists(marker), "the command ran although sbxc refused the run"
    assert not _runcs(home)
    assert not _runs_left(home)


@pytest.mark.parametrize("backend", ["oci"], indirect=True)
def test_killed_after_runc_started_runc_makes_nothing(backend, project, home):
    """sbxc killed (SIGKILL, no clean-up) while runc waits for its config: runc reads end of
    file and ends, having made nothing; the command never ran."""
    r, children, marker, _ = _drive(backend, project, home, "kill", 0.5)
    assert len(children) == 1 and children[0].split()[0].endswith("runc"), children
    assert r.rc == -signal.SIGKILL, r
    deadline = time.monotonic() + 10
    while _runcs(home) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _runcs(home)
    assert not os.path.exists(marker)
    # No container of the run: runc's state folder (named by the container id) was never made.
    runs = os.path.join(base_env(home)["SBXC_ROOT"], "plans", "runs")
    left = os.listdir(runs)
    assert len(left) == 1, left
    assert [n for n in os.listdir(os.path.join(runs, left[0]))] == ["config.json"], os.listdir(os.path.join(runs, left[0]))
    # The killed run's folder goes as the next run's reaper would take it once stale.
    from sbxc.runtime import rundirs

    assert rundirs.reap_run_dirs(runs, now=time.time() + 2 * rundirs.STALE_AFTER) == 1
