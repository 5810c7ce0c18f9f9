"""The Landlock lowering, pure: plans and listings in, rules and verdicts out.

The central property: for every path, the rights the rules add up to (Landlock's union
along the path) never exceed what ``decide`` grants, checked over a synthetic tree."""
from __future__ import annotations

import pytest

from sbxc.backends import landlock
from sbxc.compiler.decide import decide
from sbxc.compiler.plan import (
    BUILTIN_SPAN, CachePlan, EnvPlan, LandlockPlan, NetRule, Network, NET_OFF, NET_ON, NET_RULES, Plan,
    PathRule, SyscallPlan, fs_sort_key, is_within,
)
from sbxc.hostfacts import HostFacts
from sbxc.runtime import landlock_sys as ll

# A host tree: folder -> entries (name, kind)
TREE = {
    "/": (("bin", "symlink"), ("etc", "dir"), ("home", "dir"), ("tmp", "dir"), ("usr", "dir")),
    "/home": (("u", "dir"),),
    "/home/u": ((".netrc", "file"), (".ssh", "dir"), ("docs", "dir"), ("proj", "dir")),
    "/home/u/proj": ((".git", "dir"), ("a.txt", "file"), ("sub", "dir")),
    "/home/u/proj/.git": (("config", "file"), ("hooks", "dir"), ("objects", "dir")),
}
FILES = {"/home/u/.netrc", "/home/u/proj/a.txt", "/home/u/proj/.git/config"}


def r(path, access, kind="dir", origin="filesystem"):
    return PathRule(path, access, kind, BUILTIN_SPAN, path, origin)


def plan(rules, network=Network(NET_ON), unix=False, min_abi=1, best_effort=False):
    return Plan(project="/home/u/proj", home="/home/u", home_mode="read-only", uid=1000, backend="landlock",
                fs=tuple(sorted(rules, key=fs_sort_key)), skipped=(), network=network, env=EnvPlan((), ()),
                cache=CachePlan(False, "", "", (), ()), syscalls=SyscallPlan(("ptrace",), unix),
                landlock=LandlockPlan(min_abi, best_effort))


def host(p, abi=7):
    listings = tuple((d, TREE.get(d, ())) for d in landlock.listing_dirs(p))
    return HostFacts(landlock_abi=abi, listings=listings)


def effective(data, path: str) -> int:
    """Landlock's answer: the union of the rights of every rule on ``path`` or above it."""
    got = 0
    for p, rights, _kind in data["fs_rules"]:
        if is_within(path, p):
            got |= rights
    return got


def all_paths():
    out = set(TREE)
    for d, entries in TREE.items():
        for name, _k in entries:
            out.add(d.rstrip("/") + "/" + name)
    out |= {"/home/u/.ssh/id_rsa", "/home/u/proj/.git/hooks/pre-commit", "/home/u/proj/sub/x", "/usr/bin/env"}
    return sorted(out)


DEFAULTISH = [r("/", "read"), r("/home/u/proj", "write"), r("/home/u/proj/.git/hooks", "read"),
              r("/home/u/.ssh", "mask"), r("/home/u/.netrc", "mask", "file"), r("/tmp", "tmpfs")]


def _policy_rights(p, path):
    d = decide(p, path)
    return landlock._RIGHTS[d.access]


@pytest.mark.parametrize("rules", [
    DEFAULTISH,
    [r("/", "write"), r("/home/u/.ssh", "mask")],
    [r("/home/u/proj", "write"), r("/home/u/proj/.git", "read"), r("/home/u/proj/.git/objects", "write")],
    [r("/", "read"), r("/home/u/proj/a.txt", "write", "file")],
])
def test_never_more_than_decide(rules):
    p = plan(rules)
    low = landlock.lower(p, host(p))
    for path in all_paths():
        if path.startswith("/dev/"):
            continue
        extra = effective(low.data, path) & ~_policy_rights(p, path)
        if path in FILES or path.endswith(("id_rsa", "pre-commit", "/x", "env")):
            extra &= landlock.FILE_RIGHTS  # folder rights mean nothing on a file
        assert not extra, (path, ll.fs_names(extra))


