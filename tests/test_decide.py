"""The decision model on plans the compiler builds: the deepest rule decides, on tricky paths."""
from __future__ import annotations

import os
import random

import pytest

from compiler_fakes import FakePaths, fake_environ, fake_host
from sbxc.compiler.decide import decide, normalize_query

# A virtual tree (no disk): /a with siblings b and bc, a link to bc, a nested chain.
TREE = {
    "/a": ("dir", 1000, 0o755),
    "/a/b": ("dir", 1000, 0o755),
    "/a/bc": ("dir", 1000, 0o755),
    "/a/b/c": ("dir", 1000, 0o755),
    "/a/b/c/d": ("dir", 1000, 0o755),
    "/a/link": ("symlink:/a/bc", 1000, 0o777),
    "/a/rel": ("symlink:b/c", 1000, 0o777),
    "/a/loop": ("symlink:/a/loop", 1000, 0o777),
}


def plan_of(tmp_path, rules, extra=""):
    from sbxc.compiler.api import compile_policy

    body = "sbxc: 1\ncache: {tools: []}\nfilesystem:\n" + "".join(f"  - {r}\n" for r in rules) + extra
    p = tmp_path / "sandbox.policy.yaml"
    p.write_text(body)
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    paths = FakePaths(str(tmp_path), TREE)
    r = compile_policy(None, cwd=str(tmp_path), environ=fake_environ(home), host=fake_host(home=home),
                       overrides={}, paths=paths)
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    return r.plan, r, paths


def test_siblings_sharing_a_prefix(tmp_path):
    plan, _, _ = plan_of(tmp_path, ["read /", "write /a/b"])
    assert decide(plan, "/a/b/x").access == "write"
    assert decide(plan, "/a/bc/x").access == "read"
    assert decide(plan, "/a/bc").access == "read"
    assert decide(plan, "/a/b").access == "write"


def test_dotdot_trailing_slashes_and_double_slashes(tmp_path):
    plan, _, _ = plan_of(tmp_path, ["read /", "write /a/b"])
    assert decide(plan, "/a/b/../bc/x").access == "read"
    assert decide(plan, "/a/bc/../b/x").access == "write"
    assert decide(plan, "/a/b/").access == "write"
    assert decide(plan, "//a//b///c").access == "write"
    assert decide(plan, "/a/b/c/../..").access == "read"
    assert normalize_query("/a/b/./c/") == "/a/b/c"


def test_rule_paths_are_normalized_too(tmp_path):
    plan, r, _ = plan_of(tmp_path, ["read /", "write /a/b/", "mask /a/b/./c/../c"])
    assert [(x.path, x.access) for x in plan.fs if x.path.startswith("/a")] == [("/a/b", "write"), ("/a/b/c", "mask")]


def test_masks_under_writes_under_reads(tmp_path):
    plan, _, _ = plan_of(tmp_path, ["read /", "write /a/b", "mask /a/b/c", "read /a/b/c/d"])
    assert decide(plan, "/a/x").access == "read"
    assert decide(plan, "/a/b/x").access == "write"
    assert decide(plan, "/a/b/c").access == "mask"
    assert decide(plan, "/a/b/c/e").access == "mask"
    assert decide(plan, "/a/b/c/d/f").access == "read"
    assert decide(plan, "/a/b/c/d/f").rule.span.line == 7
    assert decide(plan, "/elsewhere").access == "read"


def test_nothing_covers_means_none(tmp_path):
    plan, _, _ = plan_of(tmp_path, ["read /a"])
    d = decide(plan, "/etc/passwd")
    assert d.access == "none" and d.rule is None and not d.allows("read")


def test_symlinks_resolve_through_the_resolver(tmp_path):
    plan, _, paths = plan_of(tmp_path, ["read /", "write /a/bc", "mask /a/b/c"])
    assert decide(plan, "/a/link/x", paths.realpath).access == "write"
    assert decide(plan, "/a/rel/x", paths.realpath).access == "mask"
    assert decide(plan, "/a/link/x").access == "read"  # lexically it is not under /a/bc


def test_rules_through_symlinks_become_their_targets(tmp_path):
    plan, _, _ = plan_of(tmp_path, ["read /", "mask /a/link", "read /a/rel"])
    rules = {x.path: x.access for x in plan.fs}
    assert rules["/a/bc"] == "mask" and rules["/a/b/c"] == "read"
    assert "/a/link" not in rules


