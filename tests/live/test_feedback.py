"""Feedback at run time, through the real command line, on bwrap and on Landlock (SPEC §5):

- with the network off, a command that tries the network fails within 2 s and gets the
  fixed hint: getaddrinfo, an HTTP client in Python, a refused loopback port, npm, pip,
  git over http; in a terminal too (stderr relayed through sbxc's pseudo-terminal);
- the plan's warnings are printed by ``exec`` once per policy change;
- after a failed run, a permission or read-only error on a path the plan refuses names
  the rule, with text that comes from the plan only.

Nothing leaves this machine even if a sandbox were broken: the only names looked up end
in the reserved ``.invalid`` TLD, the only address is a closed loopback port, npm's and
pip's registries are ``.invalid`` names.
"""
from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from conftest import SANDBOX_PYTHON, base_env, pty_run, pty_run_interactive, run, sbxc_argv
from sbxc.runtime.hint import NETWORK_HINT

pytestmark = pytest.mark.live

HINT = NETWORK_HINT.rstrip("\n")
BACKENDS = ("bwrap", "landlock", "oci")


def _landlock_abi() -> int:
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi()


@pytest.fixture(params=BACKENDS)
def backend(request, bwrap_works):
    if request.param == "landlock" and _landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {_landlock_abi()} here; these tests need 6")
    return request.param


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def policy(backend, network="false", extra=""):
    return f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: {network}\n{extra}"


@pytest.fixture
def go(sbxc):
    def call(text, *cmd, **kw):
        return sbxc(text, *cmd, **kw)

    call.project, call.home = sbxc.project, sbxc.home
    return call


def timed(cmd: str) -> list:
    """``sh -c`` that runs ``cmd`` and prints how long it took inside the sandbox (ms) on
    stdout, then exits with its status: sbxc's own start-up is not the command's wait."""
    return ["sh", "-c", f's=$(date +%s%N); {cmd}; rc=$?; e=$(date +%s%N); echo "ms=$(( (e - s) / 1000000 ))"; exit $rc']


def elapsed_ms(out: str) -> int:
    return int(out.strip().split("ms=")[-1].split()[0])


NPM = "npm view left-pad --registry http://registry.invalid/"
PIP = (f"{SANDBOX_PYTHON} -m pip download --no-cache-dir --no-deps -d pipdl "
       "--index-url https://pypi.invalid/simple sbxc-feedback-probe")


def network_cases():
    port = closed_port()
    return {
        "getaddrinfo": f"{SANDBOX_PYTHON} -c 'import socket; socket.getaddrinfo(\"host.invalid\", 443)'",
        "http-client": f"{SANDBOX_PYTHON} -c 'import urllib.request; urllib.request.urlopen(\"http://api.invalid/\", timeout=30)'",
        "refused": f"{SANDBOX_PYTHON} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=30)'",
        "npm": NPM,
        "pip": PIP,
        "git-http": "git ls-remote http://git.invalid/repo.git",
    }


@pytest.mark.parametrize("tool", ["getaddrinfo", "http-client", "refused", "npm", "pip", "git-http"])
def test_network_off_fails_fast_with_the_hint(go, backend, tool):
    cmd = network_cases()[tool]
    if tool == "npm" and not os.path.exists("/usr/bin/npm"):
        pytest.fail("npm is not installed (CI installs it)")
    pol = policy(backend)
    go(pol, "true")  # the plan is compiled and cached: what follows is the run alone
    r = go(pol, *timed(cmd), timeout=120)
    if r.rc != 0 and elapsed_ms(r.out) >= 2000:
        r = go(pol, *timed(cmd), timeout=120)  # once more: a loaded machine slows start-up, not a retry storm
    assert r.rc != 0, r
    assert elapsed_ms(r.out) < 2000, r
    assert r.err.rstrip("\n").split("\n")[-1] == HINT, r
    assert r.err.count("sbxc: hint:") == 1, r


