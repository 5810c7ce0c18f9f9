"""The bwrap backend's lowering: option order, mask forms, self-binds, verdicts. Pure: the
plans are built by hand and the host is fake, so these run anywhere."""
from __future__ import annotations

import pytest

from sbxc.backends import bwrap
from sbxc.compiler.plan import (
    BUILTIN_SPAN, CachePlan, EnvPlan, LandlockPlan, NetRule, Network, PathRule, Plan, Span,
    SyscallPlan, fs_sort_key, is_within,
)
from sbxc.hostfacts import HostFacts

S = Span("p.yaml", 1, 1)


def rule(path, access, kind="dir", origin="filesystem"):
    return PathRule(path, access, kind, S, written=path, origin=origin)


def plan(rules, net="on", netrules=(), cache=None, uid=1000):
    return Plan(
        project="/home/u/p", home="/home/u", home_mode="read-only", uid=uid, backend="bwrap",
        fs=tuple(sorted(rules, key=fs_sort_key)), skipped=(), network=Network(net, tuple(netrules), S),
        env=EnvPlan(("PATH",), ()),
        cache=cache or CachePlan(False, "/var/tmp/sbxc-1000", "/var/tmp/sbxc-1000/p-x", (), ()),
        syscalls=SyscallPlan(()), landlock=LandlockPlan(),
    )


def host(uid=1000, version="0.8.0"):
    return HostFacts(uid=uid, gid=uid, home="/home/u", bwrap="/usr/bin/bwrap", bwrap_version=version,
                     userns=True, seccomp=True, landlock_abi=7)


def ops(argv):
    """(option, args...) tuples for the mount-ish options, in order."""
    arity = {"--ro-bind": 2, "--bind": 2, "--tmpfs": 1, "--remount-ro": 1, "--ro-bind-data": 2,
             "--proc": 1, "--dev": 1}
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in arity:
            out.append((a,) + tuple(argv[i + 1:i + 1 + arity[a]]))
            i += 1 + arity[a]
        else:
            i += 1
    return out


BASIC = [
    rule("/", "read"),
    rule("/home/u", "read"),
    rule("/home/u/p", "write"),
    rule("/home/u/p/.git/hooks", "read"),
    rule("/home/u/.ssh", "mask"),
    rule("/home/u/.netrc", "mask", "file"),
    rule("/run/docker.sock", "mask", "socket"),
    rule("/tmp", "tmpfs"),
]


def test_always_options_and_order():
    low = bwrap.lower(plan(BASIC), host())
    argv = low.data["argv"]
    for opt in ("--new-session", "--die-with-parent", "--unshare-user", "--unshare-pid", "--unshare-ipc",
                "--disable-userns"):
        assert opt in argv
    assert "--unshare-net" not in argv
    assert "--cap-drop" not in argv  # only as root
    assert "--" not in argv and "--clearenv" not in argv and "--setenv" not in argv
    o = ops(argv)
    # parents before children: every mount comes after the mounts of its ancestors
    dests = [x[-1] for x in o if x[0] != "--remount-ro"]
    for i, d in enumerate(dests):
        for later in dests[i + 1:]:
            assert not (is_within(d, later) and d != later), (d, later)
    assert o[0] == ("--ro-bind", "/", "/")
    assert ("--proc", "/proc") in o and ("--dev", "/dev") in o


def test_mask_forms():
    o = ops(bwrap.lower(plan(BASIC), host()).data["argv"])
    assert ("--tmpfs", "/home/u/.ssh") in o
    # the read-only remount of a masked folder comes after every other mount
    assert o[-1] == ("--remount-ro", "/home/u/.ssh")
    # a masked file or socket is an empty regular file, never /dev/null (writable device)
    assert ("--ro-bind-data", bwrap.EMPTY_FD, "/home/u/.netrc") in o
    assert ("--ro-bind-data", bwrap.EMPTY_FD, "/run/docker.sock") in o
    assert not any("/dev/null" in x for x in o)


