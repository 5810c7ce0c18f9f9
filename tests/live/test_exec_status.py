"""``sbxc exec --format json``, live on bwrap, Landlock and OCI: the run's status as one JSON object,
on stderr or on a descriptor of the caller's that the sandboxed command never holds; the
hosts the proxy refused are in it with the rule to add. Text mode is unchanged.

The only upstream is a server of this test on 127.0.0.1; the refused host is a
``.invalid`` name, which nothing resolves.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import PYTHON, base_env, interpreter_rules, run

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock", "oci"]


@pytest.fixture(autouse=True)
def _runc_for_oci(request):
    from conftest import runc_for

    runc_for(request)

PROBE = r"""
import os, sys, urllib.request
fd = int(sys.argv[1])
try:
    os.write(fd, b'{"exit_status": 99, "format": "sbxc-exec-status/1", "ran": false}\n')
    print("STATUS FD WRITABLE")
except OSError as e:
    print("STATUS FD CLOSED", e.errno)
try:
    urllib.request.urlopen("http://pkgs.example.invalid/x", timeout=30)
except urllib.error.HTTPError as e:
    print("HTTP", e.code)
sys.exit(3)
"""


def _policy(project: str, backend: str) -> str:
    path = os.path.join(project, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork:\n  - allow 127.0.0.1:9\n"
                + interpreter_rules())
    with open(os.path.join(project, "probe.py"), "w") as f:
        f.write(PROBE)
    return path


def _exec(project, home, *flags, cmd, pass_fds=()):
    return run([PYTHON, "-m", "sbxc", "exec", *flags, "--", *cmd], env=base_env(home), cwd=project,
               pass_fds=pass_fds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_status_on_its_own_descriptor_names_the_refused_host(bwrap_works, project, home, backend):
    policy = _policy(project, backend)
    r_fd, w_fd = os.pipe()
    try:
        r = _exec(project, home, "--policy", policy, "--format", "json", "--status-fd", str(w_fd),
                  cmd=[sys.executable, "-I", "probe.py", str(w_fd)], pass_fds=(w_fd,))
        os.close(w_fd)
        w_fd = -1
        with os.fdopen(r_fd, "rb") as f:
            r_fd = -1
            data = f.read()
    finally:
        for fd in (r_fd, w_fd):
            if fd >= 0:
                os.close(fd)
    assert r.rc == 3, r
    # The command got no copy of the status descriptor, so it could not forge the status.
    assert "STATUS FD CLOSED 9" in r.out and "HTTP 403" in r.out, r
    lines = data.decode().splitlines()
    assert len(lines) == 1, data
    status = json.loads(lines[0])
    assert status["format"] == "sbxc-exec-status/1", status
    assert status["ran"] is True and status["exit_status"] == 3 and status["refusal"] is None, status
    assert status["blocked"] == [{"host": "pkgs.example.invalid", "port": 80, "rule": "allow pkgs.example.invalid",
                                  "policy": "sandbox.policy.yaml:5",
                                  "reason": "not allowed by sandbox.policy.yaml:5"}], status
    # The person still gets the line on stderr, and no JSON there.
    assert ('sbxc: blocked pkgs.example.invalid:80 (not allowed by sandbox.policy.yaml:5); '
            'allow it with "allow pkgs.example.invalid"') in r.err.splitlines(), r
    assert "sbxc-exec-status/1" not in r.err, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_text_mode_is_unchanged_and_json_defaults_to_stderr(bwrap_works, project, home, backend):
    policy = _policy(project, backend)
    cmd = [sys.executable, "-I", "probe.py", "2"]
    text = _exec(project, home, "--policy", policy, cmd=cmd)
    # Only the probe's own look-alike (written to its fd 2), no status of sbxc's.
    assert text.rc == 3 and text.err.count("sbxc-exec-status/1") == 1 and "sbxc-exec-status/1" not in text.out, text
    blocked = [ln for ln in text.err.splitlines() if ln.startswith("sbxc: blocked ")]
    assert len(blocked) == 1, text
    r = _exec(project, home, "--policy", policy, "--format", "json", cmd=cmd)
    assert r.rc == 3, r
    lines = r.err.splitlines()
    # On stderr the command can write a look-alike (the probe did, through fd 2); sbxc's
    # object is the last line, after everything else.
    assert any(ln.startswith('{"exit_status": 99, "format": "sbxc-exec-status/1"') for ln in lines[:-1]), r
    status = json.loads(lines[-1])
    assert status["ran"] is True and status["exit_status"] == 3, status
    assert [b["host"] for b in status["blocked"]] == ["pkgs.example.invalid"], status
    assert blocked[0] in lines, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_status_of_a_refused_run(bwrap_works, project, home, backend):
    """sbxc refused before the command ran: ``ran`` is false and the refusal line is there."""
    policy = _policy(project, backend)
    marker = os.path.join(project, "ran")
    r = _exec(project, home, "--policy", policy, "--plan", policy, "--format", "json", cmd=["touch", marker])
    # --policy with --plan is a usage error (125) before the format is known: no status.
    assert r.rc == 125 and "sbxc-exec-status/1" not in r.err, r
    with open(os.path.join(project, "bad.plan"), "w") as f:
        f.write("{}")
    r = _exec(project, home, "--plan", "bad.plan", "--format", "json", cmd=["touch", marker])
    assert r.rc == 125, r
    status = json.loads(r.err.splitlines()[-1])
    assert status["ran"] is False and status["exit_status"] == 125, status
    assert status["refusal"] and status["refusal"].startswith("sbxc: ") and status["refusal"] in r.err, status
    assert not os.path.exists(marker)


def test_status_fd_needs_json_and_an_open_descriptor(bwrap_works, project, home):
    r = _exec(project, home, "--status-fd", "3", cmd=["true"])
    assert r.rc == 125 and r.err.strip() == ("sbxc: exec: --status-fd needs --format json; add --format json, "
                                            "or leave out --status-fd"), r
    r = _exec(project, home, "--format", "json", "--status-fd", "57", cmd=["true"])
    assert r.rc == 125 and r.err.strip().startswith("sbxc: exec: --status-fd 57 is not open;"), r
    r = _exec(project, home, "--format", "yaml", cmd=["true"])
    assert r.rc == 125, r


CTRL_C_EARLY = r"""
import signal, sys
from sbxc.runtime import cachedir
real = cachedir.prepare
def prepare(*a, **k):
    open(sys.argv[1], "w").close()  # the control: the Ctrl-C came here, before the command
    signal.raise_signal(signal.SIGINT)  # as a Ctrl-C typed while the run is prepared
    return real(*a, **k)
cachedir.prepare = prepare
from sbxc.commands.exec import exec_entry
exec_entry(sys.argv[2:])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_ctrl_c_before_the_command_starts_ends_sbxc_as_sigint(backend, bwrap_works, project, home, tmp_path):
    """A Ctrl-C while the run is prepared, before the core forwards signals: sbxc printed a
    Python traceback (KeyboardInterrupt) and died of it. Now nothing is printed, the
    command never runs, and sbxc ends as SIGINT's default action would end it (as the
    command would have: a shell loop around it stops). The control: the signal came (the
    note), and without it the same run runs the command."""
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n")
    note = str(tmp_path / "interrupted")
    marker = os.path.join(project, "ran")
    r = run([PYTHON, "-c", CTRL_C_EARLY, note, "--", "touch", marker], env=base_env(home), cwd=project)
    assert os.path.exists(note)  # the control
    assert r.rc == -2 and r.err == "" and not os.path.exists(marker), r
    r = run([PYTHON, "-m", "sbxc", "exec", "--", "touch", marker], env=base_env(home), cwd=project)
    assert r.rc == 0 and os.path.exists(marker), r