def test_network_off_settings_reach_the_command_and_the_policy_wins(go, backend):
    show = ["sh", "-c", "echo r=$npm_config_fetch_retries p=$PIP_RETRIES o=$RES_OPTIONS"]
    r = go(policy(backend), *show)
    assert "r=0 p=1 o=timeout:1 attempts:1" in r.out, r
    r = go(policy(backend, extra='env:\n  set:\n    PIP_RETRIES: "7"\n'), *show)
    assert "r=0 p=7 " in r.out, r
    r = go(policy(backend, network="true"), *show)
    assert "r= p= o=" in r.out, r  # the network is on: nothing changed


@pytest.mark.parametrize("msg", [
    "ERROR: Could not fetch: [Errno -2] Name or service not known",
    "npm error request to http://registry.invalid/x failed, reason: getaddrinfo EAI_AGAIN registry.invalid",
    "Traceback (most recent call last):\n  File \"/usr/lib/python3.11/socket.py\", line 232, in __init__\n"
    "PermissionError: [Errno 1] Operation not permitted",
])
def test_texts_of_refused_network_get_the_hint(go, backend, msg):
    r = go(policy(backend), "sh", "-c", 'printf "%s\\n" "$1" >&2; exit 3', "sh", msg)
    if "PermissionError" in msg and backend in ("bwrap", "oci"):
        # bwrap's and runc's network namespace gives real network errors; a permission error is not one
        assert "sbxc: hint" not in r.err, r
        return
    assert r.rc == 3 and r.err.rstrip("\n").split("\n")[-1] == HINT, r


def test_permission_error_without_sockets_is_not_the_network(go, backend):
    r = go(policy(backend), "sh", "-c", "echo 'PermissionError: [Errno 1] Operation not permitted' >&2; exit 1")
    assert "the network is off" not in r.err, r


# ---------------------------------------------------------------- in a terminal

def _exec_argv(go, backend, pol, *cmd):
    p = os.path.join(go.project, "sandbox.policy.yaml")
    with open(p, "w") as f:
        f.write(pol)
    return sbxc_argv("exec", "--policy", p, "--", *cmd)


def test_hint_in_a_terminal(go, backend):
    """The whole of the caller's stdio is a terminal: the command's stderr is still a
    terminal (sbxc's relay), the hint comes after its output, a network attempt is quick."""
    code = ("import os, sys, socket\n"
            "print('tty', os.isatty(0), os.isatty(1), os.isatty(2), flush=True)\n"
            "sys.stderr.write('a\\nb\\n'); sys.stderr.flush()\n"
            "socket.getaddrinfo('host.invalid', 443)\n")
    argv = _exec_argv(go, backend, policy(backend), SANDBOX_PYTHON, "-c", code)
    rc, out = pty_run(argv, base_env(go.home), go.project)
    assert rc == 1, out
    # On OCI too: a run on a terminal is `runc create` + `runc start`, which pass the
    # terminal on (`runc run` would hand the command pipes: docs/kubernetes.md).
    assert b"tty True True True" in out, out
    # the relay adds no second carriage return: OPOST is off on sbxc's side
    assert b"a\r\nb\r\n" in out and b"\r\r\n" not in out, out
    assert out.rstrip(b"\r\n").split(b"\r\n")[-1] == HINT.encode(), out


def test_terminal_stays_usable(go, backend):
    """stdin is still the caller's terminal (a line typed is read), `>/dev/stderr` works,
    and a resize of the caller's terminal reaches the command's stderr terminal."""
    code = ("import os, signal, sys\n"
            "line = None\n"
            "def winch(*a):\n"
            "    s = os.get_terminal_size(2)\n"
            "    os.write(1, b'size %d %d\\n' % (s.columns, s.lines))\n"
            "    os._exit(0)\n"
            "signal.signal(signal.SIGWINCH, winch)\n"
            "print('start', os.get_terminal_size(2).columns, flush=True)\n"
            "os.system('echo via-dev-stderr >/dev/stderr')\n"
            "print('READY', flush=True)\n"
            "print('got', input(), flush=True)\n"
            "signal.pause()\n")
    argv = _exec_argv(go, backend, policy(backend, network="true"), SANDBOX_PYTHON, "-c", code)
    rc, out = pty_run_interactive(argv, base_env(go.home), go.project)
    assert b"start 80" in out, out
    assert b"via-dev-stderr" in out and b"Permission denied" not in out, out
    assert b"got hello" in out, out
    assert b"size 101 33" in out, out
    assert rc == 0, out