def test_read_under_write_self_binds_the_folders_between():
    o = ops(bwrap.lower(plan(BASIC), host()).data["argv"])
    i_git = o.index(("--bind", "/home/u/p/.git", "/home/u/p/.git"))
    i_hooks = o.index(("--ro-bind", "/home/u/p/.git/hooks", "/home/u/p/.git/hooks"))
    assert o.index(("--bind", "/home/u/p", "/home/u/p")) < i_git < i_hooks


def test_host_points_are_the_mounts_under_a_write_rule():
    """What bwrap would make on the host through a writable bind, were it missing: the
    runner looks at these before it starts (runtime.staleness.points_hold). Not a mount
    on bwrap's own root or under a read rule, not a missing mask (nothing is mounted), not
    the cache folder (the runtime makes it first)."""
    rules = BASIC + [rule("/home/u/p/.env", "mask", "file"), rule("/home/u/p/gone", "mask", "missing"),
                     rule("/home/u/p/.cache/sbxc", "write", origin="cache")]
    low = bwrap.lower(plan(rules), host()).data
    assert low["host_points"] == ["/home/u/p/.env", "/home/u/p/.git/hooks"]
    assert "host_points" not in bwrap.lower(plan(BASIC[:3]), host()).data


def test_network_off_and_rules_narrow():
    low = bwrap.lower(plan(BASIC, net="off"), host())
    assert "--unshare-net" in low.data["argv"]
    r = NetRule("connect", "tcp", 443, 443, S)
    low = bwrap.lower(plan(BASIC, net="rules", netrules=[r]), host())
    assert "--unshare-net" in low.data["argv"]
    v = [x for x in low.verdicts if x.subject == "connect tcp 443"]
    assert v and v[0].status == "narrowed"


def test_root_drops_caps():
    argv = bwrap.lower(plan(BASIC, uid=0), host(uid=0)).data["argv"]
    i = argv.index("--cap-drop")
    assert argv[i + 1] == "ALL"


def test_old_bwrap_without_disable_userns():
    assert "--disable-userns" not in bwrap.lower(plan(BASIC), host(version="0.7.0")).data["argv"]


def test_missing_mask_verdicts():
    rules = [rule("/", "read"), rule("/home/u/p", "write"),
             rule("/home/u/p/secret", "mask", "missing"), rule("/etc/nothing", "mask", "missing")]
    low = bwrap.lower(plan(rules), host())
    by = {v.subject: v for v in low.verdicts}
    assert by["mask /home/u/p/secret"].status == "partial"
    assert by["mask /etc/nothing"].status == "enforced"
    assert not any("/home/u/p/secret" in a or "/etc/nothing" in a for a in low.data["argv"])


def test_cache_rules_mounted_even_when_missing_at_compile():
    cache = CachePlan(True, "/var/tmp/sbxc-1000", "/var/tmp/sbxc-1000/p-x", ("pip",), (("PIP_CACHE_DIR", "/var/tmp/sbxc-1000/p-x/pip"),))
    rules = [rule("/", "read"), rule("/var/tmp/sbxc-1000", "mask", "missing", "cache"),
             rule("/var/tmp/sbxc-1000/p-x", "write", "missing", "cache")]
    o = ops(bwrap.lower(plan(rules, cache=cache), host()).data["argv"])
    assert o.index(("--tmpfs", "/var/tmp/sbxc-1000")) < o.index(("--bind", "/var/tmp/sbxc-1000/p-x", "/var/tmp/sbxc-1000/p-x"))
    assert o[-1] == ("--remount-ro", "/var/tmp/sbxc-1000")


def test_every_rule_has_a_verdict_and_seccomp_is_there():
    low = bwrap.lower(plan(BASIC), host())
    subjects = {v.subject for v in low.verdicts}
    for r in BASIC:
        assert f"{r.access} {r.path}" in subjects
    assert low.data["seccomp"] and len(bytes.fromhex(low.data["seccomp"])) % 8 == 0


