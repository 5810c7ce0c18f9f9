"""What a command inside a real bwrap sandbox can and cannot do (issue 3).

Every denial has a control: the same action succeeding where the policy allows it, so a
test cannot pass because the action was impossible anyway. Runs as root and as an
unprivileged user (CI runs the suite twice).
"""
from __future__ import annotations

import os
import pty
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import base_env, own_code_rules, remove_project_cache, run, runc_for, sbxc_argv, snapshot

pytestmark = pytest.mark.live

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def policy(*fs, network="false", home="read-only", extra=""):
    rules = "".join(f"  - {r}\n" for r in fs)
    text = f"sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nhome: {home}\nnetwork: {network}\n"
    if rules:
        text += "filesystem:\n" + rules
    return text + extra


DEFAULT = policy()


def py(code):
    return [PY, "-c", textwrap.dedent(code)]


# ------------------------------------------------------------------ filesystem

def test_write_outside_project_fails_inside_succeeds(sbxc, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    r = sbxc(DEFAULT, "sh", "-c", f"echo x > {outside}/f; echo rc=$?; echo y > {sbxc.project}/src/made; echo rc2=$?")
    assert "rc2=0" in r.out, r
    assert "rc=0" not in r.out, r
    assert not (outside / "f").exists()
    assert (tmp_path / "project" / "src" / "made").read_text() == "y\n"
    # /etc and /usr are not writable even for root inside
    r = sbxc(DEFAULT, "sh", "-c", "touch /etc/sbxc-test-file || echo denied")
    assert "denied" in r.out and not os.path.exists("/etc/sbxc-test-file")


def test_home_read_only_vs_writable(sbxc):
    target = os.path.join(sbxc.home, "written")
    r = sbxc(DEFAULT, "sh", "-c", f"echo x > {target} && echo wrote; cat {sbxc.home}/.config/tool/settings")
    assert "wrote" not in r.out and not os.path.exists(target), r
    assert "visible" in r.out, r  # the read-only home is readable
    r = sbxc(policy(home="writable"), "sh", "-c", f"echo x > {target} && echo wrote")
    assert "wrote" in r.out and os.path.exists(target), r


def test_masked_file_and_folder(sbxc):
    r = sbxc(DEFAULT, "sh", "-c",
             f"cat {sbxc.home}/.netrc; echo rc=$?; ls -A {sbxc.home}/.ssh | wc -l; cat {sbxc.home}/.ssh/id_rsa; "
             f"echo x > {sbxc.home}/.netrc; echo w=$?; touch {sbxc.home}/.ssh/new; echo t=$?")
    assert "SECRET" not in r.out and "PRIVATE" not in r.out, r
    lines = r.out.split("\n")
    assert lines[0] == "rc=0"  # an empty file
    assert lines[1].strip() == "0"  # an empty folder
    assert "w=0" not in r.out and "t=0" not in r.out, r
    assert not os.path.exists(os.path.join(sbxc.home, ".ssh", "new"))
    # control: without the mask (a policy that does not extend the default) the file is readable
    plain = "sbxc: 1\nbackend: bwrap\nnetwork: false\nhome: read-only\nfilesystem:\n  - read /\n  - write {project}\n"
    r = sbxc(plain, "sh", "-c", f"cat {sbxc.home}/.netrc; cat {sbxc.home}/.ssh/id_rsa")
    assert "SECRET" in r.out and "PRIVATE" in r.out, r


def test_masked_project_file(sbxc):
    secret = os.path.join(sbxc.project, ".env")
    with open(secret, "w") as f:
        f.write("TOKEN=abc\n")
    r = sbxc(policy("mask {project}/.env"), "sh", "-c", f"cat {secret}; echo x >> {secret}; echo rc=$?")
    assert "TOKEN" not in r.out and "rc=0" not in r.out, r
    assert open(secret).read() == "TOKEN=abc\n"
    r = sbxc(DEFAULT, "cat", secret)
    assert "TOKEN=abc" in r.out


def _connect_unix(path):
    return py(f"""
        import socket
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({path!r}); print("got", s.recv(10))
        except OSError as e:
            print("refused", e.errno)
    """)


def test_unix_socket_under_masked_path(sbxc, unix_server):
    # in the home folder: /tmp is a private tmpfs under the default policy
    d = os.path.join(sbxc.home, "agent")
    os.mkdir(d)
    sock = os.path.join(d, "s.sock")
    srv = unix_server(sock)
    r = sbxc(policy(f"mask {d}"), *_connect_unix(sock))
    assert "refused" in r.out and "pong" not in r.out, r
    r = sbxc(policy(f"mask {sock}"), *_connect_unix(sock))
    assert "refused" in r.out and "pong" not in r.out, r
    assert srv.hits == 0
    r = sbxc(policy(), *_connect_unix(sock))  # control: not masked
    assert "pong" in r.out, r
    assert os.path.exists(sock) and stat.S_ISSOCK(os.lstat(sock).st_mode)


# ------------------------------------------------------------------ network

_NET_PROBE = """
    import socket, threading
    port = {port}
    def try_host():
        s = socket.socket(); s.settimeout(3)
        try:
            s.connect(("127.0.0.1", port)); print("host:", s.recv(10))
        except OSError as e:
            print("host: refused", e.errno)
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    def serve():
        c, _ = srv.accept(); c.sendall(b"inner\\n"); c.close()
    t = threading.Thread(target=serve, daemon=True); t.start()
    c = socket.socket(); c.settimeout(3); c.connect(srv.getsockname()); print("inner:", c.recv(10))
    try_host()
    try:
        socket.getaddrinfo("example.com", 443); print("dns: resolved")
    except OSError as e:
        print("dns: failed")
"""


def test_network_off(sbxc, tcp_server):
    r = sbxc(DEFAULT, *py(_NET_PROBE.format(port=tcp_server.port)))
    assert "inner: b'inner\\n'" in r.out, r  # loopback inside one command works
    assert "host: refused" in r.out, r       # the host's loopback is another namespace
    assert "dns: failed" in r.out, r
    assert tcp_server.hits == 0
    # control: --network=true beats the file
    r = sbxc(DEFAULT, *py(_NET_PROBE.format(port=tcp_server.port)), args=("--network=true",))
    assert "host: b'pong\\n'" in r.out, r
    assert tcp_server.hits == 1


def test_network_flag_false_beats_file(sbxc, tcp_server):
    r = sbxc(policy(network="true"), *py(_NET_PROBE.format(port=tcp_server.port)), args=("--network=false",))
    assert "host: refused" in r.out, r
    r = sbxc(policy(network="true"), *py(_NET_PROBE.format(port=tcp_server.port)))
    assert "host: b'pong\\n'" in r.out, r


def test_per_port_rules_narrow_to_no_network(sbxc, tcp_server):
    pol = policy(network=f"[connect tcp {tcp_server.port}]")
    r = sbxc(pol, *py(_NET_PROBE.format(port=tcp_server.port)))
    assert "host: refused" in r.out, r
    assert tcp_server.hits == 0


# ------------------------------------------------------------------ processes

_TIOCSTI = """
    import fcntl, os, termios
    def inject(fd):
        try:
            fcntl.ioctl(fd, termios.TIOCSTI, b"X"); return "injected"
        except OSError as e:
            return f"denied {e.errno}"
    print("plain", inject(0))
    try:
        os.setsid()
    except OSError:
        pass  # a session leader already (bwrap's --new-session, an OCI container's pid 1)
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # the terminal as its controlling one, where it is nobody's
        print("ctty", inject(0))
    except OSError as e:
        print("ctty-denied", e.errno)
"""


def _drain(master):
    import select

    got = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 1024)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