def test_ctrl_c_on_a_terminal_ends_a_command_that_is_pid_1(go, runc):
    """On OCI the command is its container's pid 1, which the kernel gives no signal its
    handler does not catch: the terminal's Ctrl-C reaches sbxc (the command is in a session
    of its own, as on bwrap), which ends the command as SIGINT's default action would
    (130). The control: the command read the line typed first, so it ran on the terminal."""
    code = ("import signal, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
            "print('READY', flush=True)\n"
            "print('got', input(), flush=True)\n"
            "time.sleep(30)\n")
    argv = _exec_argv(go, "oci", policy("oci", network="true"), SANDBOX_PYTHON, "-c", code)
    rc, out = pty_run_interactive(argv, base_env(go.home), go.project, then=b"\x03")
    assert b"got hello" in out, out
    assert rc == 130, out


def test_npm_in_a_terminal_fails_fast_with_the_hint(go, backend):
    pol = policy(backend)
    go(pol, "true")
    argv = _exec_argv(go, backend, pol, *timed(NPM))
    for _ in range(2):  # once more if slow: a loaded machine slows start-up, not a retry storm
        rc, out = pty_run(argv, base_env(go.home), go.project, timeout=120)
        ms = elapsed_ms(out.decode("utf-8", "replace").replace("\r", ""))
        if ms < 2000:
            break
    assert rc != 0 and ms < 2000, out
    assert out.rstrip(b"\r\n").split(b"\r\n")[-1] == HINT.encode(), out


# ---------------------------------------------------------------- warnings, once per policy change

def warnings_of(err: str) -> list:
    return [line for line in err.split("\n") if line.startswith("sbxc: warning:")]


def test_env_pass_secret_glob_warned_once_per_change(go, backend):
    pol = policy(backend, network="true", extra='env:\n  pass: ["AWS_*"]\n')
    first = go(pol, "true")
    assert first.rc == 0, first
    w = warnings_of(first.err)
    assert len([x for x in w if 'env.pass "AWS_*" lets secrets through' in x]) == 1, first
    assert ":6:" in "".join(w) or "sandbox.policy.yaml:" in "".join(w), first  # names the file and line
    again = go(pol, "true")
    assert warnings_of(again.err) == [], again
    # a changed policy file: said again
    changed = go(pol + "# edited\n", "true")
    assert any("lets secrets through" in x for x in warnings_of(changed.err)), changed