def test_mask_under_read_parent_grants_siblings():
    p = plan(DEFAULTISH)
    low = landlock.lower(p, host(p))
    rules = {path: rights for path, rights, _ in low.data["fs_rules"]}
    assert "/" not in rules or rules["/"] & ll.FS_READ_FILE == 0
    assert rules["/usr"] & ll.FS_READ_FILE and rules["/home/u/docs"] & ll.FS_READ_DIR
    assert "/home/u/.ssh" not in rules and "/home/u/.netrc" not in rules
    assert "/bin" not in rules  # a symlink gets no rule; its target's path decides
    # the netrc file mask still lets its folder be listed; the .ssh folder mask does not
    assert effective(low.data, "/home/u") & ll.FS_READ_DIR == 0


def test_hooks_under_project_costs_top_level_creation():
    p = plan(DEFAULTISH)
    low = landlock.lower(p, host(p))
    proj = effective(low.data, "/home/u/proj")
    assert not proj & ll.FS_MAKE_REG
    assert effective(low.data, "/home/u/proj/sub") & ll.FS_MAKE_REG
    assert effective(low.data, "/home/u/proj/a.txt") & ll.FS_WRITE_FILE
    v = [x for x in low.verdicts if x.subject == "write /home/u/proj"][0]
    assert v.status == "narrowed" and "make_reg" in v.why


def test_verdicts_every_rule_once():
    p = plan(DEFAULTISH)
    low = landlock.lower(p, host(p))
    subjects = [v.subject for v in low.verdicts]
    for rule in DEFAULTISH:
        assert subjects.count(f"{rule.access} {rule.path}") == 1
    by = {v.subject: v for v in low.verdicts}
    assert by["mask /home/u/.ssh"].status == "partial"
    assert by["tmpfs /tmp"].status == "narrowed"
    assert by["unix sockets"].status == "narrowed"
    assert low.data["tmpfs"] == ["/tmp"]


def test_missing_listing_grants_less_and_says_so():
    p = plan(DEFAULTISH)
    low = landlock.lower(p, HostFacts(landlock_abi=7))
    assert not [x for x in low.data["fs_rules"] if x[0].startswith("/usr")]
    assert any(v.subject == "landlock listings" and v.status == "narrowed" for v in low.verdicts)


def test_missing_mask_under_read_only_dropped_and_rechecked():
    p = plan([r("/", "read"), r("/home/u/.aws", "mask", "missing")])
    low = landlock.lower(p, host(p))
    assert low.data["absent"] == ["/home/u/.aws"]
    assert effective(low.data, "/home/u") & ll.FS_READ_DIR


def test_cache_root_mask_kept():
    p = plan([r("/", "read"), r("/var/tmp/sbxc-1000", "mask", "missing", "cache"),
              r("/var/tmp/sbxc-1000/abc", "write", "missing", "cache")])
    low = landlock.lower(p, host(p))
    assert low.data["absent"] == []
    assert effective(low.data, "/var/tmp/sbxc-1000/other") == 0
    assert effective(low.data, "/var/tmp/sbxc-1000/abc") == landlock.WRITE_RIGHTS


def test_network_lowering():
    off = landlock.lower(plan([r("/", "read")], Network(NET_OFF)), HostFacts(landlock_abi=7))
    assert off.data["handled_net"] == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP and off.data["net_rules"] == []
    rules = Network(NET_RULES, (NetRule("connect", "tcp", 443, 443, BUILTIN_SPAN), NetRule("bind", "tcp", 8000, 8010, BUILTIN_SPAN)))
    on = landlock.lower(plan([r("/", "read")], rules), HostFacts(landlock_abi=7))
    assert on.data["net_rules"] == [[443, 443, ll.NET_CONNECT_TCP], [8000, 8010, ll.NET_BIND_TCP]]
    assert landlock.lower(plan([r("/", "read")]), HostFacts(landlock_abi=7)).data["handled_net"] == 0


