"""Run side of the per-project cache (sbxc.runtime.cachedir): creation, checks, fallback,
cleanup. These call the module directly; tests/live/test_cache_live.py goes through exec."""
import os
import stat
import subprocess
import time

import pytest

from sbxc import cache
from sbxc.runtime import cachedir, trees
from sbxc.runtime.errors import Refusal

UID = os.getuid()
PROJECT = "/work/some/project"
NOBODY = 65534


def section(root, tools=cache.DEFAULT_TOOLS, required=False, project=PROJECT):
    d = cache.project_dir(str(root), project)
    return {"enabled": True, "root": str(root), "dir": d, "env": [list(kv) for kv in cache.cache_env(tools, d)],
            "required": required}


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


def tree(p):
    """Every path under p (for 'nothing was written here')."""
    out = []
    for dp, dns, fns in os.walk(p):
        out += [os.path.join(dp, n) for n in dns + fns]
    return sorted(out)


@pytest.fixture
def base(tmp_path):
    # tmp_path's parents are owned by the caller or root, and /tmp is sticky: a fair stand-in
    # for /var/tmp. Make sure the test folder itself is private.
    os.chmod(tmp_path, 0o700)
    return tmp_path


# --- the regular case ---------------------------------------------------------------------

def test_creates_root_and_project_0700_with_marker(base):
    root = base / "cache"
    c = section(root)
    setup = cachedir.prepare(c, project=PROJECT)
    assert setup.warning is None and setup.dir == c["dir"]
    for p in (root, c["dir"]):
        st = os.lstat(p)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == UID and mode(p) == 0o700
    for _k, v in c["env"]:
        assert os.path.isdir(v) and v.startswith(c["dir"] + "/")
    marker = str(root / (os.path.basename(c["dir"]) + cache.MARKER_SUFFIX))
    assert open(marker).read() == PROJECT + "\n"
    assert mode(marker) == 0o600
    assert dict(setup.env) == dict(map(tuple, c["env"]))
    assert setup.relocate(c["dir"] + "/pip") == c["dir"] + "/pip"
    setup.cleanup()  # a no-op: the regular cache stays
    assert os.path.isdir(c["dir"])


def test_second_run_finds_what_the_first_left(base):
    c = section(base / "cache")
    d1 = cachedir.prepare(c, project=PROJECT).dir
    with open(os.path.join(d1, "xdg", "kept"), "w") as f:
        f.write("x")
    d2 = cachedir.prepare(c, project=PROJECT).dir
    assert d1 == d2 and open(os.path.join(d2, "xdg", "kept")).read() == "x"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o277])
def test_made_0700_whatever_the_umask(base, umask):
    old = os.umask(umask)
    try:
        c = section(base / "cache")
        setup = cachedir.prepare(c, project=PROJECT)
    finally:
        os.umask(old)
    assert setup.warning is None
    assert mode(base / "cache") == 0o700 and mode(c["dir"]) == 0o700


def test_marker_records_last_use(base):
    c = section(base / "cache")
    cachedir.prepare(c, project=PROJECT)
    marker = c["dir"] + cache.MARKER_SUFFIX
    os.utime(marker, (1000, 1000))
    cachedir.prepare(c, project=PROJECT)
    assert os.stat(marker).st_mtime > 1000


def test_disabled_cache_does_nothing(base):
    setup = cachedir.prepare({"enabled": False, "root": str(base / "c"), "dir": str(base / "c/x"), "env": []})
    assert setup.dir is None and setup.env == [] and not os.path.exists(base / "c")
    d, w, cleanup = setup
    assert (d, w, cleanup) == (None, None, None)


def test_prepare_leaves_the_process_environment_alone(base):
    before = dict(os.environ)
    cachedir.prepare(section(base / "cache"), project=PROJECT)
    assert dict(os.environ) == before


# --- suspect folders: throwaway + warning, nothing written through them ---------------------

