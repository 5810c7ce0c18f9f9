"""Live Landlock runs: what a command inside can and cannot do. Each denial has a control
that shows the same action works where the policy allows it (so the test can fail)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import landlock_abi, make_plan, rule, run_plan  # noqa: E402
from conftest import SANDBOX_PYTHON  # noqa: E402

pytestmark = pytest.mark.live

PY = SANDBOX_PYTHON

if landlock_abi() < 6:
    pytest.skip(f"Landlock ABI {landlock_abi()} here; these tests need 6", allow_module_level=True)


def _plan(root, **kw):
    return make_plan(cases.shared_rules(root), project=f"{root}/proj", **kw)


def _run(root, tmp_path, cmd, **kw):
    plan_kw = {k: kw.pop(k) for k in list(kw) if k in ("network", "ports", "unix", "deny", "env_pass", "min_abi", "best_effort")}
    extra = kw.pop("rules", None)
    plan = make_plan(cases.shared_rules(root) + (extra or []), project=f"{root}/proj", **plan_kw)
    return run_plan(plan, "landlock", cmd, cwd=f"{root}/proj", tmp=str(tmp_path), **kw)


def sh(script):
    return ["/bin/sh", "-c", script]


# ------------------------------------------------------------------ file system

def test_write_outside_project_refused_inside_allowed(tree, tmp_path):
    r = _run(tree, tmp_path, sh(f"echo x > {tree}/outside/o.txt && echo written; echo y > {tree}/proj/a.txt && echo control-ok"))
    assert r.out.splitlines() == ["control-ok"], r
    assert open(f"{tree}/outside/o.txt").read() == "outside\n"
    assert open(f"{tree}/proj/a.txt").read() == "y\n"


def test_masked_file_unreadable_sibling_readable(tree, tmp_path):
    r = _run(tree, tmp_path, sh(f"cat {tree}/home/.ssh/id_rsa; echo; cat {tree}/home/docs/d.txt"))
    assert "SSH-SECRET" not in r.out
    assert "doc" in r.out


def test_masked_folder_unlistable_control_listable(tree, tmp_path):
    r = _run(tree, tmp_path, sh(f"ls {tree}/home/.ssh; echo rc=$?; ls {tree}/home/docs"))
    assert "id_rsa" not in r.out and "rc=2" in r.out
    assert "d.txt" in r.out


def test_hard_link_to_masked_file_refused(tree, tmp_path):
    # proj/sub is writable; proj/secret is masked. A link would give the masked file a
    # second name under a writable parent.
    r = _run(tree, tmp_path, sh(f"ln {tree}/proj/secret/key.txt {tree}/proj/sub/k; cat {tree}/proj/sub/k;"
                                f"ln {tree}/proj/sub/b.txt {tree}/proj/sub/b-link && cat {tree}/proj/sub/b-link"))
    assert "PROJECT-SECRET" not in r.out
    assert not os.path.exists(f"{tree}/proj/sub/k")
    assert "sub file" in r.out  # control: linking an allowed file works


def test_renamed_parent_does_not_unmask(tree, tmp_path):
    r = _run(tree, tmp_path, sh(
        f"mv {tree}/proj/secret {tree}/proj/sub/s2; cat {tree}/proj/sub/s2/key.txt;"
        f"mv {tree}/home/.ssh {tree}/home/ssh2; cat {tree}/home/ssh2/id_rsa;"
        f"mkdir {tree}/proj/sub/d && mv {tree}/proj/sub/d {tree}/proj/sub/d2 && echo control-ok"))
    assert "PROJECT-SECRET" not in r.out and "SSH-SECRET" not in r.out
    assert os.path.exists(f"{tree}/proj/secret/key.txt") and os.path.exists(f"{tree}/home/.ssh/id_rsa")
    assert "control-ok" in r.out


def test_git_hooks_rename_attack(tree, tmp_path):
    hooks = f"{tree}/proj/.git/hooks"
    r = _run(tree, tmp_path, sh(
        f"mv {hooks} {hooks}.old; mkdir -p {hooks}; echo 'echo pwned' > {hooks}/pre-commit;"
        f"rm -rf {hooks}; echo evil > {hooks}/post-checkout;"
        f"echo fine > {tree}/proj/sub/ok.txt && echo control-ok"))
    assert open(f"{hooks}/pre-commit").read() == "#!/bin/sh\nexit 0\n"
    assert sorted(os.listdir(hooks)) == ["pre-commit"]
    assert not os.path.exists(f"{hooks}.old")
    assert "control-ok" in r.out


def test_devices_usable(tree, tmp_path):
    r = _run(tree, tmp_path, sh("echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c"))
    assert r.rc == 0 and r.out.split() == ["4", "4"], r


def test_tmpfs_per_run_folder_removed(tree, tmp_path):
    r = _run(tree, tmp_path, sh('echo "$TMPDIR"; echo hi > "$TMPDIR/f" && cat "$TMPDIR/f"; ls /tmp >/dev/null 2>&1; echo ls=$?'),
             rules=[rule("/tmp", "tmpfs")])
    lines = r.out.splitlines()
    assert lines[0].startswith("/tmp/sbxc-run-") and lines[1] == "hi", r
    assert lines[2] == "ls=2"  # the host's /tmp itself is not there
    assert not os.path.exists(lines[0])  # removed after the run


def test_tmpfs_elsewhere_where_the_report_says(tree, tmp_path, request):
    """What the report says of a tmpfs rule outside /tmp: a per-run folder inside the path
    where sbxc may create one, else in /tmp; TMPDIR names the /tmp rule's folder, or with
    no /tmp rule the first one's; the host's files there are not accessible."""
    own = f"{tree}/scratch"          # sbxc's user may create folders in it
    shut = f"{tree}/shut"            # nobody but root may (0555)
    for d in (own, shut):
        os.makedirs(d)
        with open(f"{d}/host.txt", "w") as f:
            f.write("host\n")
    os.chmod(shut, 0o555)
    request.addfinalizer(lambda: os.chmod(shut, 0o755))  # so that pytest can remove it

    def show(d):
        return sh(f'echo "$TMPDIR"; cat {d}/host.txt 2>/dev/null; echo rc=$?')

    r = _run(tree, tmp_path, show(own), rules=[rule("/tmp", "tmpfs"), rule(own, "tmpfs")])
    lines = r.out.splitlines()
    assert lines[0].startswith("/tmp/sbxc-run-") and lines[1] == "rc=1", r
    r = _run(tree, tmp_path, show(own), rules=[rule(own, "tmpfs")])
    lines = r.out.splitlines()
    assert lines[0].startswith(f"{own}/sbxc-run-") and lines[1] == "rc=1", r
    r = _run(tree, tmp_path, show(shut), rules=[rule(shut, "tmpfs")])
    lines = r.out.splitlines()
    where = shut if os.geteuid() == 0 else "/tmp"
    assert lines[0].startswith(f"{where}/sbxc-run-") and lines[1] == "rc=1", r
    assert sorted(os.listdir(own)) == sorted(os.listdir(shut)) == ["host.txt"]  # nothing left behind
    # The control: without the tmpfs rule the command reads the host's file there.
    r = _run(tree, tmp_path, show(own))
    assert r.out.splitlines()[1:] == ["host", "rc=0"], r


# ------------------------------------------------------------------ Unix sockets

@pytest.fixture
def host_unix_server(tree):
    path = f"{tree}/home/.ssh/agent.sock"
    ctl = f"{tree}/home/docs/ctl.sock"
    servers = []
    for p in (path, ctl):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(p)
        s.listen(4)
        s.settimeout(0.2)
        servers.append(s)
    stop = threading.Event()

    def serve():
        deadline = time.time() + 60
        while not stop.is_set() and time.time() < deadline:
            for s in servers:
                try:
                    c, _ = s.accept()
                    c.sendall(b"HELLO-FROM-HOST\n")
                    c.close()
                except (socket.timeout, OSError):
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield path, ctl
    stop.set()
    t.join(5)
    for s in servers:
        s.close()


def _connect_unix(path):
    return [PY, "-c", f"import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect({path!r})\nprint(s.recv(100).decode())"]


def test_host_unix_socket_under_mask_refused(tree, tmp_path, host_unix_server):
    masked, _ = host_unix_server
    r = _run(tree, tmp_path, _connect_unix(masked))
    assert "HELLO-FROM-HOST" not in r.out and r.rc != 0
    assert "Operation not permitted" in r.err


def test_unix_sockets_allowed_by_policy_reach_unmasked_socket(tree, tmp_path, host_unix_server):
    # Control for the refusal above: with allow_unix_sockets the same client connects.
    _, ctl = host_unix_server
    r = _run(tree, tmp_path, _connect_unix(ctl), unix=True)
    assert "HELLO-FROM-HOST" in r.out, r


# ------------------------------------------------------------------ network

@pytest.fixture
def tcp_server():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        deadline = time.time() + 60
        while not stop.is_set() and time.time() < deadline:
            try:
                c, _ = srv.accept()
                c.sendall(b"TCP-HELLO\n")
                c.close()
            except (socket.timeout, OSError):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    srv.close()


def _tcp_client(port):
    return [PY, "-c", f"import socket\ns=socket.create_connection(('127.0.0.1',{port}),timeout=5)\nprint(s.recv(100).decode())"]


def test_network_off_host_loopback_refused(tree, tmp_path, tcp_server):
    r = _run(tree, tmp_path, _tcp_client(tcp_server), network="off")
    assert "TCP-HELLO" not in r.out and r.rc != 0


def test_network_on_host_loopback_reachable(tree, tmp_path, tcp_server):
    r = _run(tree, tmp_path, _tcp_client(tcp_server), network="on")
    assert "TCP-HELLO" in r.out, r


def test_port_rule_allows_that_port_only(tree, tmp_path, tcp_server):
    ok = _run(tree, tmp_path, _tcp_client(tcp_server), network="rules", ports=[("connect", tcp_server, tcp_server)])
    assert "TCP-HELLO" in ok.out, ok
    other = tcp_server + 1 if tcp_server < 65535 else tcp_server - 1
    no = _run(tree, tmp_path, _tcp_client(tcp_server), network="rules", ports=[("connect", other, other)])
    assert "TCP-HELLO" not in no.out and "Permission denied" in no.err, no


def test_port_rules_refuse_udp_and_mptcp(tree, tmp_path):
    script = ("import socket\n"
              "for a in [(socket.AF_INET, socket.SOCK_DGRAM, 0), (socket.AF_INET, socket.SOCK_STREAM, 262),"
              " (socket.AF_INET6, socket.SOCK_DGRAM, 0), (socket.AF_INET, socket.SOCK_STREAM, 0)]:\n"
              "    try:\n        socket.socket(*a).close(); print('ok')\n"
              "    except OSError as e: print(e.errno)\n")
    r = _run(tree, tmp_path, [PY, "-c", script], network="rules", ports=[("connect", 443, 443)])
    assert r.out.split() == ["1", "1", "1", "ok"], r


def test_in_command_loopback_with_network_off(tree, tmp_path):
    """Landlock cannot tell the command's own loopback from the host's: with the network
    off, a server inside the command cannot even be created (reported as narrowed)."""
    script = ("import socket\ntry:\n    s=socket.socket(); s.bind(('127.0.0.1',0)); print('bound')\n"
              "except OSError as e: print('refused', e.errno)\n")
    r = _run(tree, tmp_path, [PY, "-c", script], network="off")
    assert r.out.strip() == "refused 1", r
    r = _run(tree, tmp_path, [PY, "-c", script], network="on")
    assert r.out.strip() == "bound", r


# ------------------------------------------------------------------ processes

def test_signal_to_outside_process_refused(tree, tmp_path):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        r = _run(tree, tmp_path, sh(f"kill -TERM {victim.pid}; echo rc=$?; sleep 30 & kill $! && echo control-ok"))
        assert victim.poll() is None, "a process outside the sandbox was killed"
        assert "rc=1" in r.out and "control-ok" in r.out, r
    finally:
        victim.kill()
        victim.wait()


def test_tiocsti_refused(tree, tmp_path):
    script = ("import fcntl, termios, os\nfd=os.open('/dev/null', os.O_RDONLY)\n"
              "try:\n    fcntl.ioctl(fd, termios.TIOCSTI, b'x'); print('ok')\nexcept OSError as e: print(e.errno)\n"
              "try:\n    fcntl.ioctl(fd, termios.TIOCGWINSZ, b'\\0'*8); print('ok')\nexcept OSError as e: print(e.errno)\n")
    r = _run(tree, tmp_path, [PY, "-c", script])
    # TIOCSTI refused by the filter (EPERM); the control ioctl reaches the driver (ENOTTY).
    assert r.out.split() == ["1", "25"], r


def test_new_session_no_controlling_terminal(tree, tmp_path):
    r = _run(tree, tmp_path, [PY, "-c", "import os; print(os.getsid(0) == os.getpid())"])
    assert r.out.strip() == "True", r


def test_capabilities_dropped(tree, tmp_path):
    r = _run(tree, tmp_path, ["/bin/cat", "/proc/self/status"])
    caps = {k: v.strip() for k, v in (ln.split(":", 1) for ln in r.out.splitlines() if ln.startswith("Cap"))}
    zero = "0000000000000000"
    assert caps["CapEff"] == zero and caps["CapPrm"] == zero and caps["CapAmb"] == zero, caps
    if os.geteuid() == 0:
        assert caps["CapBnd"] == zero, caps
    nnp = [ln for ln in r.out.splitlines() if ln.startswith("NoNewPrivs")]
    assert nnp and nnp[0].split()[1] == "1"


def test_env_secret_not_passed(tree, tmp_path):
    env = dict(os.environ, SBXC_TEST_SECRET_TOKEN="hunter2")
    r = _run(tree, tmp_path, ["/usr/bin/env"], env=env)
    assert "hunter2" not in r.out and "PATH=" in r.out


def test_exit_status_and_kill9(tree, tmp_path):
    assert _run(tree, tmp_path, sh("exit 7")).rc == 7
    assert _run(tree, tmp_path, sh("kill -9 $$")).rc == 137


def test_inherited_fd_closed(tree, tmp_path):
    fd = os.open(f"{tree}/home/.ssh/id_rsa", os.O_RDONLY)
    try:
        os.set_inheritable(fd, True)
        r = _run(tree, tmp_path, sh(f"cat <&{fd}; ls /proc/self/fd"), pass_fds=(fd,))
        assert "SSH-SECRET" not in r.out
        assert str(fd) not in r.out.split() or fd <= 3
    finally:
        os.close(fd)


def test_keyring_is_fresh(tree, tmp_path):
    # keyctl is refused outright inside; the fresh session keyring is the second wall.
    script = ("import ctypes\nlibc=ctypes.CDLL(None, use_errno=True)\n"
              "r=libc.syscall(250, 0, -3, 0)\nprint(r, ctypes.get_errno())\n")
    if os.uname().machine != "x86_64":
        pytest.skip("syscall number for x86_64 only")
    r = _run(tree, tmp_path, [PY, "-c", script])
    assert r.out.split() == ["-1", "1"], r


# ------------------------------------------------------------------ ABI handling

def test_min_abi_above_kernel_refused(tree, tmp_path):
    r = _run(tree, tmp_path, ["/bin/true"], min_abi=99)
    assert r.rc == 125
    assert f"ABI is {landlock_abi()}" in r.err and "99" in r.err


def test_no_leftovers(tree, tmp_path):
    # Other suites may run sbxc concurrently in /tmp: look at this run's own folder, and
    # at new sbxc-run-* folders of this uid.
    def mine():
        out = set()
        for n in os.listdir("/tmp"):
            if n.startswith("sbxc-run-"):
                try:
                    if os.lstat(f"/tmp/{n}").st_uid == os.getuid():
                        out.add(n)
                except FileNotFoundError:
                    pass
        return out

    before = mine()
    r = _run(tree, tmp_path, sh('echo "$TMPDIR"; : > "$TMPDIR/f"; mkdir "$TMPDIR/d"; ln -s / "$TMPDIR/d/root"'),
             rules=[rule("/tmp", "tmpfs")])
    run_dir = r.out.strip()
    assert run_dir.startswith("/tmp/sbxc-run-"), r
    assert not os.path.lexists(run_dir)
    assert not (mine() - before)
    assert os.path.isdir("/usr/bin")  # the symlink left inside was not followed when removing


def test_port_rules_close_listen_without_bind_and_fastopen(tree, tmp_path, tcp_server):
    script = ("import socket\ns=socket.socket()\n"
              "try:\n    s.listen(); print('listen ok')\nexcept OSError as e: print('listen', e.errno)\n"
              "c=socket.socket()\n"
              f"try:\n    c.sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {tcp_server})); print('fastopen ok')\n"
              "except OSError as e: print('fastopen', e.errno)\n"
              f"c=socket.create_connection(('127.0.0.1', {tcp_server}), timeout=5); print(c.recv(100).decode().strip())\n")
    r = _run(tree, tmp_path, [PY, "-c", script], network="rules", ports=[("connect", tcp_server, tcp_server)])
    # listen() refused without a bind rule; TCP Fast Open refused even to the allowed
    # port (it would connect without the connect check); a plain connect works (control).
    assert r.out.split("\n")[:3] == ["listen 1", "fastopen 1", "TCP-HELLO"], r


def test_command_dies_with_sbxc(tree, tmp_path):
    """SIGKILL to sbxc (no chance to clean up) still ends the sandboxed command."""
    plan = make_plan(cases.shared_rules(tree), project=f"{tree}/proj")
    pf = cases.planfile_for(plan, "landlock")
    import json

    path = str(tmp_path / "p.json")
    with open(path, "w") as f:
        json.dump(pf, f)
    marker = f"{tree}/proj/sub/alive"
    # The shell's PID as /proc numbers it ($$ counts in the command's PID namespace, for root).
    p = subprocess.Popen([PY, cases.__file__, "run", path, "--", "/bin/sh", "-c",
                          f"read -r hp _ < /proc/self/stat; echo $hp > {marker}.pid; while :; do sleep 0.2; done"],
                         cwd=f"{tree}/proj")
    try:
        deadline = time.time() + 20
        while not os.path.exists(marker + ".pid") and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        pid = int(open(marker + ".pid").read())
        os.kill(pid, 0)  # control: the command is running
        p.kill()
        p.wait(10)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the command outlived sbxc")
    finally:
        if p.poll() is None:
            p.kill()


def test_bind_rule_range(tree, tmp_path):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    lo = probe.getsockname()[1]
    probe.close()
    lo = min(lo, 65000)
    script = ("import socket\n"
              f"for port in ({lo}, {lo + 1}, {lo + 3}):\n"
              "    s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "    try:\n        s.bind(('127.0.0.1', port)); s.listen(); print('ok')\n"
              "    except OSError as e: print(e.errno)\n    s.close()\n")
    r = _run(tree, tmp_path, [PY, "-c", script], network="rules", ports=[("bind", lo, lo + 1)])
    # inside the range: bound (or in use by someone else: 98); outside: EACCES from Landlock
    got = r.out.split()
    assert got[0] in ("ok", "98") and got[1] in ("ok", "98") and got[2] == "13", r
