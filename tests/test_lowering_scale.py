"""Lowering grows about linearly with the number of rules (Landlock and sandbox-exec).

Nothing here is timed: the work a lowering does is measured as the number of Python line
events it executes (``sys.settrace``), which is the same on every run and every machine.
Four times the rules must cost well under the sixteen times a scan of every rule for
every rule costs; those scans made 10,000 rules take 12 s (Landlock) and 29 s (SBPL).

The index that replaced the scans answers "which rules lie strictly beneath this path",
so it is also checked against ``is_within`` on names that sort right next to ``/``.
"""
from __future__ import annotations

import random
import sys

import pytest

from sbxc.backends import landlock, sbpl
from sbxc.compiler.plan import (
    CachePlan, EnvPlan, LandlockPlan, Network, PathRule, Plan, Span, SyscallPlan, fs_sort_key, is_within,
)
from sbxc.hostfacts import HostFacts

PROJ = "/home/u/proj"
SMALL, LARGE = 300, 1200
# Linear is 4x, n log n a little more; a rule-by-rule scan of all rules is ~16x.
MAX_GROWTH = 6.0


def _rule(path: str, access: str, kind: str = "dir", line: int = 1) -> PathRule:
    return PathRule(path, access, kind, Span("sandbox.policy.yaml", line, 3), path)


def generated_plan(n: int, backend: str) -> Plan:
    """The bench's shape (bench/compile.py): ``read /``, a writable project, and ``n`` rules
    three folders deep in it cycling read, write, mask, plus a masked file in each."""
    rules = [_rule("/", "read"), _rule("/home/u", "read"), _rule(PROJ, "write"), _rule(PROJ + "/.env", "mask", "file")]
    for i in range(n):
        path = f"{PROJ}/a{i % 10}/b{i % 100}/c{i}"
        rules.append(_rule(path, ("read", "write", "mask")[i % 3], line=i + 2))
        if i % 3 != 2:
            rules.append(_rule(path + "/secret", "mask", "file", line=i + 2))
    return Plan(project=PROJ, home="/home/u", home_mode="read-only", uid=1000, backend=backend,
                fs=tuple(sorted(rules, key=fs_sort_key)), skipped=(), network=Network("on"),
                env=EnvPlan((), ()), cache=CachePlan(False, "", "", (), ()),
                syscalls=SyscallPlan(("ptrace",)), landlock=LandlockPlan())


def _listings(plan: Plan, dirs) -> tuple:
    """Each asked-for folder holds the names of the rules beneath it and one plain file."""
    out = []
    for d in dirs:
        prefix = "/" if d == "/" else d + "/"
        names = {r.path[len(prefix):].split("/")[0] for r in plan.fs if r.path.startswith(prefix) and r.path != d}
        out.append((d, tuple(sorted((name, "dir") for name in names)) + (("zz.txt", "file"),)))
    return tuple(out)


def line_events(fn) -> int:
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += 1
        return local

    def on_call(frame, event, arg):
        nonlocal count
        count += 1
        return local

    before = sys.gettrace()
    sys.settrace(on_call)
    try:
        fn()
    finally:
        sys.settrace(before)
    return count


def _landlock_work(n: int) -> int:
    plan = generated_plan(n, "landlock")
    host = HostFacts(landlock_abi=7, listings=_listings(plan, landlock.listing_dirs(plan)))
    return line_events(lambda: (landlock.listing_dirs(plan), landlock.lower(plan, host)))


def _sbpl_work(n: int) -> int:
    plan = generated_plan(n, "sandbox-exec")
    host = HostFacts(platform="darwin", arch="arm64", uid=1000, gid=20, home="/home/u")
    return line_events(lambda: sbpl.lower(plan, host))


@pytest.mark.parametrize("work", [_landlock_work, _sbpl_work], ids=["landlock", "sandbox-exec"])
def test_lowering_work_grows_about_linearly(work):
    small, large = work(SMALL), work(LARGE)
    assert large / small <= MAX_GROWTH, (
        f"{LARGE} rules cost {large / small:.1f}x the line events of {SMALL} "
        f"({small} -> {large}); a scan of all rules per rule is back")


def test_generated_plan_exercises_the_indexed_paths():
    """The measured plans reach every place the index replaced a scan: folders to list and
    split (Landlock), writable folders above a mask and masks over granted paths (SBPL)."""
    plan = generated_plan(30, "landlock")
    dirs = landlock.listing_dirs(plan)
    assert PROJ in dirs and f"{PROJ}/a0/b0/c0" in dirs
    low = landlock.lower(plan, HostFacts(landlock_abi=7, listings=_listings(plan, dirs)))
    assert any("itself lacks" in v.why for v in low.verdicts)

    plan = generated_plan(30, "sandbox-exec")
    low = sbpl.lower(plan, HostFacts(platform="darwin", arch="arm64", uid=1000, gid=20, home="/home/u"))
    whys = [v.why for v in low.verdicts]
    assert any("writable folders above it" in w for w in whys)
    assert low.data["protect"] and PROJ in low.data["protect"]


# Names that sort just before and after "/" ("-", ".", "0"), a space, non-BMP and a lone
# surrogate (a non-UTF-8 name): a prefix search that treats "/" as the lowest character,
# or forgets that "/a" is not within "/a-b", gives a different answer here.
_NAMES = ["a", "a-b", "a.b", "a0", "a b", "ab", "b", "\U0001F600", "\udcff", "é", ".", "~"]


def _random_paths(rng: random.Random, n: int) -> list[str]:
    out = {"/"}
    for _ in range(n):
        depth = rng.randint(1, 4)
        out.add("/" + "/".join(rng.choice(_NAMES) for _ in range(depth)))
    return sorted(out)


@pytest.mark.parametrize("seed", range(20))
def test_rules_below_match_is_within(seed):
    rng = random.Random(seed)
    paths = _random_paths(rng, 60)
    rules = [_rule(p, rng.choice(["read", "write", "mask"])) for p in paths]
    rng.shuffle(rules)
    below = landlock._RulesBelow(rules)
    for q in paths + _random_paths(rng, 20):
        expect = sorted(r.path for r in rules if r.path != q and is_within(r.path, q))
        assert [r.path for r in below(q)] == expect, q
        assert sbpl._paths_below(sorted(paths), q) == [p for p in sorted(paths) if p != q and is_within(p, q)], q
