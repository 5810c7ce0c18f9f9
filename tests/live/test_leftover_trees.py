"""Nothing a command leaves behind breaks later runs or sbxc's own commands.

A sandboxed command builds, where it may write, the worst tree it can: a chain of folders
6000 levels deep (deeper than any path sbxc could name, and than Python's recursion
limit), a folder it made unreadable (mode 000) with files in it, a FIFO, a socket, a name
that is not UTF-8, symlinks to the host. In the per-run /tmp of a Landlock run (left by a
run that was killed, then reaped by the next run) and in the project's cache folder
(measured by doctor, emptied by cache clear). The next Landlock run must work, doctor
must report without a traceback and cache clear must remove everything (exit 0), while
nothing outside the tree is touched.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SANDBOX_PYTHON, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

DEPTH = 6000

# Runs inside the sandbox: argv[1] the folder to fill, argv[2] a host file to link to,
# argv[3] (optional) a file to write when done, then sleep until killed.
BUILD = r"""
import os, socket, stat, sys, time
top = sys.argv[1]
fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
base = os.dup(fd)
for i in range(%d):
    os.mkdir("d", dir_fd=fd)
    nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    if i %% 1500 == 0:
        os.symlink(sys.argv[2], "link", dir_fd=fd)
        w = os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(w, b"x" * 5000)
        os.close(w)
os.close(fd)
os.mkfifo("fifo", dir_fd=base)
try:
    s = socket.socket(socket.AF_UNIX)
    s.bind(top + "/sock")
except OSError:  # Landlock refuses new Unix sockets: a socket inode all the same
    os.mknod(top + "/sock", stat.S_IFSOCK | 0o600)
w = os.open(b"\xff\xfe-odd", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=base)
os.close(w)
os.makedirs(top + "/locked/inner/more")
with open(top + "/locked/inner/file", "w") as f:
    f.write("y" * 9000)
os.symlink(sys.argv[2], top + "/locked/inner/link")
try:
    os.chmod(top + "/locked/inner", 0)
    os.chmod(top + "/locked", 0)
except PermissionError:  # root on Landlock: every chmod is refused (docs/landlock.md)
    pass
os.symlink("/", top + "/root-link")
if len(sys.argv) > 3:
    with open(sys.argv[3], "w") as f:
        f.write(top)
    time.sleep(60)
""" % DEPTH


@pytest.fixture
def victim(tmp_path):
    """A host file the tree links to: it must survive every removal. Afterwards nothing
    deep stays in tmp_path (pytest removes old temporary folders recursively)."""
    p = tmp_path / "victim"
    p.write_text("keep")
    os.chmod(tmp_path, 0o755)
    yield str(p)
    from sbxc.runtime import trees

    pfd = os.open(tmp_path, os.O_RDONLY)
    try:
        for name in os.listdir(pfd):
            trees.remove_tree(pfd, name)
    finally:
        os.close(pfd)


def _landlock():
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")


def test_killed_run_leaves_a_nasty_tmp_the_next_landlock_run_reaps(project, home, victim):
    _landlock()
    env = base_env(home)
    ready = os.path.join(project, "ready")
    # $TMPDIR is the per-run folder; expanded by a shell inside, not by sbxc
    argv = sbxc_argv("exec", "--backend", "landlock", "--", "/bin/sh", "-c",
                     f'exec {SANDBOX_PYTHON} -c "$0" "$TMPDIR" {victim} {ready}', BUILD)
    p = subprocess.Popen(argv, env=env, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(1200):
            if os.path.exists(ready) or p.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.exists(ready), p.communicate(timeout=10)
        run_dir = open(ready).read()
        p.send_signal(signal.SIGKILL)  # sbxc dies before its clean-up
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert os.path.isdir(run_dir), "the killed run should have left its per-run folder"
    # The reaper ends the command on sbxc's death; on a loaded machine that can take a
    # while, and a folder whose command still runs is rightly kept. So: a minute and more
    # later (stale, rundirs.STALE_AFTER) and once unlocked, the next run removes it.
    for _ in range(40):
        old = time.time() - 3600
        os.utime(run_dir, (old, old))
        r = run(sbxc_argv("exec", "--backend", "landlock", "--", "/bin/sh", "-c", "echo next"), env=env, cwd=project)
        assert r.rc == 0 and r.out == "next\n", r
        if not os.path.lexists(run_dir):
            break
        time.sleep(0.25)
    assert not os.path.lexists(run_dir), "the stale per-run folder was not reaped"
    assert open(victim).read() == "keep"


def test_nasty_tmp_of_a_finished_landlock_run_is_removed(project, home, victim):
    _landlock()
    env = base_env(home)
    where = os.path.join(project, "where")
    cmd = ["/bin/sh", "-c", f'{SANDBOX_PYTHON} -c "$0" "$TMPDIR" {victim} && echo "$TMPDIR" > {where}', BUILD]
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", *cmd), env=env, cwd=project)
    assert r.rc == 0, r
    assert "Traceback" not in r.err and "sbxc:" not in r.err, r
    assert not os.path.lexists(open(where).read().strip())
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", "/bin/sh", "-c", "echo next"), env=env, cwd=project)
    assert r.rc == 0 and r.out == "next\n", r
    assert open(victim).read() == "keep"


def _backends():
    from sbxc.runtime.probe import landlock_abi

    return ["bwrap"] + (["landlock"] if landlock_abi() > 0 else [])


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("how", ["project", "all"])
def test_nasty_cache_is_measured_and_cleared(bwrap_works, project, home, victim, backend, how, tmp_path):
    from sbxc import cache

    env = base_env(home)
    cmd = ["/bin/sh", "-c", f'mkdir -p "$XDG_CACHE_HOME/nasty" && {SANDBOX_PYTHON} -c "$0" "$XDG_CACHE_HOME/nasty" {victim}'
           ' && echo tampered > "$XDG_CACHE_HOME/evil"', BUILD]
    r = run(sbxc_argv("exec", "--backend", backend, "--", *cmd), env=env, cwd=project)
    assert r.rc == 0, r
    pdir = cache.project_dir(cache.default_root(os.getuid(), os.environ), project)
    assert os.path.exists(os.path.join(pdir, "xdg", "evil"))
    assert os.path.lexists(os.path.join(pdir, "xdg", "nasty", "locked"))

    r = run(sbxc_argv("doctor"), env=env, cwd=project)
    assert r.rc in (0, 1) and "Traceback" not in r.err and "Traceback" not in r.out, r
    assert os.path.basename(pdir) in r.out and "size:" in r.out, r

    if how == "project":
        r = run(sbxc_argv("cache", "clear", "--project", project), env=env, cwd=project)
        assert r.rc == 0, r
        assert os.listdir(pdir) == [], os.listdir(pdir)
    else:
        # --all also removes every other project's cache under the default root: use a
        # root of this test's own (the default's checks apply to it the same way)
        root = str(tmp_path / "root")
        os.mkdir(root, 0o700)
        mine = cache.project_dir(root, project)
        os.rename(pdir, mine)
        r = run(sbxc_argv("doctor", "--root", root), env=env, cwd=project)
        assert "Traceback" not in r.err and os.path.basename(mine) in r.out, r
        r = run(sbxc_argv("cache", "clear", "--all", "--root", root), env=env, cwd=project)
        assert r.rc == 0, r
        assert not os.path.lexists(mine)
    assert open(victim).read() == "keep"
    r = run(sbxc_argv("exec", "--backend", backend, "--", "/bin/sh", "-c", "echo next"), env=env, cwd=project)
    assert r.rc == 0 and r.out == "next\n", r
