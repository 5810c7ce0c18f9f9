"""Live Landlock runs: nothing the command starts outlives sbxc, killed runs leave no
per-run folder for long, and the caller's other terminals stay out of reach. Each denial
has a control that shows the same action works where it should (so the test can fail)."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import landlock_abi, make_plan, rule, run_plan  # noqa: E402
from conftest import SANDBOX_PYTHON, base_env, sbxc_argv  # noqa: E402

pytestmark = pytest.mark.live

PY = SANDBOX_PYTHON
# A shell's PID as the test (and /proc) number it: in the command's own PID namespace
# (root) $$ and $! are that namespace's numbers.
HOST_PID = "read -r hp _ < /proc/self/stat; echo $hp"

if landlock_abi() < 6:
    pytest.skip(f"Landlock ABI {landlock_abi()} here; these tests need 6", allow_module_level=True)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2:][:1] != b"Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _wait_file(path: str, seconds: float = 20) -> str:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text.strip()
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _write_plan(tmp_path, rules, project) -> str:
    pf = cases.planfile_for(make_plan(rules, project=project), "landlock")
    path = str(tmp_path / f"plan-{os.urandom(4).hex()}.json")
    with open(path, "w") as f:
        json.dump(pf, f)
    return path


def _start(plan_path: str, cmd, cwd: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, cases.__file__, "run", plan_path, "--", *cmd], cwd=cwd, **kw)


# ------------------------------------------------------------------ processes

def test_daemon_is_ended_when_sbxc_exec_returns(project, home):
    """The brief's case through the command line: a double-forked, setsid daemon that
    would rewrite the project's policy file after sbxc returned."""
    policy = os.path.join(project, "sandbox.policy.yaml")
    with open(policy, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\n")
    original = open(policy).read()
    pidfile = os.path.join(project, "daemon.pid")
    daemon = (f'{HOST_PID} > {pidfile}; sleep 1.5; echo "filesystem: [write /]" >> {policy}; '
              f'echo late > {project}/late')
    cmd = ["/bin/sh", "-c", f"(setsid /bin/sh -c '{daemon}' </dev/null >/dev/null 2>&1 &); "
           f"while [ ! -s {pidfile} ]; do sleep 0.05; done; echo started"]
    t0 = time.time()
    p = subprocess.run(sbxc_argv("exec", "--backend", "landlock", "--policy", policy, "--", *cmd),
                       env=base_env(home), cwd=project, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    took = time.time() - t0
    assert p.returncode == 0 and p.stdout.strip() == "started", p
    pid = int(open(pidfile).read())
    try:
        # Ended before sbxc returned (and so before its cleanups and its policy check).
        assert not _alive(pid), "the daemon outlived sbxc exec"
        assert took < 1.5 + 10
        time.sleep(2)
        assert open(policy).read() == original
        assert not os.path.exists(f"{project}/late")
        assert "changed while the command ran" not in p.stderr
    finally:
        _kill(pid)


def test_background_process_holding_stdout_is_ended(tree, tmp_path):
    # Control: the command's own output before it exits arrives; the background writer's
    # later lines never do, because it is gone when sbxc returns.
    marker = f"{tree}/proj/sub/bg.pid"
    r = run_plan(make_plan(cases.shared_rules(tree), project=f"{tree}/proj"), "landlock",
                 ["/bin/sh", "-c", f"({HOST_PID} > {marker}; while :; do echo tick; sleep 0.1; done) & "
                                   f"while [ ! -s {marker} ]; do sleep 0.05; done; sleep 0.3; echo done"],
                 cwd=f"{tree}/proj", tmp=str(tmp_path))
    pid = int(open(marker).read())
    try:
        assert r.rc == 0 and "done" in r.out.splitlines(), r
        assert not _alive(pid)
    finally:
        _kill(pid)


def test_kill9_of_sbxc_ends_grandchildren(tree, tmp_path):
    """SIGKILL to sbxc: the command's own children die too (not only the command)."""
    plan = _write_plan(tmp_path, cases.shared_rules(tree), f"{tree}/proj")
    pidfile = f"{tree}/proj/sub/sleep.pid"
    p = _start(plan, ["/bin/sh", "-c", f"/bin/sh -c '{HOST_PID} > {pidfile}; exec sleep 30' & wait"], f"{tree}/proj")
    pid = 0
    try:
        pid = int(_wait_file(pidfile))
        assert _alive(pid)  # control: it runs
        p.kill()
        p.wait(10)
        assert _wait_gone(pid, 10), "sleep 30 outlived a killed sbxc"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if pid:
            _kill(pid)


def test_killed_reaper_leaves_nothing_behind(tree, tmp_path):
    """If sbxc's reaper child is killed, the command dies with it (its parent-death
    signal) and sbxc, a subreaper itself, ends the orphans before it returns."""
    plan = _write_plan(tmp_path, cases.shared_rules(tree), f"{tree}/proj")
    pidfile = f"{tree}/proj/sub/sleep.pid"
    p = _start(plan, ["/bin/sh", "-c", f"(setsid /bin/sh -c '{HOST_PID} > {pidfile}; exec sleep 30' &); sleep 30"],
               f"{tree}/proj", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid = 0
    try:
        pid = int(_wait_file(pidfile))
        assert _alive(pid)
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            reaper = int(f.read().split()[0])
        os.kill(reaper, signal.SIGKILL)
        p.wait(20)
        assert p.returncode == 128 + 9
        assert not _alive(pid), "an orphan outlived sbxc"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if pid:
            _kill(pid)


def test_status_and_signals_pass_through(tree, tmp_path):
    plan = make_plan(cases.shared_rules(tree), project=f"{tree}/proj")
    assert run_plan(plan, "landlock", ["/bin/sh", "-c", "exit 7"], cwd=f"{tree}/proj", tmp=str(tmp_path)).rc == 7
    assert run_plan(plan, "landlock", ["/bin/sh", "-c", "kill -9 $$"], cwd=f"{tree}/proj", tmp=str(tmp_path)).rc == 137
    # SIGTERM to sbxc reaches the command, which chooses its own status.
    path = _write_plan(tmp_path, cases.shared_rules(tree), f"{tree}/proj")
    ready = f"{tree}/proj/sub/ready"
    p = _start(path, ["/bin/sh", "-c", f"trap 'exit 42' TERM; echo x > {ready}; while :; do sleep 0.05; done"],
               f"{tree}/proj")
    try:
        _wait_file(ready)
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 42
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


# ------------------------------------------------------------------ per-run folders

def test_killed_run_folder_is_reaped_later(tree, tmp_path):
    scratch = str(tmp_path / "scratch")
    os.mkdir(scratch)
    rules = cases.shared_rules(tree) + [rule(scratch, "tmpfs")]
    plan = _write_plan(tmp_path, rules, f"{tree}/proj")
    out = f"{tree}/proj/sub/tmpdir"
    p = _start(plan, ["/bin/sh", "-c", f'echo "$TMPDIR" > {out}; : > "$TMPDIR/f"; sleep 30'], f"{tree}/proj")
    try:
        run_dir = _wait_file(out)
        assert run_dir.startswith(scratch + "/sbxc-run-")
        p.kill()
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert os.path.isdir(run_dir)  # nothing could clean up after a SIGKILL
    # A run that starts within the age limit leaves it (it may be a run between its mkdir
    # and its lock); one that starts later takes it away.
    r = run_plan(make_plan(rules, project=f"{tree}/proj"), "landlock", ["/bin/true"], cwd=f"{tree}/proj", tmp=str(tmp_path))
    assert r.rc == 0 and os.path.isdir(run_dir), r
    old = time.time() - 3600
    os.utime(run_dir, (old, old))
    r = run_plan(make_plan(rules, project=f"{tree}/proj"), "landlock", ["/bin/true"], cwd=f"{tree}/proj", tmp=str(tmp_path))
    assert r.rc == 0, r
    assert not os.path.lexists(run_dir)
    assert os.listdir(scratch) == []  # and the new run removed its own


def test_locked_run_folder_is_never_taken(tmp_path):
    from sbxc.runtime import rundirs

    base = str(tmp_path)
    path, lock_fd = rundirs.make_run_dir(base)
    later = time.time() + 3600
    try:
        assert rundirs.reap_run_dirs(base, now=later) == 0
        assert os.path.isdir(path)  # in use: kept however old it looks
    finally:
        os.close(lock_fd)
    # A lookalike that is not a folder (a symlink to one) is never followed or removed.
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    os.symlink(str(target), f"{base}/sbxc-run-{'0' * 16}")
    assert rundirs.reap_run_dirs(base, now=later) == 1
    assert not os.path.lexists(path)
    assert (target / "keep").read_text() == "x"


# ------------------------------------------------------------------ terminals

_TTY_PROBE = r"""
import os, sys
res = []
for path in sys.argv[1:]:
    for mode in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR):
        try:
            os.close(os.open(path, mode | os.O_NOCTTY))
            res.append("open")
        except OSError as e:
            res.append(str(e.errno))
os.write(1, ("stdout-ok " + " ".join(res) + "\n").encode())
os.write(2, b"stderr-ok\n")
try:
    with open("/dev/stderr", "w") as f:
        f.write("reopen-ok\n")
except OSError as e:
    os.write(2, ("reopen %d\n" % e.errno).encode())
"""


def _read_all(fd: int, seconds: float = 30) -> str:
    out = b""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not select.select([fd], [], [], 0.2)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every slave descriptor is closed
            break
        if not chunk:
            break
        out += chunk
    return out.decode("utf-8", "replace").replace("\r\n", "\n")


def test_other_terminals_refused_own_terminal_usable(tree, tmp_path):
    """The command's stdout and stderr are a terminal the caller gave it; another
    terminal of the caller's (a second pty), /dev/tty and /dev/ptmx cannot be opened."""
    plan = _write_plan(tmp_path, cases.shared_rules(tree), f"{tree}/proj")
    own_m, own_s = os.openpty()
    other_m, other_s = os.openpty()
    other = os.ttyname(other_s)
    try:
        p = _start(plan, [PY, "-c", _TTY_PROBE, other, "/dev/tty", "/dev/ptmx"], f"{tree}/proj",
                   stdin=subprocess.DEVNULL, stdout=own_s, stderr=own_s)
        os.close(own_s)
        own_s = -1
        text = _read_all(own_m)
        assert p.wait(30) == 0, text
    finally:
        for fd in (own_m, own_s, other_m, other_s):
            if fd >= 0:
                os.close(fd)
    lines = text.splitlines()
    first = next(line for line in lines if line.startswith("stdout-ok"))
    got = first.split()[1:]
    assert "open" not in got, text  # nothing opened: not the other pty, /dev/tty, /dev/ptmx
    assert got[:3] == ["13", "13", "13"], text  # Landlock's EACCES on the other terminal
    assert "stderr-ok" in lines and "reopen-ok" in lines, text  # control: its own terminal


def test_other_terminal_refused_with_pipes(tree, tmp_path):
    """With stdio on pipes the pty is nobody's stdio: refused; the same open of a file
    the policy shows works (control)."""
    m, s = os.openpty()
    try:
        r = run_plan(make_plan(cases.shared_rules(tree), project=f"{tree}/proj"), "landlock",
                     [PY, "-c", _TTY_PROBE, os.ttyname(s), f"{tree}/proj/a.txt"], cwd=f"{tree}/proj", tmp=str(tmp_path))
    finally:
        os.close(m)
        os.close(s)
    got = r.out.split()[1:]
    assert got[:3] == ["13", "13", "13"], r
    assert got[3:] == ["open", "open", "open"], r
    assert "reopen-ok" in r.err, r


def test_block_devices_and_consoles_refused(tree, tmp_path):
    """The rest of the host's /dev is withheld even under `read /` (bwrap shows its own
    minimal /dev); /dev/null and /dev/urandom stay usable (control)."""
    candidates = [p for p in ("/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/tty1", "/dev/kmsg")
                  if os.path.exists(p) and os.access(p, os.R_OK)]
    if not candidates:
        pytest.skip("no readable device file to probe here (run as root to cover this)")
    script = ("import os,sys\nfor p in sys.argv[1:]:\n"
              "    try:\n        os.close(os.open(p, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)); print(p, 'open')\n"
              "    except OSError as e: print(p, e.errno)\n")
    r = run_plan(make_plan(cases.shared_rules(tree), project=f"{tree}/proj"), "landlock",
                 [PY, "-c", script, *candidates, "/dev/null", "/dev/urandom"], cwd=f"{tree}/proj", tmp=str(tmp_path))
    got = dict(line.split() for line in r.out.splitlines())
    for p in candidates:
        assert got[p] == "13", r
    assert got["/dev/null"] == "open" and got["/dev/urandom"] == "open", r
