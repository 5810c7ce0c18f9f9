"""The one tree walk (sbxc.runtime.trees) and the one lookup of sbxc's own tools
(sbxc.runtime.probe.host_program), on real folders."""
import os
import socket
import stat
import subprocess
import sys

import pytest

from sbxc.runtime import probe, trees

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


@pytest.fixture(autouse=True)
def _no_deep_leftovers(tmp_path):
    """pytest removes old temporary folders recursively: leave no deep tree behind."""
    yield
    pfd = os.open(tmp_path, os.O_RDONLY)
    try:
        for name in os.listdir(pfd):
            trees.remove_tree(pfd, name)
    finally:
        os.close(pfd)


def _deep(top: str, depth: int) -> None:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(depth):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
        if i % 997 == 0:
            os.symlink("/etc", "up", dir_fd=fd)
    os.close(fd)


def _nasty(top):
    os.makedirs(top)
    _deep(top, 3000)
    os.mkfifo(os.path.join(top, "fifo"))
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(top, "sock"))
    s.close()
    with open(os.fsencode(top) + b"/\xff\xfe", "w") as f:
        f.write("odd")
    os.makedirs(os.path.join(top, "locked", "inner"))
    with open(os.path.join(top, "locked", "inner", "f"), "w") as f:
        f.write("x" * 5000)
    os.chmod(os.path.join(top, "locked", "inner"), 0)
    os.chmod(os.path.join(top, "locked"), 0)
    os.symlink("/", os.path.join(top, "root"))


