"""Live Landlock runs: the command's own PID and IPC namespaces (root), and supervision
that a command cannot weaken from inside.

Root's command runs in new PID and IPC namespaces: a process the test starts outside is
out of reach by pid (ESRCH), a SysV segment or POSIX message queue the test makes is not
visible, and sbxc and its reaper cannot have their limits lowered. An unprivileged user
gets no namespaces (unshare needs CAP_SYS_ADMIN, which it has only inside a user
namespace): doctor says so, and the command really shares the host's. Every probe that
must fail inside runs unsandboxed as well, where it must succeed (the control)."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import landlock_abi, make_plan, run_plan  # noqa: E402
from conftest import PYTHON, SANDBOX_PYTHON, base_env, sbxc_argv  # noqa: E402

pytestmark = pytest.mark.live
root_only = pytest.mark.root_only

PY = SANDBOX_PYTHON
ROOT = os.geteuid() == 0

if landlock_abi() < 6:
    pytest.skip(f"Landlock ABI {landlock_abi()} here; these tests need 6", allow_module_level=True)

# Run inside and outside alike. prlimit first reads the target's RLIMIT_NOFILE and then
# writes the same values back: a probe that gets through changes nothing.
PROBE_LIB = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def prlimit(pid):
    lim = (ctypes.c_uint64 * 2)()
    if libc.prlimit64(pid, 7, None, lim) != 0:
        return ctypes.get_errno()
    return 0 if libc.prlimit64(pid, 7, lim, None) == 0 else ctypes.get_errno()

def kill0(pid):
    try:
        os.kill(pid, 0)
        return 0
    except OSError as e:
        return e.errno

def stat_ppid(pid):
    data = open(f"/proc/{pid}/stat", "rb").read()
    return int(data[data.rfind(b")") + 2:].split()[1])

def cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError as e:
        return f"unreadable: {e.strerror}"
'''

VICTIM_PROBE = PROBE_LIB + r'''
pid = int(sys.argv[1])
print(json.dumps({"kill0": kill0(pid), "prlimit": prlimit(pid), "proc_visible": os.path.exists(f"/proc/{pid}/stat")}))
'''

# The parent chain: getppid(), and the same chain as /proc (the host's procfs) numbers it:
# the reaper, then sbxc.
CHAIN_PROBE = PROBE_LIB + r'''
reaper = stat_ppid("self")
top = stat_ppid(reaper)
out = {"getppid": os.getppid(), "targets": {}}
for pid in {os.getppid(), reaper, top} - {0}:
    out["targets"][str(pid)] = {"cmdline": cmdline(pid), "prlimit": prlimit(pid)}
print(json.dumps(out))
'''


def _run(tree, tmp_path, cmd, **kw):
    return run_plan(make_plan(cases.shared_rules(tree), project=f"{tree}/proj"), "landlock", cmd,
                    cwd=f"{tree}/proj", tmp=str(tmp_path), **kw)


def _probe_inside(tree, tmp_path, code, *args):
    r = _run(tree, tmp_path, [PY, "-c", code, *map(str, args)])
    assert r.rc == 0, r
    return json.loads(r.out.strip().splitlines()[-1])


def _probe_outside(code, *args):
    p = subprocess.run([PY, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def victim():
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait(10)


def _host_pidns() -> str:
    return os.readlink("/proc/self/ns/pid")


# ------------------------------------------------------------------ what doctor says

def test_doctor_and_the_runner_agree_on_namespaces(tree, tmp_path):
    """Root: doctor says yes and the command is in other PID and IPC namespaces. An
    unprivileged user: doctor says no, with the reason, and the command really is in the
    host's (a run that claimed isolation it lacks would be worse than none)."""
    d = subprocess.run(sbxc_argv("doctor", "--root", str(tmp_path / "cache")), capture_output=True, text=True,
                       env=base_env(os.environ.get("HOME", "/root")), timeout=60)
    line = next(x for x in d.stdout.splitlines() if "landlock PID and IPC namespaces:" in x)
    inside = _probe_inside(tree, tmp_path, "import json, os; print(json.dumps([os.readlink('/proc/self/ns/pid'), "
                                           "os.readlink('/proc/self/ns/ipc'), os.getppid()]))")
    pidns, ipcns, ppid = inside
    if ROOT:
        assert ": yes (" in line, line
        assert pidns != _host_pidns() and ipcns != os.readlink("/proc/self/ns/ipc")
        assert ppid == 0  # the reaper is outside the command's namespace
    else:
        assert ": no (" in line and "user namespace" in line and "shares the host's PID and IPC namespaces" in line, line
        assert pidns == _host_pidns() and ipcns == os.readlink("/proc/self/ns/ipc")
        assert ppid > 1