def test_tiocsti_denied(sbxc, backend, request):
    """Nothing the command does pushes input into the caller's terminal. On OCI the
    command gets that terminal itself (a run on a terminal is `runc create`)."""
    runc_for(request)
    master, slave = pty.openpty()
    try:
        r = sbxc(DEFAULT.replace("backend: bwrap", f"backend: {backend}"), *py(_TIOCSTI), stdin=slave)
        if backend == "oci":
            # On the terminal itself (a pipe would give ENOTTY), which the command, a session
            # leader without one, can make its controlling terminal: the filter refuses.
            assert "plain denied 1" in r.out and "ctty denied 1" in r.out, r
        assert "injected" not in r.out, r
        assert "plain denied" in r.out, r
        # nothing reached the terminal's input queue
        assert b"X" not in _drain(master)
    finally:
        os.close(master)
        os.close(slave)
    # control: the same code outside the sandbox, on a terminal of its own, can inject
    # (where the kernel still allows TIOCSTI at all)
    try:
        legacy = open("/proc/sys/dev/tty/legacy_tiocsti").read().strip()
    except OSError:
        legacy = "1"
    if legacy != "1" and os.geteuid() != 0:
        # dev.tty.legacy_tiocsti=0 forbids TIOCSTI to everyone without CAP_SYS_ADMIN: no
        # control is possible here (the denial above was still checked).
        return
    master, slave = pty.openpty()
    try:
        p = subprocess.run(py(_TIOCSTI), stdin=slave, capture_output=True, text=True, timeout=30)
        assert "ctty injected" in p.stdout, p
    finally:
        os.close(master)
        os.close(slave)