def assert_throwaway(setup, c, problem):
    assert setup.warning and problem in setup.warning
    assert setup.warning.startswith("sbxc: warning: ") and "\n" not in setup.warning
    assert "throwaway" in setup.warning and "fix:" in setup.warning
    assert setup.dir != c["dir"]
    troot = setup.actual_root
    assert setup.dir == troot + "/" + os.path.basename(c["dir"])
    st = os.lstat(troot)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == UID and mode(troot) == 0o700
    # the env and the bind move together into the throwaway; the root's mask stays on the
    # planned root (other projects' caches are in it) and the throwaway gets one too
    for k, v in setup.env:
        assert v.startswith(setup.dir + "/") and os.path.isdir(v), (k, v)
    assert setup.relocate(c["root"]) == troot
    # (only where a mount can go: a real folder, reached through no link; a link, a file or
    # a missing root holds no project's cache of sbxc's)
    real = os.path.isdir(c["root"]) and os.path.realpath(c["root"]) == c["root"]
    assert setup.root_masked == real
    assert setup.masks(c["root"]) == ([c["root"], troot] if real else [troot])
    assert setup.masks(c["dir"]) == [setup.dir] and setup.masks("/elsewhere") == ["/elsewhere"]
    assert setup.relocate(c["dir"]) == setup.dir
    assert setup.relocate(c["root"] + "x") == c["root"] + "x"
    # other things under the root (the plan cache, a sibling project) stay where they are
    assert setup.relocate(c["root"] + "/plans") == c["root"] + "/plans"
    assert setup.relocate(c["dir"] + "x/y") == c["dir"] + "x/y"
    argv = ["--tmpfs", c["root"], "--bind", c["dir"], c["dir"], "--remount-ro", c["root"], "--", "ls", c["dir"]]
    kept = ["--tmpfs", c["root"]] if real else []
    again = ["--remount-ro", c["root"]] if real else []
    assert setup.relocate_argv(argv) == kept + ["--tmpfs", troot, "--bind", setup.dir, setup.dir,
                                                *again, "--remount-ro", troot, "--", "ls", c["dir"]]
    assert os.listdir(setup.dir) and all(not os.listdir(v) for _k, v in setup.env)  # empty
    setup.cleanup()
    assert not os.path.lexists(troot)


def test_symlinked_root(base):
    target = base / "target"
    target.mkdir(mode=0o700)
    (base / "root").symlink_to(target)
    c = section(base / "root")
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "is a symlink")
    assert tree(target) == []


def test_symlinked_project_folder(base):
    root = base / "root"
    root.mkdir(mode=0o700)
    target = base / "target"
    target.mkdir(mode=0o700)
    c = section(root)
    os.symlink(target, c["dir"])
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "is a symlink")
    assert tree(target) == []


def test_root_mode_0755(base):
    root = base / "root"
    root.mkdir()
    os.chmod(root, 0o755)
    c = section(root)
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "mode 0755, wider than 0700")
    assert f"chmod 700 {root}" in setup.warning
    assert tree(root) == []


def test_project_folder_mode_0770(base):
    root = base / "root"
    root.mkdir(mode=0o700)
    c = section(root)
    os.mkdir(c["dir"])
    os.chmod(c["dir"], 0o770)
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "mode 0770")
    assert tree(c["dir"]) == []


def other_owned_root(base):
    """A cache root owned by someone else: chown'd to nobody as root; as an unprivileged
    user, a folder root owns (we cannot chown, and root's folders are the realistic case)."""
    if UID == 0:
        root = base / "root"
        root.mkdir(mode=0o700)
        os.chown(root, NOBODY, NOBODY)
        return root, NOBODY
    for cand in ("/var/tmp", "/usr/share", "/usr"):
        st = os.lstat(cand)
        if stat.S_ISDIR(st.st_mode) and st.st_uid != UID:
            return cand, st.st_uid
    pytest.skip("no folder owned by another user found")


def test_root_owned_by_another_user(base):
    root, owner = other_owned_root(base)
    c = section(root)
    before = tree(root) if UID == 0 else None
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, f"owned by uid {owner}")
    assert not os.path.lexists(c["dir"])
    if before is not None:
        assert tree(root) == before