# Refuses unshare(2) with CLONE_NEWPID (as a container's seccomp policy may), then execs
# the rest of argv: sbxc under it cannot make the namespaces.
NO_PIDNS = r"""
import errno, os, sys
import pyseccomp as s
f = s.SyscallFilter(s.ALLOW)
f.add_rule(s.ERRNO(errno.EPERM), "unshare", s.Arg(0, s.MASKED_EQ, 0x20000000, 0x20000000))
f.load()
os.execv(sys.argv[1], sys.argv[1:])
"""


@root_only
def test_root_without_namespaces_is_refused(project, home):
    """Fail closed: where root cannot make them, the run stops with 125 and one line, and
    doctor says that Landlock runs as root refuse. Control: the same run without the
    outer filter starts the command."""
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\n")
    marker = os.path.join(project, "ran")
    cmd = sbxc_argv("exec", "--backend", "landlock", "--", "/bin/sh", "-c", f"echo x > {marker}")
    env = base_env(home)
    r = subprocess.run([PYTHON, "-c", NO_PIDNS, *cmd], env=env, cwd=project, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 125 and not os.path.exists(marker), r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbxc: new PID and IPC namespaces for the root command "
                                                   "could not be made (Operation not permitted)"), r.stderr
    d = subprocess.run([PYTHON, "-c", NO_PIDNS, *sbxc_argv("doctor", "--root", os.path.join(project, "c"))],
                       env=env, cwd=project, capture_output=True, text=True, timeout=60)
    assert "landlock PID and IPC namespaces: no (" in d.stdout and "refuse (exit 125)" in d.stdout, d.stdout
    ok = subprocess.run(cmd, env=env, cwd=project, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and os.path.exists(marker), ok  # control


# ------------------------------------------------------------------ processes outside

@root_only
def test_outside_process_unreachable_by_pid(tree, tmp_path, victim):
    """Without a PID namespace a root command (capabilities dropped, uid still 0) could
    signal, renice or prlimit every root process; in its own it finds none by pid."""
    outside = _probe_outside(VICTIM_PROBE, victim.pid)
    assert outside == {"kill0": 0, "prlimit": 0, "proc_visible": True}  # control
    inside = _probe_inside(tree, tmp_path, VICTIM_PROBE, victim.pid)
    assert inside["kill0"] == errno.ESRCH and inside["prlimit"] == errno.ESRCH, inside
    # /proc is still the host's (no mount namespace): the entry stays visible, as the
    # report says (command lines, not memory or environment).
    assert inside["proc_visible"] is True
    r = _run(tree, tmp_path, ["/bin/sh", "-c", f"kill -0 {victim.pid}"])
    assert r.rc != 0 and victim.poll() is None, r


def test_supervisors_unreachable_by_prlimit(tree, tmp_path):
    """A command that lowers sbxc's or its reaper's limits (prlimit on their pids) could
    make the post-run work fail. Root: they are outside its PID namespace (ESRCH). An
    unprivileged user has no such namespace: this needs the seccomp filter to refuse
    prlimit on other processes (EPERM), and fails where the filter does not."""
    outside = _probe_outside(CHAIN_PROBE)
    assert outside["getppid"] > 1 and outside["targets"][str(outside["getppid"])]["prlimit"] == 0  # control
    inside = _probe_inside(tree, tmp_path, CHAIN_PROBE)
    targets = inside["targets"]
    # Both supervisors were found (the reaper is a fork of sbxc: the same command line).
    assert len([t for t in targets.values() if "cases.py run" in t["cmdline"]]) == 2, inside
    for pid, t in targets.items():
        assert t["prlimit"] in (errno.ESRCH, errno.EPERM), (pid, t)
    if ROOT:
        assert inside["getppid"] == 0 and all(t["prlimit"] == errno.ESRCH for t in targets.values()), inside


# ------------------------------------------------------------------ IPC objects of the host

def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    libc.mq_unlink.argtypes = [ctypes.c_char_p]
    libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return libc


IPC_PROBE = r'''
import ctypes, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
libc.mq_unlink.argtypes = [ctypes.c_char_p]
key, name = int(sys.argv[1]), sys.argv[2].encode()
out = {}
out["shmget"] = 0 if libc.shmget(key, 0, 0) >= 0 else ctypes.get_errno()
out["ipcs_lists_key"] = ("0x%08x" % key) in subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
out["mq_open"] = 0 if libc.mq_open(name, 2, 0, None) >= 0 else ctypes.get_errno()  # O_RDWR
own = name + b"-own"
fd = libc.mq_open(own, 0o100 | 2, 0o600, None)  # O_CREAT: a queue of the command's own
out["own_mq"] = 0 if fd >= 0 else ctypes.get_errno()
if fd >= 0:
    libc.mq_unlink(own)
print(json.dumps(out))
'''


@pytest.fixture
def host_ipc():
    """A SysV shared memory segment and a POSIX message queue, made on the host: (key, name)."""
    libc = _libc()
    key = int.from_bytes(os.urandom(3), "big") | 0x5B000000
    name = f"/sbxc-test-{os.urandom(4).hex()}"
    shmid = libc.shmget(key, 4096, 0o1000 | 0o600)  # IPC_CREAT
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    mq = libc.mq_open(name.encode(), 0o100 | 2, 0o600, None)
    assert mq >= 0, os.strerror(ctypes.get_errno())
    try:
        yield key, name
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID
        os.close(mq)
        libc.mq_unlink(name.encode())


@root_only
def test_host_ipc_objects_not_visible(tree, tmp_path, host_ipc):
    """Visible to a probe outside; inside, the command's IPC namespace has SysV objects and
    a message-queue file system of its own (the kernel's internal mount: none is needed),
    so neither the segment nor the queue is found."""
    outside = _probe_outside(IPC_PROBE, *host_ipc)
    assert outside == {"shmget": 0, "ipcs_lists_key": True, "mq_open": 0, "own_mq": 0}  # control
    inside = _probe_inside(tree, tmp_path, IPC_PROBE, *host_ipc)
    assert inside["shmget"] == errno.ENOENT and inside["ipcs_lists_key"] is False, inside
    assert inside["mq_open"] == errno.ENOENT, inside


def test_message_queues_fail_closed(tree, tmp_path, host_ipc):
    """POSIX message queues are files of the mqueue file system's internal mount, which no
    Landlock rule lies above: opening the host's queue and making one of the command's own
    are both refused (EACCES), with or without an IPC namespace (root: the host's queue is
    not even found). The seccomp filter may refuse the call first (EPERM)."""
    outside = _probe_outside(IPC_PROBE, *host_ipc)
    assert outside["mq_open"] == 0 and outside["own_mq"] == 0  # control
    inside = _probe_inside(tree, tmp_path, IPC_PROBE, *host_ipc)
    assert inside["mq_open"] == (errno.ENOENT if ROOT else errno.EACCES) or inside["mq_open"] == errno.EPERM, inside
    assert inside["own_mq"] in (errno.EACCES, errno.EPERM), inside


# ------------------------------------------------------------------ the command's own view

@root_only
def test_proc_self_and_pids_in_the_namespace(tree, tmp_path):
    """/proc is the host's: /proc/self still names the reader (the kernel resolves it in
    the procfs's namespace), with the host's number, while getpid() counts in the
    command's namespace; /proc/self/status lists both (NSpid)."""
    code = ("import os; st = open('/proc/self/status').read(); "
            "nspid = [l.split()[1:] for l in st.splitlines() if l.startswith('NSpid:')][0]; "
            "print(os.getpid(), os.readlink('/proc/self'), open('/proc/self/stat').read().split()[0], "
            "' '.join(nspid), len(os.listdir('/proc/self/fd')) > 0)")
    r = _run(tree, tmp_path, [PY, "-c", code])
    assert r.rc == 0, r
    own, link, stat_pid, nspid, fds = r.out.split(" ", 3)[0], *r.out.split()[1:3], r.out.split()[3:-1], r.out.split()[-1]
    assert own == "2"  # the reaper's second child: PID 1 is the namespace's idle init
    assert link == stat_pid and int(link) > 2
    assert nspid == [link, "2"] and fds == "True"


@root_only
def test_hostname_cannot_change(tree, tmp_path):
    """No UTS namespace: sethostname needs CAP_SYS_ADMIN, which the command lacks. The
    probe sets the current name (so a success would change nothing); the control, the
    same call as root outside, succeeds."""
    code = ("import socket, sys\ntry:\n    socket.sethostname(socket.gethostname())\n    print('set')\n"
            "except OSError as e:\n    print(e.errno)")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=30).stdout.strip()
    assert out == "set"  # control
    r = _run(tree, tmp_path, [PY, "-c", code])
    assert r.rc == 0 and r.out.strip() == str(errno.EPERM), r
    assert socket.gethostname()