def test_remove_tree_with_few_descriptors_and_no_stack(tmp_path):
    # A child with a low descriptor limit and Python's default recursion limit: the walk
    # must need neither a descriptor nor a stack frame per level.
    top = str(tmp_path / "t")
    _nasty(top)
    code = ("import os, resource, sys; sys.path.insert(0, sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
            "from sbxc.runtime import trees; fd = os.open(sys.argv[2], os.O_RDONLY); "
            "print(trees.disk_usage(os.open(sys.argv[2] + '/t', os.O_RDONLY))); trees.remove_tree(fd, 't')")
    r = subprocess.run([sys.executable, "-c", code, SRC, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(top)
    assert os.path.isdir("/etc")


def test_disk_usage_counts_deep_trees_and_reports_unreadable(tmp_path):
    top = str(tmp_path / "t")
    _nasty(top)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        size, unreadable = trees.disk_usage(fd)
    finally:
        os.close(fd)
    du = subprocess.run(["du", "-sk", top], capture_output=True, text=True)
    assert -(-size // 1024) == int(du.stdout.split()[0])
    # root reads a 000 folder like any other; a user cannot, and nothing is changed to try
    assert unreadable == (0 if os.geteuid() == 0 else 1)
    assert stat.S_IMODE(os.lstat(os.path.join(top, "locked")).st_mode) == 0
    os.chmod(os.path.join(top, "locked"), 0o700)


def test_entries_vanishing_mid_walk(tmp_path, monkeypatch):
    top = tmp_path / "t"
    for i in range(50):
        d = top / f"d{i}"
        d.mkdir(parents=True)
        (d / "f").write_text("x")
        (top / f"f{i}").write_text("x")
    real_scandir = os.scandir

    class Vanishing:
        """A listing whose every entry another process removes right after it is read."""

        def __init__(self, fd):
            self.it = real_scandir(fd)
            self.fd = fd

        def __iter__(self):
            return self

        def __next__(self):
            e = next(self.it)
            try:
                if e.is_dir(follow_symlinks=False):
                    sub = os.open(e.name, os.O_RDONLY, dir_fd=self.fd)
                    for n in os.listdir(sub):
                        os.unlink(n, dir_fd=sub)
                    os.close(sub)
                    os.rmdir(e.name, dir_fd=self.fd)
                else:
                    os.unlink(e.name, dir_fd=self.fd)
            except OSError:
                pass
            return e

        def close(self):
            self.it.close()

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.close()

    monkeypatch.setattr(os, "scandir", Vanishing)
    pfd = os.open(tmp_path, os.O_RDONLY)
    try:
        trees.remove_tree(pfd, "t")
    finally:
        os.close(pfd)
    monkeypatch.undo()
    assert not top.exists()


MOUNT_CHECK = r"""
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from sbxc.runtime import trees
base = sys.argv[2]
os.makedirs(base + "/t/m")
subprocess.run(["mount", "-t", "tmpfs", "none", base + "/t/m"], check=True)
open(base + "/t/m/inside", "w").write("keep")
pfd = os.open(base, os.O_RDONLY)
try:
    trees.remove_tree(pfd, "t")
    print("removed")
except OSError as e:
    print("stopped at", e.filename)
print(open(base + "/t/m/inside").read())
subprocess.run(["umount", base + "/t/m"], check=True)
"""


def test_a_mount_point_inside_is_not_entered(tmp_path):
    # A mount namespace of the test's own (as root in a user namespace: any uid can do it)
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", MOUNT_CHECK,
                        SRC, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["stopped at t/m", "keep"], r.stdout


# --- host_program ---------------------------------------------------------------------------

def test_only_system_folders_on_path_count(tmp_path):
    real = probe.host_program("bwrap", {"PATH": "/usr/bin:/bin"})[0]
    if not real:
        pytest.skip("bwrap is not installed")
    mine = tmp_path / "bin"
    mine.mkdir()
    (mine / "bwrap").symlink_to(real)  # even a link to the real one: not from this folder
    fake = tmp_path / "bin2"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\n")
    (fake / "bwrap").chmod(0o755)
    path, note = probe.host_program("bwrap", {"PATH": f"{mine}:{fake}:/usr/bin"})
    assert path == real and str(mine / "bwrap") in note
    path, note = probe.host_program("bwrap", {"PATH": f"{fake}"})
    assert path == "" and str(fake / "bwrap") in note
    assert probe.host_program("bwrap", {"PATH": "relative:"}) == ("", "")


def test_configured_program_is_checked(tmp_path):
    prog = tmp_path / "tools" / "bwrap"
    prog.parent.mkdir()
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    env = {"PATH": "/usr/bin", "SBXC_BWRAP": str(prog)}
    assert probe.host_program("bwrap", env) == (str(prog.resolve()), "")
    prog.parent.chmod(0o775)
    path, note = probe.host_program("bwrap", env)
    assert path == "" and "writable by its group" in note
    prog.parent.chmod(0o755)
    prog.chmod(0o775)
    assert probe.host_program("bwrap", {"PATH": "/bin", "SBXC_BWRAP": str(prog)})[0] == ""
    link = tmp_path / "link"
    link.symlink_to(prog.parent)
    prog.chmod(0o755)
    # the real path is what is checked and what runs
    assert probe.host_program("bwrap", {"PATH": "/x", "SBXC_BWRAP": str(link / "bwrap")})[0] == str(prog.resolve())
    assert "absolute" in probe.host_program("bwrap", {"SBXC_BWRAP": "bwrap"})[1]


def test_real_paths_agree_with_realpath(tmp_path):
    """The shared-folder resolver gives realpath's answer for links of every kind."""
    from sbxc.runtime.safeopen import real_paths

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "sub" / "f").write_text("x")
    (tmp_path / "abs").symlink_to(tmp_path / "real")
    (tmp_path / "rel").symlink_to("real/sub")
    (tmp_path / "up").symlink_to("real/sub/../sub")
    (tmp_path / "chain").symlink_to("abs")
    (tmp_path / "dangling").symlink_to("nowhere/at/all")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "real" / "sub" / "back").symlink_to("../..")
    t = str(tmp_path)
    paths = [t + p for p in ("/real/sub/f", "/abs/sub/f", "/rel/f", "/up/f", "/chain/sub", "/dangling/x",
                             "/missing/a/b", "/real/sub/back/abs/sub/f", "/abs", "/", "/real/./sub", "/loop/x")]
    paths += ["/", "/usr/bin", "/proc/self"]
    assert real_paths(paths) == [os.path.realpath(p) for p in paths]