def test_no_capabilities(sbxc):
    r = sbxc(DEFAULT, "grep", "-E", "^Cap(Inh|Prm|Eff|Bnd|Amb)|^NoNewPrivs", "/proc/self/status")
    lines = dict(ln.split(":\t") for ln in r.out.strip().split("\n"))
    assert all(lines[k] == "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")), r
    assert lines["NoNewPrivs"] == "1"
    if os.geteuid() == 0:  # control: root outside has capabilities
        own = open("/proc/self/status").read()
        assert "CapEff:\t0000000000000000" not in own


@pytest.mark.root_only  # what uid 0 inside can do
def test_root_cannot_write_proc_sys_or_regain_caps(sbxc):
    r = sbxc(DEFAULT, "sh", "-c",
             "echo 1 > /proc/sys/kernel/sysrq; echo a=$?; echo sbxc > /proc/sys/kernel/hostname; echo b=$?; "
             "echo 3 > /proc/sys/vm/drop_caches; echo c=$?; unshare -Ur true; echo d=$?; id -u")
    assert "a=0" not in r.out and "b=0" not in r.out and "c=0" not in r.out and "d=0" not in r.out, r
    assert r.out.strip().endswith("0")  # still uid 0 inside, and still powerless
    assert open("/proc/sys/kernel/hostname").read().strip() != "sbxc"


def test_environment_allowlist(sbxc):
    env = {"GITHUB_TOKEN": "ghp_secretvalue", "AWS_SECRET_ACCESS_KEY": "awsvalue"}
    r = sbxc(DEFAULT, "sh", "-c", "env; cat /proc/1/environ | tr '\\0' '\\n'; for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; done", env=env)
    assert "ghp_secretvalue" not in r.out and "awsvalue" not in r.out, r
    assert "HOME=" in r.out  # the allowed environment is there
    # control: passed by name, it is there (and still not in bwrap's own process)
    pol = policy(extra="env:\n  pass: [GITHUB_TOKEN]\n")
    r = sbxc(pol, "sh", "-c", "echo token=$GITHUB_TOKEN", env=env)
    assert "token=ghp_secretvalue" in r.out, r


def test_proc1_environ_holds_no_caller_secret(sbxc):
    r = sbxc(DEFAULT, "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ; echo; tr '\\0' ' ' < /proc/1/cmdline",
             env={"SBXC_TEST_SECRET": "s3cr3t-value"})
    assert r.rc == 0, r
    assert "s3cr3t-value" not in r.out and "SBXC_TEST_SECRET" not in r.out, r
    assert "bwrap" in r.out  # it is bwrap's process we looked at


