"""`compile -o` and `export -o` write a regular file, all of it or nothing, and never
through or over anything else: a rename over a device node, a FIFO or a link would replace
it (as root, `-o /dev/null` would leave a regular file there for every user)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def sbxc(cwd, *args):
    env = dict(os.environ, PYTHONPATH=SRC, XDG_CACHE_HOME=str(cwd / ".cache"))
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    return tmp_path


def _leftovers(folder):
    return sorted(n for n in os.listdir(folder) if ".tmp" in n)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder", "device"])
def test_compile_output_never_replaces_what_is_not_a_regular_file(proj, kind):
    target = proj / "out"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        (proj / "elsewhere").write_text("kept\n")
        os.symlink("elsewhere", target)
    elif kind == "folder":
        target.mkdir()
    elif os.geteuid() == 0:
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a null device of the test's own
    else:
        # Only root makes device nodes: a user names one of the host's, which sbxc must
        # leave alone all the same.
        target = "/dev/null"
    before = os.lstat(target)
    r = sbxc(proj, "compile", "-o", str(target))
    assert r.returncode == 1, r
    assert "not a regular file" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert _leftovers(proj) == []
    if kind == "symlink":
        assert (proj / "elsewhere").read_text() == "kept\n"


def test_compile_output_replaces_a_regular_file_whole(proj):
    """The control: a regular file (or none) is written, and nothing is left beside it."""
    out = proj / "plan.json"
    r = sbxc(proj, "compile", "-o", str(out))
    assert r.returncode == 0 and out.read_bytes().startswith(b"{"), r
    out.write_text("old\n")
    r = sbxc(proj, "compile", "-o", str(out))
    assert r.returncode == 0 and out.read_bytes().startswith(b"{"), r
    assert _leftovers(proj) == []


def test_a_failed_write_leaves_no_temporary_file(proj):
    """The write itself fails (a file size limit of 100 bytes: EFBIG): the error line, the
    old file as it was, and no temporary file left."""
    import resource

    out = proj / "plan.json"
    out.write_text("old\n")
    env = dict(os.environ, PYTHONPATH=SRC, XDG_CACHE_HOME=str(proj / ".cache"))
    r = subprocess.run([sys.executable, "-m", "sbxc", "compile", "-o", str(out)], capture_output=True, text=True,
                       cwd=proj, env=env, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100)))
    assert r.returncode == 1 and "cannot write" in r.stderr, r
    assert out.read_text() == "old\n"
    assert _leftovers(proj) == []