def test_a_symlink_loop_is_an_error_not_a_hang(tmp_path):
    from sbxc.compiler.api import compile_policy

    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\nfilesystem:\n  - read /a/loop/x\n")
    r = compile_policy(None, cwd=str(tmp_path), environ=fake_environ(str(tmp_path)), host=fake_host(home=str(tmp_path)),
                       overrides={}, paths=FakePaths(str(tmp_path), TREE))
    assert r.plan is None and [d.code for d in r.diagnostics] == ["SBX034"]


@pytest.mark.parametrize("pair, winner", [
    (("write /a/b", "read /a/b"), "read"),
    (("read /a/b", "mask /a/b"), "mask"),
    (("tmpfs /a/b", "read /a/b"), "tmpfs"),
    (("mask /a/b", "tmpfs /a/b"), "mask"),
    (("write /a/b", "tmpfs /a/b"), "tmpfs"),
])
def test_same_path_stricter_wins_in_either_order(tmp_path, pair, winner):
    for rules in (pair, pair[::-1]):
        plan, r, _ = plan_of(tmp_path, ["read /", *rules])
        assert next(x.access for x in plan.fs if x.path == "/a/b") == winner
        assert [d.code for d in r.diagnostics] == ["SBX041"]
        assert len(r.diagnostics[0].related) == 1


def test_rule_order_does_not_change_the_plan(tmp_path):
    rules = ["read /", "write /a/b", "mask /a/b/c", "read /a/b/c/d", "tmpfs /a/bc", "read /a"]
    base, _, _ = plan_of(tmp_path, rules)
    shape = [(x.path, x.access, x.kind) for x in base.fs]
    rng = random.Random(7)
    for _ in range(10):
        shuffled = rules[:]
        rng.shuffle(shuffled)
        plan, _, _ = plan_of(tmp_path, shuffled)
        assert [(x.path, x.access, x.kind) for x in plan.fs] == shape
    # parents before children
    depths = [x.path.count("/") if x.path != "/" else 0 for x in base.fs]
    assert depths == sorted(depths)


def test_home_setting_is_an_implied_rule(tmp_path):
    for mode, access in (("read-only", "read"), ("hidden", "mask"), ("writable", "write")):
        plan, _, _ = plan_of(tmp_path, ["read /"], extra=f"home: {mode}\n")
        d = decide(plan, plan.home + "/x")
        assert d.access == access and d.rule.origin == "home"


def _scan(plan, q):
    """The definition, written as a scan: the deepest rule whose path contains q."""
    from sbxc.compiler.plan import is_within, path_depth

    best = None
    for rule in plan.fs:
        if is_within(q, rule.path) and (best is None or path_depth(rule.path) > path_depth(best.path)):
            best = rule
    return best


from hypothesis import given, settings, strategies as st  # noqa: E402

_SEG = st.sampled_from(["a", "b", "bc", "b.c", "c", "..", "."])
_PATH = st.lists(_SEG, min_size=0, max_size=5).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_PATH, st.sampled_from(["read", "write", "tmpfs", "mask"])), max_size=12),
       st.lists(_PATH, min_size=1, max_size=10))
def test_decide_agrees_with_the_scan(rules, queries):
    from sbxc.compiler.plan import (BUILTIN_SPAN, CachePlan, EnvPlan, LandlockPlan, Network, PathRule, Plan,
                                    SyscallPlan, fs_sort_key)

    fs, seen = [], set()
    for path, access in rules:
        p = normalize_query(path)
        if p not in seen:
            seen.add(p)
            fs.append(PathRule(p, access, "dir", BUILTIN_SPAN))
    plan = Plan(project="/a", home="/h", home_mode="read-only", uid=1, backend="auto",
                fs=tuple(sorted(fs, key=fs_sort_key)), skipped=(), network=Network("on"), env=EnvPlan((), ()),
                cache=CachePlan(False, "", "", (), ()), syscalls=SyscallPlan(()), landlock=LandlockPlan())
    for q in queries:
        got = decide(plan, q)
        want = _scan(plan, normalize_query(q))
        assert got.rule is want
        assert got.access == (want.access if want else "none")