def test_exit_status_and_signals(sbxc):
    assert sbxc(DEFAULT, "sh", "-c", "exit 7").rc == 7
    assert sbxc(DEFAULT, "sh", "-c", "kill -9 $$").rc == 137
    assert sbxc(DEFAULT, "sh", "-c", "kill -TERM $$").rc == 143
    assert sbxc(DEFAULT, "true").rc == 0


def test_command_not_found_and_not_executable(sbxc):
    r = sbxc(DEFAULT, "sbxc-no-such-command-xyz")
    assert r.rc == 127, r
    script = os.path.join(sbxc.project, "notexec.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(script, 0o644)
    r = sbxc(DEFAULT, script)
    assert r.rc == 126 and "ran" not in r.out, r
    # a program visible on the host but hidden inside: bwrap's execvp fails -> 127
    hidden = os.path.join(sbxc.home, ".ssh", "tool")
    with open(hidden, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(hidden, 0o755)
    r = sbxc(DEFAULT, hidden)
    assert r.rc in (126, 127) and "ran" not in r.out, r


def _ours(root):
    """Top-level names in a shared folder that sbxc or bwrap could have made. Other test
    runs on this machine use /tmp at the same time, so only these names are compared."""
    try:
        names = os.listdir(root)
    except OSError:
        return set()
    # (Throwaway caches are left out: other tests make them concurrently; this run must
    # not need one, which its empty stderr shows.)
    mine = (".bubblewrap", "bwrap", f"sbxc-{os.getuid()}", ".sbxc")
    return {n for n in names if n.startswith(mine)}


def test_no_leftovers_on_host(sbxc, tmp_path):
    from sbxc.runtime.planstore import plans_dir

    pol = policy("mask {project}/.env {project}/missing-secret {project}/sock", "read {project}/.git/hooks")
    with open(os.path.join(sbxc.project, ".env"), "w") as f:
        f.write("A=1\n")
    sbxc(pol, "true")  # first run: the cache folders and the plan are made (they are meant to stay)
    from sbxc import cache

    # This project's cache folder only: other suites add and remove theirs concurrently.
    own_cache = cache.project_dir(os.path.dirname(plans_dir()), sbxc.project)
    before = (snapshot(sbxc.project, sbxc.home, own_cache, depth=6), _ours("/tmp"), _ours("/var/tmp"), _ours("/run/user"))
    r = sbxc(pol, "sh", "-c", "ls / /tmp >/dev/null; echo hi > /tmp/inner; mkdir -p /tmp/x/y; echo c > $XDG_CACHE_HOME/c")
    assert r.rc == 0 and r.err == "", r
    after = (snapshot(sbxc.project, sbxc.home, own_cache, depth=6), _ours("/tmp"), _ours("/var/tmp"), _ours("/run/user"))
    for b, a in zip(before, after):
        new = {x for x in a - b if not str(x[1]).endswith("/c")}  # the cache write is the command's own
        assert new == set(), new
        assert b - a == set(), b - a
    assert not os.path.exists(os.path.join(sbxc.project, "missing-secret"))
    assert not os.path.exists(os.path.join(sbxc.project, "sock"))


def test_inherited_fd_unusable(sbxc, tmp_path):
    secret = tmp_path / "fdsecret"
    secret.write_text("fd-secret-content\n")
    fd = os.open(str(secret), os.O_RDONLY)
    try:
        probe = f"cat /proc/self/fd/{fd} 2>&1; cat <&{fd} 2>&1; ls /proc/self/fd"
        r = sbxc(DEFAULT, "sh", "-c", probe, pass_fds=(fd,))
        assert "fd-secret-content" not in r.out, r
        # control: the same command, same descriptor, outside the sandbox reads it
        p = subprocess.run(["cat", f"/proc/self/fd/{fd}"], pass_fds=(fd,), capture_output=True, text=True, timeout=30)
        assert "fd-secret-content" in p.stdout
    finally:
        os.close(fd)


def test_git_hooks_rename_attack(sbxc):
    hooks = os.path.join(sbxc.project, ".git", "hooks")
    pol = policy("read {project}/.git/hooks")
    r = sbxc(pol, "sh", "-c",
             "mv .git .git2; echo mv=$?; mkdir -p .git/hooks; echo evil > .git/hooks/pre-commit; "
             "echo evil > .git2/hooks/pre-commit; echo evil > .git/hooks/post-checkout; "
             "rm -rf .git/hooks; echo rm=$?; echo ok > src/control")
    assert os.path.isdir(hooks)
    assert os.listdir(hooks) == [], r
    assert not os.path.exists(os.path.join(sbxc.project, ".git2")), r
    assert open(os.path.join(sbxc.project, "src", "control")).read() == "ok\n"  # control: the project is writable
    assert open(os.path.join(sbxc.project, ".git", "config")).read() == "[core]\n"


def test_option_like_arguments_are_the_command(sbxc, tmp_path):
    r = sbxc(DEFAULT, "echo", "--bind", "/", "/x")
    assert r.out == "--bind / /x\n", r
    # a program literally named --bind is run, not parsed as a bwrap option
    bindir = os.path.join(sbxc.project, "bin")
    os.mkdir(bindir)
    prog = os.path.join(bindir, "--bind")
    with open(prog, "w") as f:
        f.write(f"#!/bin/sh\necho ran-as-command \"$@\" > {sbxc.project}/marker\n")
    os.chmod(prog, 0o755)
    r = sbxc(DEFAULT, "--bind", "/", "/x", env={"PATH": bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")})
    assert r.rc == 0, r
    assert open(os.path.join(sbxc.project, "marker")).read() == "ran-as-command / /x\n"


def test_plan_cache_not_writable_inside(sbxc):
    from sbxc.runtime.planstore import plans_dir

    sbxc(DEFAULT, "true")
    d = plans_dir()
    assert os.path.isdir(d)
    before = sorted(os.listdir(d))
    pol = policy("write /var/tmp") + own_code_rules()
    r = sbxc(pol, "sh", "-c", f"ls -A {d} | wc -l; touch {d}/planted; echo t=$?; echo ok > /var/tmp/sbxc-live-ctl-$$ && echo ctl && rm /var/tmp/sbxc-live-ctl-$$")
    assert "t=0" not in r.out and "ctl" in r.out, r
    assert r.out.split("\n")[0].strip() == "0", r  # the plans are not even visible
    assert "planted" not in os.listdir(d)
    # Other runs of this uid come and go meanwhile: their records and temporary names too.
    assert {n for n in before if not n.startswith(("r-", ".tmp-"))} <= set(os.listdir(d))
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_signal_to_sbxc_ends_the_command(sbxc, tmp_path):
    """SIGTERM to sbxc reaches the sandbox; nothing of the command survives it."""
    import signal
    import time

    pidfile = os.path.join(sbxc.project, "inner.pid")
    pol = policy()
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(pol)
    # the command's argv carries a unique tag, to look for survivors on the host afterwards
    tag = f"sbxc-signal-test-{os.getpid()}-{time.monotonic_ns()}"
    argv = sbxc_argv("exec", "--policy", os.path.join(sbxc.project, "sandbox.policy.yaml"), "--",
                     PY, "-c", f"import time,sys; open({pidfile!r},'w').write('up'); time.sleep(30)  # {tag}")
    p = subprocess.Popen(argv, env=base_env(sbxc.home), cwd=sbxc.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(200):  # bounded: 20 s
            if os.path.exists(pidfile):
                break
            time.sleep(0.1)
        assert os.path.exists(pidfile), "the command did not start"
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert rc == 128 + signal.SIGTERM
    time.sleep(0.2)
    survivors = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if tag.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    survivors.append(pid)
            except OSError:
                pass
    assert survivors == []


def test_sigterm_reaches_the_command_itself(sbxc):
    """The command, not only bwrap, gets the signal: it can clean up and choose its status."""
    import signal
    import time

    up = os.path.join(sbxc.project, "up")
    got = os.path.join(sbxc.project, "got-term")
    pol_path = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(pol_path, "w") as f:
        f.write(policy())
    script = f"trap 'echo yes > {got}; exit 3' TERM; echo up > {up}; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"
    p = subprocess.Popen(sbxc_argv("exec", "--policy", pol_path, "--", "sh", "-c", script),
                         env=base_env(sbxc.home), cwd=sbxc.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if os.path.exists(up):
                break
            time.sleep(0.1)
        assert os.path.exists(up)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert os.path.exists(got), "the command's TERM handler did not run"
    assert rc == 3


def test_hidden_home_with_the_project_inside(bwrap_works, home):
    """home: hidden with the project in the home folder: the project is writable, the
    rest of home is an empty read-only folder (also where home lies under a private /tmp)."""
    proj = os.path.join(home, "src", "proj")
    os.makedirs(proj)
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nhome: hidden\n")
    try:
        r = run(sbxc_argv("exec", "--", "sh", "-c",
                          f"ls -A {home}; cat {home}/.ssh/id_rsa; echo y > {home}/f; echo home=$?; echo x > made; echo proj=$?"),
                env=base_env(home), cwd=proj)
    finally:
        remove_project_cache(proj)
    assert "PRIVATE" not in r.out and ".ssh" not in r.out, r
    assert r.out.split("\n")[0] == "src", r  # only the way to the project shows
    assert "home=0" not in r.out and "proj=0" in r.out, r
    assert not os.path.exists(os.path.join(home, "f"))
    assert os.path.exists(os.path.join(proj, "made"))


def test_command_starts_with_default_signal_dispositions(sbxc):
    """No signal ignored by sbxc's Python (SIGPIPE, SIGXFSZ) leaks into the command."""
    r = sbxc(DEFAULT, "grep", "SigIgn", "/proc/self/status")
    assert r.out.split()[-1] == "0000000000000000", r
    p = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True, timeout=30)
    assert p.stdout.split()[-1] == "0000000000000000"  # control: as a shell would start it
    r = sbxc(DEFAULT, "sh", "-c", "yes | head -n1 >/dev/null; echo done")
    assert r.out == "done\n" and "Broken pipe" not in r.err, r


def test_closed_std_descriptors_become_dev_null(sbxc):
    """Started with stdin and stdout closed, the command finds /dev/null there, not one of
    sbxc's own pipes (whose numbers would otherwise take those places)."""
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(DEFAULT)
    probe = "for i in 0 1; do echo \"$i $(readlink /proc/$$/fd/$i)\" >&2; done"
    p = subprocess.run(["sh", "-c", 'exec "$@" <&- >&-', "sh", *sbxc_argv("exec", "--", "sh", "-c", probe)],
                       env=base_env(sbxc.home), cwd=sbxc.project, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p
    assert p.stderr.decode().split("\n")[:2] == ["0 /dev/null", "1 /dev/null"], p


@pytest.mark.skipif(not os.path.exists("/etc/resolv.conf"), reason="this host has no /etc/resolv.conf")
def test_resolv_conf_kept(sbxc):
    want = open("/etc/resolv.conf").read()
    for net in ("true", "false"):
        r = sbxc(policy(network=net), "cat", "/etc/resolv.conf")
        assert r.rc == 0 and r.out == want, r


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_background_child_holding_stderr_does_not_hold_sbxc(sbxc, backend, tmp_path):
    """sbxc returns when the command ends, as a shell does, even when something the command
    left running keeps stderr open (bwrap ends such processes with its PID namespace;
    under Landlock they may outlive the command)."""
    import time

    if backend == "landlock":
        from sbxc.runtime.probe import landlock_abi

        if landlock_abi() < 1:
            pytest.skip("Landlock is not available on this kernel")
    pol = DEFAULT.replace("backend: bwrap", f"backend: {backend}")
    t0 = time.monotonic()
    r = sbxc(pol, "sh", "-c", "echo early >&2; sleep 8 >/dev/null & echo done", timeout=30)
    took = time.monotonic() - t0
    assert r.rc == 0 and r.out == "done\n" and "early" in r.err, r
    assert took < 6, took
