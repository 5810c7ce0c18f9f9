"""Diagnostics never print what the policy hides: a sandbox.policy.yaml that is a link to a
credential (~/.netrc, ~/.aws/credentials, /etc/shadow, a private file) is refused on its
real path before a byte of it is read, through the real CLI (compile --check and exec).

Control: the same secret text in an ordinary policy file is quoted by the diagnostics, so
these tests would see a leak."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
ROOT = os.geteuid() == 0


def cli(home, cwd, *args):
    # SBXC_ROOT: the suite's private root (tests/conftest.py), never the real one
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "PYTHONPATH": SRC, "LANG": "C.UTF-8",
           "SBXC_ROOT": os.environ["SBXC_ROOT"]}
    p = subprocess.run([sys.executable, "-m", "sbxc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def world(tmp_path):
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".netrc").write_text("machine example.com login me password NETRC-SECRET-1\n")
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = AWS-SECRET-2\n")
    (home / "notes").mkdir()
    (home / "notes" / "token").write_text("TOKEN-SECRET-3: x\n")
    for f in (home / ".netrc", home / ".aws" / "credentials", home / "notes" / "token"):
        os.chmod(f, 0o600)
    project = tmp_path / "project"
    project.mkdir()
    return str(home), str(project)


def _shadow_secret():
    try:
        with open("/etc/shadow") as f:
            return f.readline().strip()
    except OSError:
        return "root:"  # unreadable here: its first field is all there is to look for


@pytest.mark.parametrize("target, secret", [
    ("{home}/.netrc", "NETRC-SECRET-1"),
    ("{home}/.aws/credentials", "AWS-SECRET-2"),
    ("{home}/notes/token", "TOKEN-SECRET-3"),
    ("/etc/shadow", None),
])
@pytest.mark.parametrize("how", ["discovered", "--policy", "extends"])
def test_a_link_to_a_secret_is_never_quoted(world, target, secret, how):
    home, project = world
    target = target.format(home=home)
    if target == "/etc/shadow" and not os.path.exists(target):
        pytest.skip("no /etc/shadow")
    secret = secret or _shadow_secret()
    link = os.path.join(project, "sandbox.policy.yaml" if how != "extends" else "base.yaml")
    os.symlink(target, link)
    if how == "extends":
        with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
            f.write("sbxc: 1\nextends: [base.yaml]\n")
    named = how == "--policy"
    for args in (("compile", "--check", *((link,) if named else ())),
                 ("exec", *(("--policy", link) if named else ()), "--", "true")):
        rc, out = cli(home, project, *args)
        assert rc == (1 if args[0] == "compile" else 125), out
        assert secret not in out, out
        assert "[SBX025]" in out or "cannot read" in out or "Permission denied" in out, out
        if target != "/etc/shadow" or ROOT:
            assert "sbxc did not read it" in out, out


def test_control_the_same_text_in_a_policy_file_is_quoted(world):
    home, project = world
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("machine example.com login me password NETRC-SECRET-1\n")
    rc, out = cli(home, project, "compile", "--check")
    assert rc == 1 and "NETRC-SECRET-1" in out, out


def test_a_private_policy_named_directly_still_works(world):
    """umask 077: a person's own 0600 policy, named as itself, is used."""
    home, project = world
    p = os.path.join(project, "sandbox.policy.yaml")
    with open(p, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\n")
    os.chmod(p, 0o600)
    rc, out = cli(home, project, "compile", "--check")
    assert rc == 0, out


def test_kernel_state_is_not_read_as_a_policy(world):
    home, project = world
    os.symlink("/proc/self/environ", os.path.join(project, "sandbox.policy.yaml"))
    rc, out = cli(home, project, "compile", "--check")
    assert rc == 1 and "under /proc" in out and "PYTHONPATH" not in out, out
