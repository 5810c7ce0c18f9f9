"""Who decides "the command never ran": bwrap's status channel (--json-status-fd), never
the text on stderr, which the command controls. stderr is not a terminal here, so sbxc
interposes on it (the case where it could be fooled before)."""
from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.live

DEFAULT = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\n"


@pytest.mark.parametrize("fake", [
    "bwrap: setsid: fake",
    "bwrap: Can't chdir to /x: No such file or directory",
    "bwrap: Unable to set up system call filtering as requested: prctl(PR_SET_SECCOMP) reported EINVAL.",
    "bwrap: No permissions to creating new namespace",
    "bwrap: execvp x: No such file or directory",
    "bwrap: execvp x: Permission denied",
])
def test_command_output_cannot_fake_a_refusal_or_an_exec_failure(sbxc, fake):
    r = sbxc(DEFAULT, "sh", "-c", f'echo "{fake}" >&2; exit 1')
    assert r.rc == 1, r  # the command's own status, untouched
    assert fake in r.err, r
    assert not any(ln.startswith("sbxc:") for ln in r.err.splitlines()), r


def test_command_output_first_then_status(sbxc):
    """Held-back stderr of a command that ran is shown, not swallowed or reworded."""
    r = sbxc(DEFAULT, "sh", "-c", 'echo "bwrap: Can\'t mount proc: fake" >&2; exit 3')
    assert r.rc == 3 and "bwrap: Can't mount proc: fake" in r.err and "sbxc:" not in r.err, r


def test_exec_failures_inside_are_127_and_126(sbxc):
    """bwrap's own execvp failure (no exit-code on its status channel) is a shell's
    127/126: the command's file is missing or not executable inside the sandbox."""
    r = sbxc(DEFAULT, "/nonexistent/sbxc-no-such-program")
    assert r.rc == 127, r
    # sbxc's own line, as on the other backends: a --format json status reads it as "the
    # command never ran".
    assert "sbxc: /nonexistent/sbxc-no-such-program: command not found" in r.err.splitlines(), r
    script = os.path.join(sbxc.project, "plain.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(script, 0o644)
    r = sbxc(DEFAULT, script)
    assert r.rc == 126 and "ran" not in r.out, r
    assert f"sbxc: {script}: cannot execute" in r.err.splitlines(), r
    r = sbxc(DEFAULT, script, args=("--format", "json"))
    import json

    status = json.loads(r.err.splitlines()[-1])
    assert status["exit_status"] == 126 and status["ran"] is False, status
    assert status["refusal"] == f"sbxc: {script}: cannot execute", status
    os.chmod(script, 0o755)  # the control: the same script, executable, ran
    r = sbxc(DEFAULT, script, args=("--format", "json"))
    status = json.loads(r.err.splitlines()[-1])
    assert r.out == "ran\n" and status["ran"] is True and status["exit_status"] == 0, (r, status)


def test_signals_and_statuses_of_a_command_that_ran(sbxc):
    assert sbxc(DEFAULT, "sh", "-c", "exit 125").rc == 125  # the command's own 125 passes through
    r = sbxc(DEFAULT, "sh", "-c", "kill -9 $$")
    assert r.rc == 137 and "sbxc:" not in r.err, r


def test_a_folder_named_as_the_policy_is_said_so(sbxc):
    """`--policy .` after a run that wrote the project: the refusal names what is wrong (a
    folder) and the file to name, not an acceptance that cannot work (compile --check
    refuses a folder). The control: the policy file itself runs."""
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(DEFAULT)
    assert sbxc(None, "sh", "-c", "echo x > made.txt").rc == 0
    r = sbxc(None, "true", args=("--policy", "."))
    assert r.rc == 125 and r.err.splitlines() == [
        f"sbxc: the policy {sbxc.project} is a folder; name the policy file itself, "
        f"e.g. {sbxc.project}/sandbox.policy.yaml"], r
    assert sbxc(None, "true", args=("--policy", "sandbox.policy.yaml")).rc == 0