@pytest.mark.root_only  # giving a folder to another user (the root-owned root case runs unprivileged)
def test_project_folder_owned_by_another_user(base):
    root = base / "root"
    root.mkdir(mode=0o700)
    c = section(root)
    os.mkdir(c["dir"], 0o700)
    os.chown(c["dir"], NOBODY, NOBODY)
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, f"owned by uid {NOBODY}")
    assert tree(c["dir"]) == []


def test_parent_writable_by_others_and_not_sticky(base):
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone could rename our root away and put theirs there
    c = section(shared / "root")
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "writable by others and not sticky")
    assert tree(shared) == []


def test_symlink_on_the_way_to_the_root(base):
    real = base / "real"
    real.mkdir(mode=0o700)
    (base / "via").symlink_to(real)
    c = section(base / "via" / "root")
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "is a symlink")
    assert tree(real) == []


def test_root_is_a_file(base):
    (base / "root").write_text("")
    c = section(base / "root")
    setup = cachedir.prepare(c, project=PROJECT)
    assert_throwaway(setup, c, "is not a folder")


def test_required_refuses_with_125_line(base):
    root = base / "root"
    root.mkdir()
    os.chmod(root, 0o755)
    c = section(root, required=True)
    with pytest.raises(Refusal) as ei:
        cachedir.prepare(c, project=PROJECT)
    line = ei.value.line()
    assert line.startswith("sbxc: ") and "cache.required" in line and "chmod 700" in line
    assert tree(root) == []


def test_required_with_a_good_folder_runs(base):
    c = section(base / "root", required=True)
    assert cachedir.prepare(c, project=PROJECT).warning is None


def test_warning_is_one_printable_line(base):
    root = base / "a\nb\x1b[31m"
    root.mkdir()
    os.chmod(root, 0o755)
    setup = cachedir.prepare(section(root), project=PROJECT)
    try:
        assert "\n" not in setup.warning and "\x1b" not in setup.warning
    finally:
        setup.cleanup()


# --- removal never follows links out -------------------------------------------------------

def outside_victim(base):
    victim = base / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    (victim / "sub").mkdir()
    (victim / "sub" / "also").write_text("keep")
    return victim


def test_cleanup_does_not_follow_links_out(base):
    victim = outside_victim(base)
    root = base / "root"
    root.mkdir()
    os.chmod(root, 0o755)
    setup = cachedir.prepare(section(root), project=PROJECT)
    d = setup.dir
    os.symlink(victim, os.path.join(d, "pip", "dirlink"))
    os.symlink(victim / "precious", os.path.join(d, "filelink"))
    os.link(victim / "precious", os.path.join(d, "hardlink"))
    os.makedirs(os.path.join(d, "go", "mod", "ro", "deep"))
    os.chmod(os.path.join(d, "go", "mod", "ro"), 0o555)  # Go's module cache is read-only
    os.chmod(os.path.join(d, "xdg"), 0)                  # a command can chmod 000
    setup.cleanup()
    assert not os.path.lexists(setup.actual_root)
    assert tree(victim) == [str(victim / "precious"), str(victim / "sub"), str(victim / "sub" / "also")]
    assert (victim / "precious").read_text() == "keep"


def test_empty_dir_handles_read_only_and_links(base):
    victim = outside_victim(base)
    d = base / "d"
    (d / "a" / "b").mkdir(parents=True)
    (d / "a" / "b" / "f").write_text("x")
    os.chmod(d / "a" / "b", 0o500)
    os.chmod(d / "a", 0o500)
    (d / "l").symlink_to(victim)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        trees.empty_dir(fd)
    finally:
        os.close(fd)
    assert os.listdir(d) == []
    assert len(tree(victim)) == 3


