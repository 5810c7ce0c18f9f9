"""The plan cache's storage: private folder, whole entries, bounded size (no sandbox needed)."""
from __future__ import annotations

import os
import stat
import time

from sbxc import discovery
from sbxc.runtime import plancache, planprune, planstore


def test_entries_round_trip_and_are_private(tmp_path):
    d = tmp_path / "plans"
    d.mkdir(mode=0o700)
    fd = os.open(str(d), os.O_PATH | os.O_DIRECTORY)
    try:
        planstore.write_entry(fd, "p-abc", {"v": plancache.ENTRY_VERSION, "plan": {"x": [1, "y"]}})
        assert planstore.read_entry(fd, "p-abc", plancache.ENTRY_VERSION)["plan"] == {"x": [1, "y"]}
        assert stat.S_IMODE(os.stat(d / "p-abc").st_mode) == 0o600
        # a symlink in place of an entry is never followed
        os.symlink("/etc/passwd", str(d / "p-link"))
        assert planstore.read_entry(fd, "p-link", plancache.ENTRY_VERSION) is None
        # garbage is a miss, not a crash
        (d / "p-bad").write_bytes(b"\x00garbage")
        assert planstore.read_entry(fd, "p-bad", plancache.ENTRY_VERSION) is None
        # another entry version is a miss
        planstore.write_entry(fd, "p-old", {"v": 0, "plan": {}})
        assert planstore.read_entry(fd, "p-old", plancache.ENTRY_VERSION) is None
        assert not [n for n in os.listdir(d) if n.startswith(".tmp-")]
    finally:
        os.close(fd)


def test_folder_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(planprune, "MAX_ENTRIES", 10)
    monkeypatch.setattr(planprune, "KEEP_ENTRIES", 6)
    d = tmp_path / "plans"
    d.mkdir(mode=0o700)
    fd = os.open(str(d), os.O_PATH | os.O_DIRECTORY)
    now = time.time_ns()
    try:
        for i in range(11):
            (d / f"p-{i:02d}").write_bytes(b"")
            os.utime(d / f"p-{i:02d}", ns=(now - (20 - i) * 10**9,) * 2)
        for name in ("t-x", "r-1-x", "a-x", "j-log", "reserve"):
            (d / name).write_bytes(b"")
            os.utime(d / name, ns=(0, 0))  # older than every limit: still never pruned
        planstore.write_entry(fd, "p-new", {"v": plancache.ENTRY_VERSION, "plan": {}})
        assert planprune.prune(fd) == 6
        names = sorted(n for n in os.listdir(d) if n.startswith("p-"))
        assert len(names) == 6 and "p-new" in names and "p-00" not in names and "p-10" in names
        assert {"t-x", "r-1-x", "a-x", "j-log", "reserve"} <= set(os.listdir(d))
    finally:
        os.close(fd)


def test_prune_by_age_and_size(tmp_path, monkeypatch):
    monkeypatch.setattr(planprune, "MAX_BYTES", 1000)
    monkeypatch.setattr(planprune, "KEEP_BYTES", 500)
    d = tmp_path / "plans"
    d.mkdir(mode=0o700)
    fd = os.open(str(d), os.O_PATH | os.O_DIRECTORY)
    now = time.time_ns()
    try:
        for i, (name, size, age) in enumerate([("p-old", 10, 15 * 86400), ("f-a", 400, 30), ("p-b", 400, 20),
                                               ("p-c", 400, 10), (".tmp-dead", 1, 7200), (".tmp-live", 1, 5)]):
            (d / name).write_bytes(b"x" * size)
            os.utime(d / name, ns=(now - age * 10**9,) * 2)
        planprune.prune(fd, now)
        assert sorted(os.listdir(d)) == [".tmp-live", "p-c"]
    finally:
        os.close(fd)


def test_policy_ref_matches_compiler_discovery(tmp_path):
    from sbxc.compiler.api import discover

    (tmp_path / "a" / "b").mkdir(parents=True)
    assert plancache.policy_ref(None, str(tmp_path / "a" / "b")) == discover(str(tmp_path / "a" / "b"))[0]
    (tmp_path / "a" / "sandbox.policy.yaml").write_text("sbxc: 1\n")
    got = plancache.policy_ref(None, str(tmp_path / "a" / "b"))
    assert got == discover(str(tmp_path / "a" / "b"))[0] == str(tmp_path / "a" / "sandbox.policy.yaml")
    assert plancache.policy_ref("x.yaml", "/p") == "/p/x.yaml"
    assert plancache.policy_ref("builtin:default", "/p") == "builtin:default"


def test_candidates_and_policy_state(tmp_path):
    from sbxc.runtime import plancache

    assert discovery.candidates("/a/b") == ["/a/b/sandbox.policy.yaml", "/a/sandbox.policy.yaml", "/sandbox.policy.yaml"]
    assert discovery.candidates("/a/b", "/a/sandbox.policy.yaml") == ["/a/b/sandbox.policy.yaml"]
    assert discovery.candidates("/") == ["/sandbox.policy.yaml"]
    f = tmp_path / "p.yaml"
    assert planstore.policy_state(str(f)) == ""
    f.write_text("x")
    assert len(planstore.policy_state(str(f))) == 64
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # planted under the policy's name: must not hang, and is no policy
    assert planstore.policy_state(str(fifo)) == ""
    assert planstore.policy_state(str(tmp_path)) == ""


def test_prune_reaps_stale_bundles_left_in_the_plans_folder(tmp_path):
    """A killed OCI run of before the ``runs`` folder left its bundle in the plans folder
    itself: a miss's pruning reaps it (unlocked and stale), with what it holds. Controls:
    a young one (a run may have just made it) and a locked one stay, and so do records."""
    import fcntl

    from sbxc.layout import RUN_DIR_PREFIX
    from sbxc.runtime import rundirs

    d = tmp_path / "plans"
    d.mkdir(mode=0o700)
    old = time.time() - 2 * rundirs.STALE_AFTER
    stale, young, held = (d / (RUN_DIR_PREFIX + c * 16) for c in "abc")
    for run in (stale, young, held):
        run.mkdir(mode=0o700)
        (run / "pid").write_text("1\n")
        os.mkfifo(run / "config.json", 0o600)
    for run in (stale, held):
        os.utime(run, (old, old))
    (d / "t-x").write_bytes(b"")
    (d / "p-young").write_bytes(b"x")
    lock = os.open(str(held), os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd = os.open(str(d), os.O_PATH | os.O_DIRECTORY)
    try:
        assert planprune.prune(fd) == 1
        assert not stale.exists()
        assert young.exists() and held.exists() and (d / "t-x").exists() and (d / "p-young").exists()
    finally:
        os.close(fd)
        os.close(lock)