# ------------------------------------------------------------------ status and signals

def _start(tmp_path, tree, cmd, **kw) -> subprocess.Popen:
    pf = cases.planfile_for(make_plan(cases.shared_rules(tree), project=f"{tree}/proj"), "landlock")
    path = str(tmp_path / f"plan-{os.urandom(4).hex()}.json")
    with open(path, "w") as f:
        json.dump(pf, f)
    return subprocess.Popen([sys.executable, cases.__file__, "run", path, "--", *cmd], cwd=f"{tree}/proj", **kw)


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


def _alive(pid: int) -> bool:
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


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


HOST_PID = "read -r hp _ < /proc/self/stat; echo $hp"


def test_signals_reach_a_command_without_handlers(tree, tmp_path):
    """The command is not PID 1 of its namespace (a PID 1 ignores signals it has no
    handler for): its own `kill -TERM $$` and a Ctrl-C or SIGTERM forwarded by sbxc end
    it with 128+N, as unsandboxed."""
    assert _run(tree, tmp_path, ["/bin/sh", "-c", "kill -TERM $$; sleep 5"]).rc == 128 + signal.SIGTERM
    for sig in (signal.SIGINT, signal.SIGTERM):
        ready = f"{tree}/proj/sub/ready-{sig}"
        p = _start(tmp_path, tree, ["/bin/sh", "-c", f"echo x > {ready}; exec sleep 30"])
        try:
            _wait_file(ready)
            time.sleep(0.1)  # past the exec
            p.send_signal(sig)
            assert p.wait(20) == 128 + sig
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)


