"""Host rules under runc, live: the proxy's listener is made in the container's own network
namespace between `runc create` and `runc start`, the namespace keeps loopback only, and
every failure before the start deletes the container with nothing of it left behind.

As root and, rootless, as an unprivileged user. The only upstream is a server of this
test on 127.0.0.1; the cases that go through the proxy (allowed and refused hosts, a
direct connection, the JSON status) run on every backend in test_host_rules.py and
test_exec_status.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import PYTHON, base_env, run  # noqa: E402
from test_host_rules import policy, proxy_is_the_only_way_out, upstream  # noqa: E402,F401 (upstream: a fixture)

pytestmark = pytest.mark.live


def _plans(home: str) -> str:
    """The plans folder of the runs below (the suite's private SBXC_ROOT)."""
    env = base_env(home)
    out = subprocess.run([PYTHON, "-c", "import os\nfrom sbxc.runtime.planstore import plans_dir\nprint(plans_dir())"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    return out.strip()


def _run_dirs(plans: str) -> list:
    """The per-run folders in the plans folder's ``runs`` folder, where the bundles are,
    and any in the plans folder itself."""
    from sbxc.layout import RUN_DIR_PREFIX, RUNS_SUBDIR

    found = []
    for where in (os.path.join(plans, RUNS_SUBDIR), plans):
        try:
            found += [os.path.join(where, n) for n in os.listdir(where) if n.startswith(RUN_DIR_PREFIX)]
        except FileNotFoundError:
            pass
    return sorted(found)


def _tagged(*marks: str) -> list:
    """Processes of this user whose environment holds one of ``marks``: the run's own
    variable (runc and the command carry it), or its plans folder (runc's waiting init
    has only runc's variables, among them its state folder there)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if any(m.encode() in env for m in marks):
            found.append(int(name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process: a zombie is not (an ended process reparented to a
    subreaper that does not reap it, such as a test runner, stays one)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def _cgroups(cid: str) -> list:
    """Cgroup folders named after the container (runc makes them as root)."""
    found = []
    for top, dirs, _files in os.walk("/sys/fs/cgroup"):
        if top.count("/") > 6:
            dirs[:] = []
            continue
        found += [os.path.join(top, d) for d in dirs if d == cid]
    return found


def _tag_policy(tag: str, upstream_port: int) -> str:
    # The tag rides in the command's environment, which runc also runs with: every process
    # of the run (runc and the container's) carries it.
    return policy("oci", f"allow 127.0.0.1:{upstream_port}").replace(
        "network:", f"env:\n  set: {{SBXC_TEST_TAG: {tag}}}\nnetwork:", 1)


def test_oci_the_proxy_listens_inside_and_nothing_else_is_reachable(runc, sbxc, upstream):
    """The container's network namespace has `lo` alone, the proxy's port is its only
    listener, and the test's server on the host's loopback is reachable only through the
    proxy. Control: the same probe unsandboxed connects directly."""
    proxy_is_the_only_way_out(sbxc, "oci", upstream)


WATCH = r"""
import os, subprocess, sys, time
plans, runc, out = sys.argv[1], sys.argv[2], sys.argv[3]
from sbxc.layout import RUN_DIR_PREFIX, RUNS_SUBDIR
runs = os.path.join(plans, RUNS_SUBDIR)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    for name in os.listdir(runs) if os.path.isdir(runs) else ():
        if name.startswith(RUN_DIR_PREFIX):
            d = os.path.join(runs, name)
            r = subprocess.run([runc, "--root", d] + ([] if os.geteuid() == 0 else ["--rootless", "true"])
                               + ["list", "-q"], capture_output=True, text=True)
            if r.stdout.strip():
                try:  # runc lists the container a moment before it writes the pid file
                    pid = open(os.path.join(d, "pid")).read().strip()
                    groups = open(f"/proc/{pid}/cgroup").read()
                except OSError:
                    continue
                with open(out, "w") as f:
                    f.write(d + "\n" + r.stdout.strip() + "\n" + str(r.stdout.strip() in groups) + "\n")
                sys.exit(0)
    time.sleep(0.02)
sys.exit(1)
"""


def test_oci_nothing_is_left_after_a_run(runc, sbxc, upstream):
    """While the command runs, runc lists its container in the run's folder (the control:
    the check sees a container that exists); once sbxc returned, the folder (runc's state
    with it) is gone, and no process or cgroup of the run is left."""
    tag = uuid.uuid4().hex
    plans = _plans(sbxc.home)
    before = _run_dirs(plans)
    seen = os.path.join(str(sbxc.home), "seen")
    watcher = subprocess.Popen([PYTHON, "-c", WATCH, plans, runc, seen], env=base_env(sbxc.home))
    try:
        r = sbxc(_tag_policy(tag, upstream), "/bin/sh", "-c", "sleep 2; echo done")
    finally:
        watcher.wait(timeout=60)
    assert r.rc == 0 and "done" in r.out, r
    with open(seen) as f:
        rundir, listed, in_cgroup = f.read().split("\n")[:3]
    assert listed.startswith("sbxc-"), listed
    if os.geteuid() == 0:
        assert in_cgroup == "True", in_cgroup  # the control for the cgroup check below
    # runc's state root was the run's folder: with it gone, runc knows no container of the
    # run (`runc list` is not asked again: it would make the folder anew).
    assert _run_dirs(plans) == before
    assert not os.path.exists(rundir)
    assert _tagged(tag, plans) == []
    assert _cgroups(listed) == []


FAULT = r"""
import os, shutil, signal, subprocess, sys
from sbxc.runtime import oci_run, proxy_netns

where, seen = os.environ["SBXC_TEST_FAULT"], os.environ["SBXC_TEST_SEEN"]

def note():
    # Called while the container waits before its start: what exists then.
    from sbxc.layout import RUN_DIR_PREFIX, RUNS_SUBDIR
    from sbxc.runtime.planstore import plans_dir

    lines = []
    runs = os.path.join(plans_dir(), RUNS_SUBDIR)
    for name in os.listdir(runs):
        if name.startswith(RUN_DIR_PREFIX):
            d = os.path.join(runs, name)
            r = subprocess.run([shutil.which("runc"), "--root", d]
                               + ([] if os.geteuid() == 0 else ["--rootless", "true"]) + ["list", "-q"],
                               capture_output=True, text=True)
            pid = open(os.path.join(d, "pid")).read().strip() if os.path.exists(os.path.join(d, "pid")) else ""
            lines.append(f"{d} {pid} {r.stdout.strip()}")
            if pid:
                # The controls for the checks after the run: the waiting process carries the
                # plans folder in its environment, and its cgroup is named by the container.
                marked = plans_dir().encode() in open(f"/proc/{pid}/environ", "rb").read()
                groups = open(f"/proc/{pid}/cgroup").read()
                lines.append(f"MARKED {marked} CGROUP {r.stdout.strip() in groups}")
    with open(seen, "w") as f:
        f.write("\n".join(lines) + "\n")

if where == "setns":
    def refuse(fd, kinds):
        note()
        raise PermissionError(1, "Operation not permitted")
    proxy_netns._setns = refuse
elif where in ("start", "sigint-start"):
    real = oci_run._runc_call
    def call(argv, env, log_w):
        if "start" in argv:
            note()
            if where == "start":
                return 1  # runc start failed before it read the exec fifo
            # A Ctrl-C: SIGINT to the terminal's foreground group, sbxc and the runc start it
            # had just spawned (there before its own process group was set), which dies of it.
            os.kill(os.getpid(), signal.SIGINT)
            return -signal.SIGINT
        return real(argv, env, log_w)
    oci_run._runc_call = call
elif where == "sigint-create":
    from sbxc.runtime import supervise
    real_spawn = supervise._spawn
    def spawn(spec, *args):
        pid = real_spawn(spec, *args)
        if "create" in spec.argv:
            # A Ctrl-C as `runc create` starts: the signal reached it before its session was
            # its own (pending across its exec), and sbxc too.
            os.kill(pid, signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return pid
    supervise._spawn = spawn

elif where in ("signal", "sigkill", "sigkill-group", "sigkill-held"):
    if where == "sigkill-held":
        # As a runc whose waiting init keeps inherited descriptors (before 1.1.12): a
        # process that holds the lifeline's write end as long as the container waits.
        from sbxc.runtime import supervise
        real_spawn = supervise._spawn
        def spawn(spec, *args):
            pid = real_spawn(spec, *args)
            if "create" in spec.argv:
                holder = subprocess.Popen(["sleep", "60"], pass_fds=[spec.pass_fds[-1]])
                with open(seen + ".holder", "w") as f:
                    f.write(str(holder.pid))
            return pid
        supervise._spawn = spawn
    from sbxc.runtime import oci_watch, proxy_run
    watchers = []
    real_watch = oci_watch.Watcher.start
    def watch(self, *args, **kw):
        real_watch(self, *args, **kw)
        watchers.append(self.pid)
    oci_watch.Watcher.start = watch
    real_listen = proxy_run.ProxyRun.listen_in
    def listen_in(self, joiner, launcher_pid, child_pid):
        real_listen(self, joiner, launcher_pid, child_pid)
        note()
        # SIGTERM as from a timeout, before runc start. SIGKILL to sbxc's whole process group
        # (its own session here) and to its watcher (in a session of its own, out of that
        # group's reach): neither sbxc nor its watcher can clean up at all.
        if where == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
        elif where in ("sigkill", "sigkill-held"):
            os.kill(os.getpid(), signal.SIGKILL)  # sbxc alone: its watcher stays
        else:
            for pid in watchers:
                os.kill(pid, signal.SIGKILL)
            os.killpg(os.getpgrp(), signal.SIGKILL)
    proxy_run.ProxyRun.listen_in = listen_in

elif where == "sigkill-in-create":
    from sbxc.runtime import supervise
    real_spawn = supervise._spawn
    def spawn(spec, *args):
        pid = real_spawn(spec, *args)
        if "create" in spec.argv:
            # sbxc alone, right after it started `runc create`: the container is not made yet.
            argv = list(spec.argv)
            with open(seen, "w") as f:
                f.write(f"{argv[argv.index('--pid-file') + 1]} {argv[-1]} {pid}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return pid
    supervise._spawn = spawn

from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""

FAULT_LINES = {
    "setns": ("sbxc: the network proxy could not be put into the container (cannot listen in the sandbox's network "
              "namespace (Operation not permitted)); check that runc may create user and network namespaces "
              "(sbxc doctor)"),
    "start": "sbxc: runc start failed before the command started; run sbxc doctor",
}


@pytest.mark.parametrize("where", ["setns", "start", "signal", "sigint-start"])
def test_oci_failure_before_the_start_leaves_nothing(runc, sbxc, upstream, where):
    """Fail closed: the listener cannot be made in the container's namespace (the kernel's
    refusal of setns, simulated in sbxc's helper), or `runc start` fails: 125, one sbxc
    line; or sbxc gets SIGTERM before the start: 143, as the signal's default action; or a
    Ctrl-C kills `runc start` (and reaches sbxc): 130, as SIGINT's, and no line that blames
    runc (it said "runc start failed before the command started; run sbxc doctor"). The
    command never ran, and the container that existed at that moment (seen by
    `runc list` from inside the fault: the control) is deleted, its state folder and its
    waiting process gone. Control: the same run without the fault runs the command."""
    tag = uuid.uuid4().hex
    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(_tag_policy(tag, upstream))
    plans = _plans(sbxc.home)
    before = _run_dirs(plans)
    marker = os.path.join(sbxc.project, "ran")
    seen = os.path.join(str(sbxc.home), "seen")
    env = base_env(sbxc.home, {"SBXC_TEST_FAULT": where, "SBXC_TEST_SEEN": seen})
    r = run([PYTHON, "-c", FAULT, "exec", "--policy", ppath, "--", "touch", marker], env=env, cwd=sbxc.project)
    lines = [line for line in r.err.splitlines() if line.startswith("sbxc: ") and "warning" not in line]
    if where == "signal":
        assert r.rc == 128 + 15 and lines == [], r
    elif where == "sigint-start":
        assert r.rc == 128 + 2 and lines == [], r
    else:
        assert r.rc == 125, r
        assert lines == [FAULT_LINES[where]], r
    assert not os.path.exists(marker), r
    with open(seen) as f:
        text = f.read()
    found = [line.split(" ", 2) for line in text.splitlines() if not line.endswith("  ") and
             not line.startswith("MARKED ")]
    assert len(found) == 1, text
    assert "MARKED True" in text, text
    if os.geteuid() == 0:
        assert "CGROUP True" in text, text  # rootless runc makes no cgroup of its own
    rundir, pid, listed = found[0]
    assert listed.startswith("sbxc-") and pid.isdigit(), text
    assert not os.path.exists(rundir)
    assert _run_dirs(plans) == before
    assert _tagged(tag, plans) == []  # the container's waiting process is gone
    assert _cgroups(listed.strip()) == []
    r = run([PYTHON, "-m", "sbxc", "exec", "--policy", ppath, "--", "touch", marker], env=base_env(sbxc.home),
            cwd=sbxc.project)
    assert r.rc == 0 and os.path.exists(marker), r


REAP = ("import sys, time\nfrom sbxc.runtime import rundirs\n"
        "print(rundirs.reap_run_dirs(sys.argv[1], now=time.time() + 2 * rundirs.STALE_AFTER, runc=sys.argv[2]))")


def _reap_later(sbxc, folder: str, runc: str = "") -> int:
    """What a later run's reaper (past STALE_AFTER) does in ``folder``, in a process of the
    run's environment; ``runc``: also ending the containers of stale bundles. How many
    folders it removed."""
    r = run([PYTHON, "-c", REAP, folder, runc], env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 0, r
    return int(r.out.strip())


def _killed_run(sbxc, upstream, fault: str):
    """A run with host rules (a tagged policy) of sbxc under the fault ``fault`` (FAULT),
    in a session of its own, that ends with sbxc killed by SIGKILL. Output goes to a file,
    and only sbxc itself is waited for: the waiting process keeps the stdio it was given,
    so pipes would never reach end of file. Returns (tag, marker, the file ``note`` wrote)."""
    tag = uuid.uuid4().hex
    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(_tag_policy(tag, upstream))
    marker = os.path.join(sbxc.project, "ran")
    seen = os.path.join(str(sbxc.home), "seen")
    env = base_env(sbxc.home, {"SBXC_TEST_FAULT": fault, "SBXC_TEST_SEEN": seen})
    with open(os.path.join(str(sbxc.home), "out"), "wb") as out:
        p = subprocess.Popen([PYTHON, "-c", FAULT, "exec", "--policy", ppath, "--", "touch", marker], env=env,
                             cwd=sbxc.project, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True)
        assert p.wait(timeout=60) == -9
    return tag, marker, seen


def _killed_before_start(sbxc, upstream, fault: str):
    """A run with host rules whose sbxc is killed (``fault``: ``sigkill`` for sbxc alone,
    ``sigkill-group`` for its whole process group, in a session of its own) while the
    container waits before `runc start` (``_killed_run``). Returns (tag, plans, marker,
    what ``note`` saw, (folder, pid, id))."""
    tag, marker, seen = _killed_run(sbxc, upstream, fault)
    assert not os.path.exists(marker)
    with open(seen) as f:
        text = f.read()
    found = [line.split(" ", 2) for line in text.splitlines() if not line.startswith("MARKED ")]
    assert len(found) == 1 and "MARKED True" in text, text  # the control: the container waited
    rundir, pid, listed = found[0]
    assert pid.isdigit(), text
    return tag, _plans(sbxc.home), marker, text, (rundir, pid, listed.strip())


class _Leader:
    """``argv`` as the session leader of a fresh pseudo-terminal, its controlling terminal
    (as ssh -t starts a command): ``pid``, ``wait``, ``poll``, ``kill`` as on a Popen."""

    def __init__(self, argv, env, cwd):
        import pty

        self.pid, self.master = pty.fork()
        if self.pid == 0:
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.status = None

    def poll(self):
        if self.status is None:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
        return self.status

    def wait(self, timeout=None):
        import time

        deadline = time.monotonic() + (timeout or 60)
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
        return self.status

    def kill(self):
        os.kill(self.pid, 9)


def test_oci_container_of_a_killed_sbxc_is_ended_by_a_later_reaper(runc, sbxc, upstream):
    """sbxc and its watcher killed with SIGKILL (sbxc's whole process group, and the watcher,
    which has a session of its own) between `runc create` and `runc start` can clean up
    nothing: the container's first process waits on
    runc's exec fifo, in a bundle nobody holds any more (the control: it is still there, as
    root with its cgroup). A later run's reaper of stale per-run folders (simulated at a
    time past STALE_AFTER) deletes the container through runc before it removes the
    folder: the process and the cgroup go."""
    tag, plans, marker, text, (rundir, pid, listed) = _killed_before_start(sbxc, upstream, "sigkill-group")
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and [p for p in _tagged(tag, plans) if p != int(pid)]:
        time.sleep(0.05)  # the proxy and its helper end once their sbxc is gone
    assert _tagged(tag, plans) == [int(pid)], text  # the control: the container's process waits on
    assert os.path.isdir(rundir)
    if os.geteuid() == 0:
        assert _cgroups(listed), listed
    assert _reap_later(sbxc, os.path.dirname(rundir), runc) >= 1
    assert not os.path.exists(rundir)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _tagged(tag, plans):
        time.sleep(0.05)
    assert _tagged(tag, plans) == []
    assert _cgroups(listed) == []
    assert not os.path.exists(marker)



@pytest.mark.parametrize("kind", ["network off", "host rules", "on a terminal", "the terminal's session leader",
                                  "its process group"])
def test_sigkill_of_sbxc_ends_its_container(runc, sbxc, upstream, kind):
    """runc has no --die-with-parent: an sbxc killed with SIGKILL, which can clean up
    nothing, would leave runc and the command running unsupervised. The run's watcher
    (runtime/oci_watch) ends the container then: the command's processes go within
    seconds, and as root the container's cgroup too. The control: the command was
    running (a tagged `sleep`) when sbxc was killed. Every kind of run: `runc run`, and
    `runc create`/`start` for host rules and for a run whose stdin is a terminal. And sbxc
    as the session leader of its terminal (ssh -t, a tmux window): its death sends the
    terminal's foreground group SIGHUP, which killed the watcher's `runc delete` before it
    deleted anything while the watcher was in sbxc's group; and a SIGKILL of sbxc's whole
    process group (a CI job's timeout), which the watcher, in a session of its own,
    outlives."""
    import pty
    import signal
    import time

    tag = uuid.uuid4().hex
    text = _tag_policy(tag, upstream)
    if kind != "host rules":
        text = text.split("network:")[0] + "network: false\n"
    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(text)
    plans = _plans(sbxc.home)
    before = set(_run_dirs(plans))
    master, slave = pty.openpty() if kind == "on a terminal" else (-1, subprocess.DEVNULL)
    argv = [PYTHON, "-m", "sbxc", "exec", "--policy", ppath, "--", "sleep", "120"]
    with open(os.path.join(str(sbxc.home), "out"), "wb") as out:
        if kind == "the terminal's session leader":
            p = _Leader(argv, base_env(sbxc.home), sbxc.project)
        else:
            p = subprocess.Popen(argv, env=base_env(sbxc.home), cwd=sbxc.project, stdin=slave, stdout=out,
                                 stderr=out, start_new_session=kind == "its process group")
        if master >= 0:
            os.close(slave)
        try:
            sleeping, cid = 0, ""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not sleeping:
                for pid in _tagged(tag):
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            if not f.read().split(b"\0")[0].endswith(b"sleep"):
                                continue
                        with open(f"/proc/{pid}/cgroup") as f:
                            cid = next((ln.rsplit("/", 1)[1] for ln in f.read().splitlines()
                                        if ln.rsplit("/", 1)[-1].startswith("sbxc-")), "")
                        sleeping = pid
                    except OSError:
                        continue
                time.sleep(0.05)
            assert sleeping, "the command never ran"  # the control
            if master >= 0:  # the terminal itself: runc create's run (runc run would give a pipe)
                assert os.readlink(f"/proc/{sleeping}/fd/0").startswith("/dev/pts/")
            if kind == "its process group":
                os.killpg(p.pid, signal.SIGKILL)
            else:
                os.kill(p.pid, signal.SIGKILL)
            assert p.wait(timeout=30) == -9
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if master >= 0:
                os.close(master)
    deadline = time.monotonic() + 15
    # The processes go first, the cgroup right after (runc delete kills, then removes).
    while time.monotonic() < deadline and (_tagged(tag, plans) or (cid and _cgroups(cid))):
        time.sleep(0.05)
    assert _tagged(tag, plans) == [], "the container outlived its sbxc"
    if os.geteuid() == 0:
        assert cid and _cgroups(cid) == [], cid
    # The killed run's folder is a later run's to reap once stale; the tests after this
    # one expect a plans folder without run folders.
    ours = set(_run_dirs(plans)) - before
    assert len(ours) == 1, ours  # left by the killed sbxc
    assert _reap_later(sbxc, os.path.join(plans, "runs")) >= 1
    assert not [d for d in ours if os.path.exists(d)]


def test_oci_sigkill_of_sbxc_before_the_start_ends_the_waiting_container(runc, sbxc, upstream):
    """sbxc alone killed with SIGKILL between `runc create` and `runc start`: its watcher
    deletes the container at once, so the waiting process and (as root) its cgroup go
    within seconds, with no later run needed. The control: the waiting process was there
    when sbxc was killed (``note`` saw it)."""
    import time

    tag, plans, marker, text, (rundir, pid, listed) = _killed_before_start(sbxc, upstream, "sigkill")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_tagged(tag, plans) or _running(int(pid)) or _cgroups(listed)):
        time.sleep(0.05)
    assert _tagged(tag, plans) == [] and not _running(int(pid)), text
    assert _cgroups(listed) == []
    assert not os.path.exists(marker)
    _reap_later(sbxc, os.path.dirname(rundir))
    assert not os.path.exists(rundir)



def test_oci_sigkill_of_sbxc_while_runc_creates_the_container_ends_it(runc, sbxc, upstream):
    """sbxc alone killed with SIGKILL right after it started `runc create`, before the
    container exists: runc goes on and makes it. The watcher, started before `runc
    create`, waits for that runc to end (its lifeline) and then deletes the container, so
    its waiting process and (as root) its cgroup go with no later run needed. Before, the
    watcher was started only once `runc create` had exited, and such a container stayed.
    The control: the container was made after sbxc's death (runc wrote its pid file, and
    the process it names was sbxc's child's child)."""
    import time

    tag, marker, seen = _killed_run(sbxc, upstream, "sigkill-in-create")
    with open(seen) as f:
        pid_file, cid, _create = f.read().split()
    plans = _plans(sbxc.home)
    deadline = time.monotonic() + 20
    made = ""
    while time.monotonic() < deadline and not made:
        try:
            with open(pid_file) as f:
                made = f.read().strip()
        except FileNotFoundError:
            time.sleep(0.02)
    assert made.isdigit(), "runc create made no container after sbxc was killed"  # the control
    while time.monotonic() < deadline and (_running(int(made)) or _tagged(tag, plans) or _cgroups(cid)):
        time.sleep(0.05)
    assert not _running(int(made)), "the container made after sbxc's death was left waiting"
    assert _tagged(tag, plans) == []
    assert _cgroups(cid) == []
    assert not os.path.exists(marker)
    _reap_later(sbxc, os.path.dirname(os.path.dirname(pid_file)))
    assert not os.path.exists(os.path.dirname(pid_file))


def test_oci_watcher_deletes_at_once_when_the_lifeline_is_held_after_create(runc, sbxc, upstream):
    """Some runc versions (before 1.1.12) leave inherited descriptors open in the
    container's waiting init, which would then hold the watcher's lifeline for as long as
    the container waits. sbxc tells the watcher once `runc create` is over, and from then
    on it deletes at once: sbxc alone killed before `runc start`, with another process
    holding the lifeline (as such an init would), still leaves nothing within seconds.
    The control: the holder was alive, holding it, when the container went."""
    import signal
    import time

    tag, plans, marker, text, (rundir, pid, listed) = _killed_before_start(sbxc, upstream, "sigkill-held")
    with open(os.path.join(str(sbxc.home), "seen.holder")) as f:
        holder = int(f.read())
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (_running(int(pid)) or _cgroups(listed)):
            time.sleep(0.05)
        assert not _running(int(pid)), "the watcher waited for the held lifeline"
        assert _cgroups(listed) == []
        assert _running(holder)  # the control: the lifeline was still held
    finally:
        os.kill(holder, signal.SIGKILL)
    assert not os.path.exists(marker)
    _reap_later(sbxc, os.path.dirname(rundir))


@pytest.mark.parametrize("stdin", ["a pipe", "host rules"])
def test_oci_ctrl_c_that_kills_runc_create_ends_the_run_as_sigint(runc, sbxc, upstream, stdin):
    """A Ctrl-C right as `runc create` starts reaches it (before its session is its own)
    and sbxc: runc create dies of SIGINT, and the run ends with 130, as SIGINT's default
    action, with no line blaming runc (it said "runc exited with status -2 before the
    command started; run sbxc doctor", 125). Nothing ran, nothing of the container is
    left. Both kinds of split run: a stdin to read (no host rules) and host rules."""
    tag = uuid.uuid4().hex
    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    text = _tag_policy(tag, upstream)
    if stdin == "a pipe":
        text = text.split("network:")[0] + "network: false\n"
    with open(ppath, "w") as f:
        f.write(text)
    plans = _plans(sbxc.home)
    before = _run_dirs(plans)
    marker = os.path.join(sbxc.project, "ran")
    env = base_env(sbxc.home, {"SBXC_TEST_FAULT": "sigint-create", "SBXC_TEST_SEEN": os.path.join(str(sbxc.home), "seen")})
    rd, wr = os.pipe()
    try:
        r = run([PYTHON, "-c", FAULT, "exec", "--policy", ppath, "--", "touch", marker], env=env, cwd=sbxc.project,
                stdin=rd)
    finally:
        os.close(rd)
        os.close(wr)
    lines = [line for line in r.err.splitlines() if line.startswith("sbxc: ") and "warning" not in line]
    assert r.rc == 128 + 2 and lines == [], r
    assert not os.path.exists(marker), r
    assert _run_dirs(plans) == before
    assert _tagged(tag, plans) == []
