"""The warm pool's keeper, live: real inotify watches on a real project, real background
processes. A change made to the project after the pool filled must make the next start a
fresh copy with the new content; an unchanged project is served from the pool on the
keeper's word alone (no per-entry check)."""
from __future__ import annotations

import json
import mmap
import os
import stat
import time

import pytest

from conftest import base_env, run, sbxc_argv

POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\nworkspace: {pool: 1}\n"


@pytest.fixture(autouse=True)
def own_root(session_root):
    return session_root  # conftest.session_root


@pytest.fixture
def proj(project):
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    os.makedirs(os.path.join(project, "src", "deep"))
    with open(os.path.join(project, "src", "deep", "mod.py"), "w") as f:
        f.write("x = 1\n")
    return project


class Pool:
    def __init__(self, project, home):
        self.project, self.home = project, home

    def sbxc(self, *args):
        return run(sbxc_argv(*args), env=base_env(self.home), cwd=self.project, timeout=120)

    def start(self) -> dict:
        r = self.sbxc("session", "start", "--format", "json")
        assert r.rc == 0, r
        return json.loads(r.out)

    def key_fd(self) -> int:
        from sbxc.runtime.session_pool import POOL, pool_key
        from sbxc.runtime.sessions import open_store

        store = open_store(os.environ, create=False)
        try:
            return os.open(f"{POOL}/{pool_key(self.project)}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                           dir_fd=store)
        finally:
            os.close(store)

    def ask(self):
        """The keeper's answer now: the set of ready copies it vouches for, or None."""
        from sbxc.runtime.session_ask import ask, done

        fd = self.key_fd()
        try:
            conn, vouched = ask(fd, 1)
            done(conn, False)
            return vouched
        finally:
            os.close(fd)

    def wait_vouched(self, timeout=60) -> set:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                got = self.ask()
            except FileNotFoundError:
                got = None
            if got:
                return got
            time.sleep(0.1)
        raise AssertionError(f"the keeper never vouched for a ready copy: {self.sbxc('session', 'list').out}")

    def filled(self) -> set:
        """A first start (a fresh copy), then the keeper's word for the ready copy."""
        first = self.start()
        assert first["method"] in ("copy", "reflink") and first["pool_check"] == "", first
        return self.wait_vouched()


@pytest.fixture
def pool(proj, home):
    return Pool(proj, home)


def read(ws, rel):
    with open(os.path.join(ws, rel)) as f:
        return f.read()


def test_unchanged_project_is_served_on_the_keepers_word(pool):
    vouched = pool.filled()
    assert len(vouched) == 1
    got = pool.start()
    assert got["method"] == "pool" and got["pool_check"] == "keeper", got
    assert read(got["workspace"], "README") == "hello\n"
    assert read(got["workspace"], "src/deep/mod.py") == "x = 1\n"
    # The keeper refills after the take, and vouches for the new copy too.
    again = pool.wait_vouched()
    assert again and not (again & vouched)
    lst = json.loads(pool.sbxc("session", "list", "--format", "json").out)["pool"]
    assert [(p["ready"], p["keeper"]) for p in lst] == [(1, "watching")], lst
    text = pool.sbxc("session", "list").out
    assert "a keeper watches the project" in text, text
    assert "keeper watches the project" in pool.sbxc("doctor").out


def _edit(p, o):
    with open(os.path.join(p, "README"), "r+") as f:
        f.write("HELLO")  # same size: only the content differs


def _add(p, o):
    with open(os.path.join(p, "src", "new.py"), "w") as f:
        f.write("new\n")


def _chmod(p, o):
    os.chmod(os.path.join(p, "README"), 0o600)


def _rename(p, o):
    os.rename(os.path.join(p, "src", "deep", "mod.py"), os.path.join(p, "src", "deep", "moved.py"))


def _delete(p, o):
    os.unlink(os.path.join(p, "src", "deep", "mod.py"))


def _via_older_hard_link(p, o):
    # The second name was made before the pool filled (see the fixture in the test).
    with open(os.path.join(o, "other-name"), "r+") as f:
        f.write("LINKED")


def _via_newer_hard_link(p, o):
    # A name made after the watches were installed: `link` reports only to the new
    # name's folder (outside the project) and to the file's own watchers.
    os.link(os.path.join(p, "src", "deep", "mod.py"), os.path.join(o, "late-name"))
    with open(os.path.join(o, "late-name"), "r+") as f:
        f.write("y")


def _mapped(p, o):
    fd = os.open(os.path.join(p, "README"), os.O_RDWR)
    m = mmap.mmap(fd, 5)
    os.close(fd)
    m[0:5] = b"MAPPD"
    m.close()  # the release of the mapping is what inotify reports


def _retarget_link(p, o):
    os.unlink(os.path.join(p, "link"))
    os.symlink("src/deep", os.path.join(p, "link"))


CHANGES = {
    "edit a file (same size)": (_edit, "README", "HELLO\n"),
    "add a file": (_add, "src/new.py", "new\n"),
    "chmod": (_chmod, None, None),
    "rename": (_rename, "src/deep/moved.py", "x = 1\n"),
    "delete": (_delete, "src/deep/mod.py", None),
    "write through an older hard link": (_via_older_hard_link, "linked", "LINKED\n"),
    "write through a hard link made after the pool filled": (_via_newer_hard_link, "src/deep/mod.py", "y = 1\n"),
    "write through a shared mapping, then release it": (_mapped, "README", "MAPPD\n"),
    "retarget a symlink": (_retarget_link, "link", None),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_after_the_pool_filled_means_a_fresh_copy(pool, proj, tmp_path, name):
    change, rel, want = CHANGES[name]
    outside = tmp_path / "outside"
    outside.mkdir()
    with open(os.path.join(proj, "linked"), "w") as f:
        f.write("linked\n")
    os.link(os.path.join(proj, "linked"), outside / "other-name")
    os.symlink("README", os.path.join(proj, "link"))
    assert pool.filled()
    change(proj, str(outside))
    assert pool.ask() == set(), f"the keeper still vouches for its copy after: {name}"
    got = pool.start()
    assert got["method"] != "pool", got
    ws = got["workspace"]
    if rel is not None and want is not None:
        assert read(ws, rel) == want
    elif rel is not None:
        assert not os.path.lexists(os.path.join(ws, rel)) or os.path.islink(os.path.join(ws, rel))
        if name == "retarget a symlink":
            assert os.readlink(os.path.join(ws, rel)) == "src/deep"
    if name == "chmod":
        assert stat.S_IMODE(os.lstat(os.path.join(ws, "README")).st_mode) == 0o600
    # After a quiet moment the keeper watches again and vouches for a copy of the new state.
    pool.wait_vouched()
    again = pool.start()
    assert again["pool_check"] == "keeper", again
    assert sorted(os.listdir(again["workspace"])) == sorted(os.listdir(proj))


def test_a_change_in_a_new_nested_folder_is_seen(pool, proj):
    assert pool.filled()
    os.makedirs(os.path.join(proj, "fresh", "er"))
    assert pool.ask() == set()
    # The keeper watches again, now the new folders too.
    pool.wait_vouched()
    with open(os.path.join(proj, "fresh", "er", "f"), "w") as f:
        f.write("nested\n")
    assert pool.ask() == set()
    got = pool.start()
    assert got["method"] != "pool" and read(got["workspace"], "fresh/er/f") == "nested\n", got


def test_a_change_to_a_symlinks_target_outside_is_no_change(pool, proj, tmp_path):
    target = tmp_path / "target"
    target.write_text("one\n")
    os.symlink(str(target), os.path.join(proj, "out"))
    assert pool.filled()
    target.write_text("two\n")  # the copy holds the link, not the target
    got = pool.start()
    assert got["pool_check"] == "keeper" and os.readlink(os.path.join(got["workspace"], "out")) == str(target), got


def test_the_keepers_socket_is_the_owners_only(pool):
    from sbxc.runtime.session_ask import SOCK

    pool.filled()
    fd = pool.key_fd()
    try:
        st = os.stat(SOCK, dir_fd=fd, follow_symlinks=False)
        folder = os.fstat(fd)
    finally:
        os.close(fd)
    assert stat.S_ISSOCK(st.st_mode) and st.st_mode & 0o077 == 0 and st.st_uid == os.getuid()
    assert folder.st_mode & 0o077 == 0 and folder.st_uid == os.getuid()


def _alive(pid: int) -> bool:
    """Running, not a zombie (a subreaper above the test may not have reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_keeper_leaves_when_its_pool_is_removed(pool):
    from sbxc.runtime.session_ask import _read_note
    from sbxc.runtime.trees import remove_tree

    pool.filled()
    fd = pool.key_fd()
    try:
        pid = int(_read_note(fd)["pid"])
    finally:
        os.close(fd)
    assert _alive(pid)
    from sbxc.runtime.session_pool import POOL
    from sbxc.runtime.sessions import open_store

    store = open_store(os.environ, create=False)
    try:
        pfd = os.open(POOL, os.O_RDONLY | os.O_DIRECTORY, dir_fd=store)
        try:
            remove_tree(pfd, os.listdir(pfd)[0])
        finally:
            os.close(pfd)
    finally:
        os.close(store)
    deadline = time.time() + 30
    while time.time() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the keeper outlived its pool"
    # With no keeper the next start still works: a fresh copy, or a ready copy that a
    # refill still at work when the pool was removed made again (taken after its check).
    assert pool.start()["method"] in ("copy", "reflink", "pool")


def test_the_keeper_gives_up_past_its_watch_budget(proj, monkeypatch):
    from sbxc.runtime import session_keeper

    monkeypatch.setattr(session_keeper.Watch, "_limit", lambda self: 6)
    with pytest.raises(session_keeper.GiveUp, match="half of the inotify watch limit"):
        session_keeper.Watch(proj)
    w = session_keeper.Watch(os.path.join(proj, "src"))
    try:
        assert not w.changed()
        with open(os.path.join(proj, "src", "deep", "mod.py"), "a") as f:
            f.write("# more\n")
        assert w.changed()
    finally:
        w.close()


def test_a_keeper_that_gives_up_says_why_and_the_pool_still_checks(pool, proj):
    """A project the keeper cannot watch soundly: a mount inside it (as root), or an entry
    it may not watch (unprivileged: a FIFO of mode 000, which cp copies without reading)."""
    import subprocess

    where = os.path.join(proj, "inside")
    if os.getuid() == 0:
        os.mkdir(where)
        subprocess.run(["mount", "-t", "tmpfs", "sbxc-test", where], check=True)
        why = "another file system"
    else:
        os.mkfifo(where, 0o000)
        why = "cannot be watched"
    try:
        first = pool.start()
        assert first["method"] in ("copy", "reflink"), first
        deadline = time.time() + 60
        while time.time() < deadline:
            lst = json.loads(pool.sbxc("session", "list", "--format", "json").out)["pool"]
            if lst and lst[0]["keeper"] == "gave up" and lst[0]["ready"] == 1:
                break
            time.sleep(0.1)
        assert lst[0]["keeper"] == "gave up" and why in lst[0]["keeper_why"], lst
        assert "the keeper gave up" in pool.sbxc("session", "list").out
        assert "keeper gave up" in pool.sbxc("doctor").out
        # Without a keeper's word the pool is still used, after the full check.
        got = pool.start()
        assert got["method"] == "pool" and got["pool_check"] == "entries", got
    finally:
        if os.getuid() == 0:
            subprocess.run(["umount", where], check=True)


def test_the_answer_reads_the_event_queue_first(proj, tmp_path):
    """The keeper reads its queue dry when a question comes, not only when its loop gets
    to it: a change whose system call returned before the question is in the answer."""
    import fcntl

    from sbxc.runtime.session_keeper import Keeper

    key = tmp_path / "key"
    key.mkdir(mode=0o700)
    kfd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    busy = os.open(key / "busy.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(busy, fcntl.LOCK_EX)
    k = Keeper(kfd, busy, proj, 1, make=None, verify=lambda name: True, entries=lambda: ["e-x"])
    try:
        k.arm()
        assert k.vouched == {"e-x"} and k.clean_now()
        with open(os.path.join(proj, "src", "deep", "mod.py"), "a") as f:
            f.write("# later\n")
        assert not k.clean_now() and k.vouched == set()
    finally:
        k.close()
        os.close(busy)
        os.close(kfd)


def test_a_pool_start_loads_neither_the_compiler_nor_heavy_modules(pool, home):
    """A start served by the keeper from a cached plan: no compiler, YAML, Lark, json, re,
    hashlib, subprocess or ctypes (each costs the start milliseconds)."""
    import sys

    from conftest import PYTHON, SRC

    pool.filled()
    code = ("import io, sys\n"
            f"sys.path.insert(0, {SRC!r})\n"
            "sys.argv = ['sbxc', 'session', 'start', '--format', 'json']\n"
            "from sbxc.cli import main\n"
            "out, sys.stdout = sys.stdout, io.StringIO()\n"
            "rc = main()\n"
            "got, sys.stdout = sys.stdout.getvalue(), out\n"
            "heavy = sorted(m for m in sys.modules if m.startswith('sbxc.compiler') or m.split('.')[0] in\n"
            "               ('yaml', 'lark', 'json', 're', 'hashlib', 'subprocess', 'ctypes', 'socket'))\n"
            "print(rc, heavy, got.count('\"keeper\"'))\n")
    r = run([PYTHON, "-IS", "-c", code], env=base_env(home), cwd=pool.project, timeout=120)
    assert r.rc == 0 and r.out.split() == ["0", "[]", "1"], (r, sys.executable)