@root_only
def test_sbxc_and_reaper_killed_together_leave_nothing(tree, tmp_path):
    """Without a PID namespace, SIGKILL to sbxc and its reaper at once leaves the command's
    background processes running, reparented to init. In the namespace, its init dies with
    the reaper (parent-death signal), and the kernel ends every process in it."""
    pidfile = f"{tree}/proj/sub/bg.pid"
    p = _start(tmp_path, tree, ["/bin/sh", "-c",
                                f"(setsid /bin/sh -c '{HOST_PID} > {pidfile}; exec sleep 60' &); exec sleep 60"],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = 0
    try:
        pid = int(_wait_file(pidfile))
        assert _alive(pid)  # control: it runs
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            reaper = int(f.read().split()[0])
        os.kill(reaper, signal.SIGKILL)
        p.kill()
        p.wait(10)
        assert _wait_gone(pid, 10), "a background process outlived both sbxc and its reaper"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if pid:
            _kill(pid)


def test_lowered_limits_do_not_stop_the_post_run_clean_up(tree, tmp_path):
    """Someone of the same uid lowers the soft RLIMIT_NOFILE of sbxc and of its reaper to 3
    while the command runs (here the test, as a command could where prlimit on other
    processes is not refused). Listing their children then fails with EMFILE; read as
    "no children", the command's background process outlived the run. Both put their
    soft limits back before ending what is left, and say that a process changed them."""
    pidfile = f"{tree}/proj/sub/bg.pid"
    go = f"{tree}/proj/sub/go"
    p = _start(tmp_path, tree, ["/bin/sh", "-c",
                                f"(setsid /bin/sh -c '{HOST_PID} > {pidfile}; exec sleep 60' "
                                f"</dev/null >/dev/null 2>&1 &); while [ ! -e {go} ]; do sleep 0.05; done"],
               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = 0
    try:
        pid = int(_wait_file(pidfile))
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            reaper = int(f.read().split()[0])
        for target in (p.pid, reaper):
            _soft, hard = resource.prlimit(target, resource.RLIMIT_NOFILE)
            resource.prlimit(target, resource.RLIMIT_NOFILE, (3, hard))
        open(go, "w").close()
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert _wait_gone(pid, 2), f"the background process outlived the run: {err}"
        assert "changed the resource limits of sbxc" in err and "of the sandbox's reaper" in err, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if pid:
            _kill(pid)


def test_python_used_for_sbxc_is_this_one():
    # The supervisors' command line (what CHAIN_PROBE matches) comes from this interpreter.
    assert PYTHON == sys.executable