def test_abi_verdicts():
    low = landlock.lower(plan([r("/", "read")], Network(NET_OFF)), HostFacts(landlock_abi=3))
    assert any(v.status == "not enforceable" and "ABI 3" in v.why for v in low.verdicts)
    low = landlock.lower(plan([r("/", "read")], Network(NET_OFF), best_effort=True), HostFacts(landlock_abi=3))
    v = [v for v in low.verdicts if v.subject == "landlock.best_effort"][0]
    assert v.status == "partial" and "connect_tcp" in v.why and "signal" in v.why
    low = landlock.lower(plan([r("/", "read")], min_abi=7), HostFacts(landlock_abi=6))
    assert any(v.subject == "landlock.min_abi" and v.status == "not enforceable" for v in low.verdicts)


def test_abi_table():
    assert ll.rights_for_abi(1)[0] == (1 << 13) - 1
    assert ll.rights_for_abi(2)[0] & ll.FS_REFER and not ll.rights_for_abi(2)[0] & ll.FS_TRUNCATE
    assert ll.rights_for_abi(4)[1] == 3 and ll.rights_for_abi(3)[1] == 0
    assert ll.rights_for_abi(5)[0] & ll.FS_IOCTL_DEV
    assert ll.rights_for_abi(6)[2] == 3 and ll.rights_for_abi(7)[3] == 7
    assert ll.rights_for_abi(9) == ll.rights_for_abi(7)


def test_deterministic():
    p = plan(DEFAULTISH)
    assert landlock.lower(p, host(p)).data == landlock.lower(p, host(p)).data


def test_runner_abi_check_strict_and_best_effort():
    from sbxc.runtime.errors import Refusal
    from sbxc.runtime.landlock_run import check_abi

    p = plan([r("/", "read")], Network(NET_OFF))
    data = landlock.lower(p, HostFacts(landlock_abi=7)).data
    warned = []
    fs, net, scoped, _ = check_abi(data, 7, warned.append)
    assert fs == landlock.ALL_FS and net == 3 and scoped == 3 and not warned
    with pytest.raises(Refusal) as e:
        check_abi(data, 3, warned.append)
    assert "ABI is 3" in e.value.cause and "needs 6" in e.value.cause
    be = dict(data, best_effort=True)
    fs, net, scoped, _ = check_abi(be, 3, warned.append)
    assert net == 0 and scoped == 0 and not fs & ll.FS_IOCTL_DEV
    assert warned and "connect_tcp" in warned[0] and "signal" in warned[0] and "ioctl_dev" in warned[0]
    with pytest.raises(Refusal) as e:
        check_abi(dict(be, min_abi=4), 3, warned.append)  # min_abi stays a floor
    assert "ABI is 3" in e.value.cause and "at least 4" in e.value.cause
    with pytest.raises(Refusal):
        check_abi(be, 0, warned.append)


def test_filter_failure_is_not_enforceable():
    p = plan([r("/", "read")])
    p2 = Plan(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "syscalls": SyscallPlan(("nosuchcall",))})
    low = landlock.lower(p2, HostFacts(landlock_abi=7))
    assert low.data["seccomp"] == ""
    assert any(v.subject == "syscalls" and v.status == "not enforceable" for v in low.verdicts)


def test_process_verdict_says_which_users_get_a_pid_namespace():
    """The runner unshares PID and IPC namespaces for uid 0 only; the report says so per host."""
    p = plan([r("/", "read")])
    root = {v.subject: v for v in landlock.lower(p, HostFacts(landlock_abi=7, uid=0)).verdicts}
    user = {v.subject: v for v in landlock.lower(p, HostFacts(landlock_abi=7, uid=1000)).verdicts}
    assert "PID namespace of its own" in root["processes"].why
    assert "no PID namespace" in user["processes"].why
    assert root["ipc"].status == "enforced" and user["ipc"].status == "narrowed"