def test_disk_usage_agrees_with_du(base):
    d = base / "d"
    (d / "x" / "y").mkdir(parents=True)
    (d / "big").write_bytes(os.urandom(300_000))
    (d / "x" / "small").write_bytes(b"1")
    (d / "x" / "y" / "sparse").open("wb").truncate(10_000_000)
    os.link(d / "big", d / "x" / "big-again")  # counted once, as du does
    (d / "ln").symlink_to("/usr")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        nbytes, unreadable = trees.disk_usage(fd)
    finally:
        os.close(fd)
    du = int(subprocess.run(["du", "-sk", str(d)], capture_output=True, text=True, check=True).stdout.split()[0])
    assert -(-nbytes // 1024) == du
    assert du >= 300  # the random file really is counted
    assert unreadable == 0


# --- throwaways left by killed runs ---------------------------------------------------------

def fake_leftover(age):
    base = cachedir.THROWAWAY_BASES[0]
    name = f"{cachedir.THROWAWAY_PREFIX}{UID}-{os.urandom(8).hex()}"
    p = os.path.join(base, name)
    os.makedirs(os.path.join(p, "proj-0123456789abcdef", "xdg"))
    os.chmod(os.path.join(p, "proj-0123456789abcdef"), 0o500)  # read-only, as Go leaves them
    t = time.time() - age
    os.utime(p, (t, t))
    return base, name, p


def test_stale_unlocked_throwaways_are_reaped_fresh_or_locked_ones_kept(base):
    import fcntl

    old_base, old_name, old = fake_leftover(3600)
    _, _, fresh = fake_leftover(0)
    _, held_name, held = fake_leftover(3600)
    lock = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        assert (old_base, old_name) in cachedir.leftover_throwaways(UID)
        assert all(n != held_name for _b, n in cachedir.leftover_throwaways(UID))
        # a run that needs a throwaway reaps the stale one on the way
        root = base / "root"
        root.mkdir()
        os.chmod(root, 0o755)
        setup = cachedir.prepare(section(root), project=PROJECT)
        assert not os.path.lexists(old)
        assert os.path.isdir(fresh) and os.path.isdir(held)
        # and its own throwaway is locked while the run lasts
        probe = os.open(setup.actual_root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
        assert (cachedir.THROWAWAY_BASES[0], os.path.basename(setup.actual_root)) not in \
            cachedir.leftover_throwaways(UID, now=time.time() + 7200)
        setup.cleanup()
        setup.cleanup()  # twice is harmless
        assert not os.path.lexists(setup.actual_root)
    finally:
        os.close(lock)
        for p in (fresh, held, old):
            if os.path.lexists(p):
                fd = os.open(os.path.dirname(p), os.O_PATH | os.O_DIRECTORY)
                try:
                    trees.remove_tree(fd, os.path.basename(p))
                finally:
                    os.close(fd)


# --- inside a nested user namespace ---------------------------------------------------------

NESTED = r'''
import json, os, sys
from sbxc.runtime.cachedir import prepare, nested_overflow_uid
c = json.loads(sys.argv[1])
s = prepare(c, "/some/project")
out = {"overflow": nested_overflow_uid(), "dir": s.dir, "warning": s.warning, "env": s.env}
s.cleanup()
out["left"] = os.path.lexists(s.actual_root) if s.actual_root != c["root"] else False
print(json.dumps(out))
'''


def test_nested_user_namespace_gets_a_throwaway_not_a_refusal(base):
    """In a user namespace root's folders show as the overflow uid: the persistent cache
    cannot be vouched for, but the run still gets a (throwaway) cache instead of 125."""
    import json
    import shutil
    import sys

    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is not installed")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    argv = ["unshare", "-r", sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {[src] + sys.path!r}\n" + NESTED]
    root = f"/var/tmp/sbxc-nested-test-{os.getpid()}"
    c = section(root)
    if UID == 0:
        # as root a namespace maps root itself; run as an account-less uid so that root's
        # folders are outside the namespace, as they are for any user
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is not installed")
        argv = ["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups"] + argv
    r = subprocess.run(argv + [json.dumps(c)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "unshare" in r.stderr:
        pytest.skip(f"user namespaces are not available here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["overflow"] > 0
    assert out["warning"] and "outside this user namespace" in out["warning"]
    assert out["dir"].startswith(("/var/tmp/" + cachedir.THROWAWAY_PREFIX, "/tmp/" + cachedir.THROWAWAY_PREFIX))
    assert not out["left"]
    assert not os.path.lexists(root)