def test_cwd_under_tmpfs_is_warned(go, backend, tmp_path):
    """The current folder's deepest rule is a tmpfs: on bwrap what the command writes
    there is gone afterwards (shown by the run), on Landlock the command cannot use it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(tmp_path, 0o755)
    pol = policy(backend, network="true", extra=f"filesystem:\n  - tmpfs {scratch}\n")
    r = go(pol, "sh", "-c", "echo kept > out.txt", cwd=str(scratch))
    w = [x for x in warnings_of(r.err) if "the current folder" in x]
    assert len(w) == 1 and f"tmpfs {scratch}" in w[0] and "sandbox.policy.yaml:6:" in w[0], r
    assert not (scratch / "out.txt").exists()  # what the warning says: nothing reached the host
    if backend in ("bwrap", "oci"):
        assert r.rc == 0 and "discarded" in w[0], r
    else:
        assert r.rc != 0 and "cannot use it" in w[0], r
    again = go(pol, "true", cwd=str(scratch))
    assert not [x for x in warnings_of(again.err) if "the current folder" in x], again
    # the same policy from the project: no such warning
    other = go(pol + "# x\n", "true")
    assert not [x for x in warnings_of(other.err) if "the current folder" in x], other


def test_landlock_narrowing_that_breaks_git_commit_is_warned(go, backend):
    pol = policy(backend, network="true", extra="filesystem:\n  - read {project}/.git/hooks\n")
    r = go(pol, "sh", "-c", "touch top-level-file && echo created")
    w = [x for x in warnings_of(r.err) if "cannot let the command create" in x]
    if backend in ("bwrap", "oci"):
        assert w == [] and "created" in r.out, r  # bwrap's and runc's mounts: nothing is lost
        return
    assert len(w) == 1, r
    assert f"directly in {go.project}, {go.project}/.git," in w[0] and "git commit" in w[0], r
    assert "read {project}/.git/hooks" in w[0] and "builtin:default:13:11" in w[0], r
    # what it says is what happens
    assert "created" not in r.out, r
    r = go(pol, "sh", "-c", "git -c user.name=t -c user.email=t@t.invalid commit -q --allow-empty -m x && echo committed")
    assert "committed" not in r.out and not warnings_of(r.err), r


def test_landlock_root_metadata_is_warned_for_root_only(go, backend):
    pol = policy(backend, network="true")
    r = go(pol, "sh", "-c", "touch f && chmod +x f && echo chmod-ok")
    w = [x for x in warnings_of(r.err) if "landlock as root" in x]
    if backend == "landlock" and os.geteuid() == 0:
        assert len(w) == 1 and "chmod +x" in w[0], r
        assert "chmod-ok" not in r.out, r  # what it says is what happens
    else:
        assert w == [] and "chmod-ok" in r.out, r


# ---------------------------------------------------------------- the rule that refused a path

def test_read_only_path_names_the_rule(go, backend):
    r = go(policy(backend, network="true"), "sh", "-c", "touch /etc/sbxc-feedback-probe")
    assert r.rc != 0, r
    last = r.err.rstrip("\n").split("\n")[-1]
    assert last.startswith("sbxc: hint: `read /` (builtin:default:12:10) makes that path read-only"), r


def test_masked_path_names_the_mask(go, backend):
    pol = policy(backend, network="true", extra="filesystem:\n  - mask {project}/secret\n")
    os.makedirs(os.path.join(go.project, "secret"), exist_ok=True)
    r = go(pol, "sh", "-c", f"echo x > {go.project}/secret/f")
    assert r.rc != 0, r
    last = r.err.rstrip("\n").split("\n")[-1]
    assert last.startswith("sbxc: hint: the sandbox refused that path: `mask {project}/secret` "
                           "(" + os.path.join(go.project, "sandbox.policy.yaml") + ":6:"), r


def test_denial_line_never_carries_output_text(go, backend):
    evil = "cp: cannot create '/etc/x\x1b[2K EVIL': Permission denied; Read-only file system"
    r = go(policy(backend, network="true"), "sh", "-c", 'printf "%s\\n" "$1" >&2; exit 1', "sh", evil)
    last = r.err.rstrip("\n").split("\n")[-1]
    assert last.startswith("sbxc: hint: `read /` (builtin:default:12:10)") and "EVIL" not in last, r


@pytest.mark.parametrize("case", ["writable", "success", "relative"])
def test_no_denial_line(go, backend, case):
    pol = policy(backend, network="true")
    if case == "writable":  # a path under a write rule: not the plan's refusal
        r = go(pol, "sh", "-c", f"echo 'x: {go.project}/f: Permission denied' >&2; exit 1")
    elif case == "success":
        r = go(pol, "sh", "-c", "echo 'touch: /etc/x: Read-only file system' >&2; exit 0")
    else:
        r = go(pol, "sh", "-c", "echo 'touch: cannot touch x: Read-only file system' >&2; exit 1")
    assert "sbxc: hint" not in r.err, r
