"""Policy files another local user could have written are refused (SBX025), wherever they
come from: discovery (which walks up to /, through /tmp and /var/tmp), --policy, extends.

Real files: modes everywhere; other owners (chown) where the tests run as root.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler_fakes import fake_host
from sbxc.compiler.api import compile_policy

ROOT = os.geteuid() == 0
OTHER = 65534  # nobody
needs_root = pytest.mark.root_only  # giving a file to another user
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

GRANT_ALL = "sbxc: 1\nhome: writable\nenv:\n  pass: [PATH]\n"


def compile_in(cwd, policy=None):
    return compile_policy(policy, cwd=str(cwd), environ={"HOME": "/nonexistent-home", "PATH": "/usr/bin"},
                          host=fake_host(home="/nonexistent-home"), overrides={})


def codes(r):
    return [d.code for d in r.diagnostics if d.severity == "error"]


def untrusted(r):
    return [d for d in r.diagnostics if d.code == "SBX025"]


@pytest.fixture
def shared(tmp_path):
    """A folder like /tmp: world-writable and sticky, with a project folder below it."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    (d / "work" / "src").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    return d


def write(path, text=GRANT_ALL, mode=0o644):
    path.write_text(text)
    os.chmod(path, mode)
    return path


# --- what passes ---------------------------------------------------------------------------

def test_own_file_in_own_folder_is_used(tmp_path):
    write(tmp_path / "sandbox.policy.yaml")
    r = compile_in(tmp_path)
    assert r.ok, r.diagnostics
    assert r.policy == str(tmp_path / "sandbox.policy.yaml")


def test_own_file_in_a_sticky_shared_folder_is_used(shared):
    write(shared / "sandbox.policy.yaml")
    r = compile_in(shared / "work" / "src")
    assert r.ok, r.diagnostics


def test_root_owned_system_file_is_trusted(tmp_path):
    # /etc and its files are root's: a policy kept there (read-only for everyone) is fine.
    if not os.path.isfile("/etc/hostname"):
        pytest.skip("no /etc/hostname")
    r = compile_in(tmp_path, "/etc/hostname")
    assert "SBX025" not in codes(r)


# --- modes (any user) ----------------------------------------------------------------------

@pytest.mark.parametrize("mode, who", [(0o664, "its group"), (0o646, "others"), (0o666, "others")])
def test_group_or_world_writable_file_is_refused(tmp_path, mode, who):
    write(tmp_path / "sandbox.policy.yaml", mode=mode)
    r = compile_in(tmp_path)
    assert r.plan is None and codes(r) == ["SBX025"]
    (d,) = untrusted(r)
    assert f"writable by {who}" in d.message and f"{mode:04o}" in d.message
    assert "--policy" in d.hint and "chmod go-w" in d.hint


def test_found_by_discovery_says_so(shared):
    write(shared / "sandbox.policy.yaml", mode=0o666)
    r = compile_in(shared / "work" / "src")
    (d,) = untrusted(r)
    assert str(shared / "sandbox.policy.yaml") in d.message
    assert "found by looking for sandbox.policy.yaml in" in d.hint


def test_folder_writable_by_others_and_not_sticky_is_refused(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    write(d / "sandbox.policy.yaml")
    r = compile_in(d)
    (diag,) = untrusted(r)
    assert "writable by others and not sticky" in diag.message and r.plan is None


def test_group_writable_folder_is_refused(tmp_path):
    d = tmp_path / "grp"
    d.mkdir()
    os.chmod(d, 0o775)
    write(d / "sandbox.policy.yaml")
    (diag,) = untrusted(compile_in(d))
    assert "writable by its group and not sticky" in diag.message


def test_named_with_policy_flag_is_checked_too(tmp_path):
    p = write(tmp_path / "p.yaml", mode=0o666)
    r = compile_in(tmp_path, str(p))
    assert codes(r) == ["SBX025"]
    assert "found by looking" not in untrusted(r)[0].hint


def test_extends_target_is_checked_and_points_at_the_extends_entry(tmp_path):
    write(tmp_path / "base.yaml", mode=0o666)
    write(tmp_path / "sandbox.policy.yaml", "sbxc: 1\nextends: [base.yaml]\n")
    r = compile_in(tmp_path)
    (d,) = untrusted(r)
    assert d.message.startswith(f"policy file {tmp_path / 'base.yaml'} ")
    assert d.span.file == str(tmp_path / "sandbox.policy.yaml") and d.span.line == 2
    assert "found by looking" not in d.hint  # discovery found the extending file, not this one
    assert r.plan is None


def test_symlinked_policy_is_judged_by_the_file_it_reaches(tmp_path):
    real_dir = tmp_path / "open"
    real_dir.mkdir()
    os.chmod(real_dir, 0o777)
    write(real_dir / "p.yaml")
    (tmp_path / "sandbox.policy.yaml").symlink_to(real_dir / "p.yaml")
    (d,) = untrusted(compile_in(tmp_path))
    assert f"its folder {real_dir}" in d.message


def test_compile_command_exits_1(shared):
    write(shared / "sandbox.policy.yaml", mode=0o666)
    p = subprocess.run([sys.executable, "-m", "sbxc", "compile", "--check"], cwd=shared / "work",
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "[SBX025]" in p.stdout + p.stderr


# --- other owners (root only) --------------------------------------------------------------

@needs_root
def test_file_of_another_user_in_a_sticky_folder_is_refused(shared):
    # The attack: another user leaves /tmp/sandbox.policy.yaml granting everything.
    f = write(shared / "sandbox.policy.yaml")
    os.chown(f, OTHER, OTHER)
    r = compile_in(shared / "work" / "src")
    (d,) = untrusted(r)
    assert "owned by" in d.message and str(OTHER) in d.message and r.plan is None


@needs_root
def test_file_of_another_user_in_own_folder_is_refused(tmp_path):
    f = write(tmp_path / "sandbox.policy.yaml")
    os.chown(f, OTHER, OTHER)
    assert codes(compile_in(tmp_path)) == ["SBX025"]


@needs_root
def test_own_file_in_a_folder_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    write(d / "sandbox.policy.yaml")
    os.chown(d, OTHER, OTHER)
    (diag,) = untrusted(compile_in(d))
    assert f"its folder {d} is owned by" in diag.message


@needs_root
def test_symlink_of_another_user_is_refused(shared):
    # Even when it points at one of the caller's own files: the link chooses which.
    mine = write(shared.parent / "mine.yaml")
    link = shared / "sandbox.policy.yaml"
    link.symlink_to(mine)
    os.lchown(link, OTHER, OTHER)
    (d,) = untrusted(compile_in(shared / "work"))
    assert f"the symlink {link} is owned by" in d.message


@needs_root
def test_extends_file_of_another_user_is_refused(tmp_path):
    base = write(tmp_path / "base.yaml")
    os.chown(base, OTHER, OTHER)
    write(tmp_path / "sandbox.policy.yaml", "sbxc: 1\nextends: [base.yaml]\n")
    assert codes(compile_in(tmp_path)) == ["SBX025"]