def test_rules_under_proc_and_dev():
    rules = [rule("/", "read"), rule("/dev/kvm", "read", "other"), rule("/proc/kcore", "mask", "file")]
    low = bwrap.lower(plan(rules), host())
    by = {v.subject: v.status for v in low.verdicts}
    assert by["read /dev/kvm"] == "narrowed" and by["mask /proc/kcore"] == "enforced"
    assert "/dev/kvm" not in low.data["argv"]


def test_deterministic():
    a = bwrap.lower(plan(BASIC), host())
    b = bwrap.lower(plan(list(reversed(BASIC))), host())
    assert a.data == b.data


def test_no_root_rule_makes_root_read_only():
    rules = [rule("/usr", "read"), rule("/home/u/p", "write")]
    argv = bwrap.lower(plan(rules), host()).data["argv"]
    assert argv[-2:] == ["--remount-ro", "/"]
    assert bwrap.lower(plan(BASIC), host()).data["argv"][-2:] != ["--remount-ro", "/"]


def test_mask_under_tmpfs_is_mounted_in_the_tmpfs():
    rules = [rule("/", "read"), rule("/tmp", "tmpfs"), rule("/tmp/home", "mask"), rule("/tmp/home/p", "write"),
             rule("/tmp/gone", "mask", "missing")]
    low = bwrap.lower(plan(rules), host())
    o = ops(low.data["argv"])
    assert o.index(("--tmpfs", "/tmp/home")) < o.index(("--bind", "/tmp/home/p", "/tmp/home/p"))
    assert ("--remount-ro", "/tmp/home") in o
    by = {v.subject: v.status for v in low.verdicts}
    assert by["mask /tmp/home"] == "enforced" and by["mask /tmp/gone"] == "partial"


@pytest.mark.parametrize("abi, status", [(6, "enforced"), (5, "partial"), (0, "partial")])
def test_abstract_socket_verdict_follows_landlock_abi(abi, status):
    import dataclasses

    low = bwrap.lower(plan([rule("/", "read")], net="on"), dataclasses.replace(host(), landlock_abi=abi))
    got = [v for v in low.verdicts if v.subject == "abstract unix sockets"]
    assert [v.status for v in got] == [status]
    off = bwrap.lower(plan([rule("/", "read")], net="off"), dataclasses.replace(host(), landlock_abi=abi))
    assert not [v for v in off.verdicts if v.subject == "abstract unix sockets"]


def test_masks_over_the_sandboxes_own_proc_and_dev_are_mounted():
    """A mask of a kernel file in the sandbox's own /proc, or of an entry of bwrap's own
    /dev, is mounted over it; a /dev entry bwrap's /dev lacks, and a per-device sysctl of
    the host's network when the sandbox has a network of its own, need nothing (bwrap
    could not make their mount points). With the host's network shared, the device's
    sysctls are there: mounted."""
    rules = [rule("/", "read"), rule("/proc/cpuinfo", "mask", "file"), rule("/dev/shm", "mask"),
             rule("/dev/mqueue", "mask", "missing"), rule("/proc/sys/net/ipv4/conf/eth0", "mask"),
             rule("/proc/sys/net/ipv4/conf/lo", "mask")]
    for net in ("off", "on"):
        low = bwrap.lower(plan(rules, net=net), host())
        got = ops(low.data["argv"])
        assert ("--ro-bind-data", bwrap.EMPTY_FD, "/proc/cpuinfo") in got
        assert ("--tmpfs", "/dev/shm") in got and ("--remount-ro", "/dev/shm") in got
        assert ("--tmpfs", "/proc/sys/net/ipv4/conf/lo") in got
        assert not [o for o in got if "/dev/mqueue" in o]
        assert (("--tmpfs", "/proc/sys/net/ipv4/conf/eth0") in got) == (net == "on"), got
        assert {v.subject: v.status for v in low.verdicts}["mask /proc/sys/net/ipv4/conf/eth0"] == "enforced"
