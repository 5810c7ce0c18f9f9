"""The IR's invariants and the decision model on hand-built plans (no frontend involved)."""
import dataclasses

import pytest

from sbxc.compiler.decide import decide, normalize_query
from sbxc.compiler.plan import (
    BUILTIN_SPAN, CachePlan, EnvPlan, LandlockPlan, Network, PathRule, Plan, SyscallPlan,
    fs_sort_key, is_within, stricter,
)


def rule(path, access, kind="dir"):
    return PathRule(path=path, access=access, kind=kind, span=BUILTIN_SPAN, written=path)


def plan_of(*rules):
    return Plan(
        project="/p", home="/h", home_mode="read-only", uid=1000, backend="auto",
        fs=tuple(sorted(rules, key=fs_sort_key)), skipped=(),
        network=Network("on"), env=EnvPlan((), ()),
        cache=CachePlan(False, "/var/tmp/x", "/var/tmp/x/p", (), ()),
        syscalls=SyscallPlan(()), landlock=LandlockPlan(),
    )


def test_plan_is_frozen():
    p = plan_of(rule("/", "read"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.project = "/elsewhere"


@pytest.mark.parametrize("path,parent,expected", [
    ("/a/b", "/a", True), ("/a", "/a", True), ("/ab", "/a", False),
    ("/a/bc", "/a/b", False), ("/x", "/", True), ("/", "/", True),
])
def test_is_within(path, parent, expected):
    assert is_within(path, parent) is expected


def test_stricter_order():
    assert stricter("write", "read") == "read"
    assert stricter("read", "mask") == "mask"
    assert stricter("tmpfs", "read") == "tmpfs"
    assert stricter("mask", "tmpfs") == "mask"


def test_deepest_rule_decides():
    p = plan_of(rule("/", "read"), rule("/p", "write"), rule("/p/.git/hooks", "read"),
                rule("/h", "read"), rule("/h/.ssh", "mask"))
    assert decide(p, "/etc/passwd").access == "read"
    assert decide(p, "/p/src/x.c").access == "write"
    assert decide(p, "/p/.git/hooks/pre-commit").access == "read"
    assert decide(p, "/p/.git/config").access == "write"
    assert decide(p, "/h/.ssh/id_rsa").access == "mask"
    assert decide(p, "/h/.sshx").access == "read"
    assert decide(p, "/p/.git/hooks/../config").access == "write"
    assert decide(p, "/p//src/").access == "write"


def test_uncovered_path_is_not_there():
    p = plan_of(rule("/usr", "read"))
    d = decide(p, "/etc/shadow")
    assert d.access == "none" and d.rule is None and not d.allows("read")


def test_resolver_is_applied_before_deciding():
    p = plan_of(rule("/", "read"), rule("/h/.ssh", "mask"))
    links = {"/tmp/link/id_rsa": "/h/.ssh/id_rsa"}
    assert decide(p, "/tmp/link/id_rsa").access == "read"
    assert decide(p, "/tmp/link/id_rsa", resolve=lambda q: links.get(q, q)).access == "mask"


def test_relative_query_is_refused():
    with pytest.raises(ValueError):
        normalize_query("etc/passwd")


@pytest.mark.parametrize("path", ["/", "/a", "/a/b", "/a-b", "/z"])
def test_below_range_matches_a_plain_scan(path):
    from sbxc.compiler.plan import below_range

    paths = sorted(["/", "/a", "/a!", "/a-b", "/a-b/c", "/a.b", "/a/b", "/a/b/c", "/a/bc", "/a0", "/b", "/z/y"])
    lo, hi = below_range(paths, path)
    assert paths[lo:hi] == [p for p in paths if is_within(p, path) and p != path]
