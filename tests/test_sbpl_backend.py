"""The sandbox-exec backend: profile shape, ordering, quoting, parameters, verdicts.

Plans are built from the IR directly, so these tests do not depend on the frontend.
"""
import json

import pytest

from sbxc.backends import lower as lower_any
from sbxc.backends.sbpl import MAX_PATH_BYTES, lower, sbpl_string, Unrepresentable
from sbxc.compiler.plan import (
    CachePlan, EnvPlan, LandlockPlan, NetRule, Network, PathRule, Plan, Span, SyscallPlan, fs_sort_key,
)
from support.sbpl_eval import Filter, load, runtime_params, tokenize
from sbxc.hostfacts import HostFacts

HOST = HostFacts(platform="darwin", arch="arm64", uid=501, gid=20, home="/Users/u")
HOME = "/Users/u"
PROJ = "/Users/u/proj"
CACHE_ROOT = "/private/var/tmp/sbxc-501"
CACHE_DIR = CACHE_ROOT + "/0123abcd"

_line = [0]


def rule(path, access, kind="dir", origin="filesystem"):
    _line[0] += 1
    return PathRule(path=path, access=access, kind=kind, span=Span("sandbox.policy.yaml", _line[0], 3),
                    written=path, origin=origin)


def make_plan(*rules, network=None, home_mode="read-only", cache=False, syscalls=()):
    fs = list(rules)
    if cache:
        fs.append(rule(CACHE_ROOT, "mask", origin="cache"))
        fs.append(rule(CACHE_DIR, "write", origin="cache"))
    return Plan(
        project=PROJ, home=HOME, home_mode=home_mode, uid=501, backend="sandbox-exec",
        fs=tuple(sorted(fs, key=fs_sort_key)), skipped=(),
        network=network or Network("on"), env=EnvPlan(("PATH",), ()),
        cache=CachePlan(cache, CACHE_ROOT, CACHE_DIR, ("pip",), (("PIP_CACHE_DIR", CACHE_DIR + "/pip"),)),
        syscalls=SyscallPlan(tuple(syscalls)), landlock=LandlockPlan(),
    )


def default_like(**kw):
    """What builtin:default gives on a Mac: read /, writable project, private /tmp,
    read-only home with credentials masked, the docker socket masked."""
    return make_plan(
        rule("/", "read"),
        rule(HOME, "read", origin="home"),
        rule(PROJ, "write"),
        rule(PROJ + "/.git/hooks", "read"),
        rule(PROJ + "/.env", "mask", kind="file"),
        rule(HOME + "/.ssh", "mask"),
        rule(HOME + "/.aws", "mask", kind="missing"),
        rule("/private/tmp", "tmpfs"),
        rule("/private/var/run/docker.sock", "mask", kind="socket"),
        cache=True, **kw)


def profile_of(plan):
    low = lower(plan, HOST)
    return low, load(low.data["profile"], runtime_params(low.data))


def test_profile_starts_with_version_and_deny_default():
    low = lower(default_like(), HOST)
    assert low.data["profile"].startswith("(version 1)\n(deny default)\n")


def test_registry_dispatches_to_this_backend_and_output_is_deterministic():
    a = lower_any("sandbox-exec", default_like(), HOST)
    b = lower_any("sandbox-exec", default_like(), HOST)
    assert a.backend == "sandbox-exec"
    assert json.dumps(a.data, sort_keys=True) == json.dumps(b.data, sort_keys=True)


def test_deeper_read_revokes_write_of_parent():
    _, prof = profile_of(default_like())
    assert prof.allows("file-write-data", PROJ + "/src/main.c")
    assert prof.allows("file-read-data", PROJ + "/.git/hooks/pre-commit")
    assert not prof.allows("file-write-data", PROJ + "/.git/hooks/pre-commit")
    assert not prof.allows("file-write-create", PROJ + "/.git/hooks/new")


def test_mask_denies_read_write_exec_and_socket_connect():
    _, prof = profile_of(default_like())
    for op in ("file-read-data", "file-read-metadata", "file-write-data", "file-write-create",
               "process-exec", "file-map-executable", "network-outbound"):
        assert not prof.allows(op, HOME + "/.ssh/id_ed25519"), op
    assert not prof.allows("network-outbound", "/private/var/run/docker.sock")
    assert not prof.allows("file-read-data", PROJ + "/.env")
    # the sibling with a common prefix is not caught by the mask
    assert prof.allows("file-read-data", HOME + "/.sshrc")


def test_mask_of_missing_path_under_writable_parent_blocks_creation():
    _, prof = profile_of(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(PROJ + "/secret", "mask", kind="missing")))
    assert not prof.allows("file-write-create", PROJ + "/secret")
    assert not prof.allows("file-write-create", PROJ + "/secret/x")


def test_rename_of_writable_folder_above_a_mask_is_denied():
    low, prof = profile_of(make_plan(rule("/", "read"), rule(PROJ, "write"),
                                     rule(PROJ + "/sub/deep/key.pem", "mask", kind="file")))
    assert low.data["protect"] == [PROJ, PROJ + "/sub", PROJ + "/sub/deep"]
    for folder in low.data["protect"]:
        assert not prof.allows("file-write-unlink", folder)
    # files beside it stay fully writable
    assert prof.allows("file-write-unlink", PROJ + "/sub/deep/other")
    v = {x.subject: x for x in low.verdicts}["mask " + PROJ + "/sub/deep/key.pem"]
    assert v.status == "partial" and "cannot be renamed" in v.why


def test_order_is_parents_first_even_when_plan_lists_children_first():
    # A plan is sorted by normalize; the backend must not depend on luck either way.
    plan = default_like()
    low = lower(plan, HOST)
    text = low.data["profile"]
    assert text.index('(subpath "/Users/u/proj")') < text.index('(subpath "/Users/u/proj/.git/hooks")')
    assert text.index('(subpath "/Users/u")') < text.index('(subpath "/Users/u/.ssh")')


def test_plan_order_is_not_trusted():
    import dataclasses

    plan = default_like()
    shuffled = dataclasses.replace(plan, fs=tuple(reversed(plan.fs)))
    assert lower(shuffled, HOST).data == lower(plan, HOST).data


def test_system_baseline_only_where_the_policy_is_silent():
    full = lower(default_like(), HOST)
    assert full.data["baseline"]["read"] == []
    assert "macOS start-up" not in {v.subject for v in full.verdicts}
    narrow = lower(make_plan(rule("/usr/bin", "read"), rule(PROJ, "write"), rule("/usr/lib/secret", "mask")), HOST)
    assert "/usr/lib" in narrow.data["baseline"]["read"]
    v = {x.subject: x for x in narrow.verdicts}["macOS start-up"]
    assert v.status == "partial" and "/usr/lib" in v.why
    prof = load(narrow.data["profile"], runtime_params(narrow.data))
    assert prof.allows("file-read-data", "/usr/lib/libSystem.B.dylib")
    assert not prof.allows("file-write-data", "/usr/lib/libSystem.B.dylib")
    assert not prof.allows("file-read-data", "/usr/lib/secret/x")  # the policy's mask still wins
    assert not prof.allows("file-read-data", "/etc/passwd")


def test_devices_are_granted_unless_masked():
    _, prof = profile_of(default_like())
    assert prof.allows("file-write-data", "/dev/null")
    assert not prof.allows("file-write-data", "/dev/disk0")
    _, masked = profile_of(make_plan(rule("/", "read"), rule("/dev/null", "mask", kind="other")))
    assert not masked.allows("file-read-data", "/dev/null")
    assert not masked.allows("file-write-data", "/dev/null")


def test_tmpfs_is_narrowed_to_a_per_run_folder():
    low, prof = profile_of(default_like())
    v = {x.subject: x for x in low.verdicts}["tmpfs /private/tmp"]
    assert v.status == "narrowed"
    assert not prof.allows("file-read-data", "/private/tmp/x")
    assert not prof.allows("file-write-create", "/private/tmp/x")
    names = {p["name"]: p for p in low.data["params"]}
    assert names["SBXC_RUN_TMP"]["source"] == "run-tmp"
    assert prof.allows("file-write-create", "/private/var/folders/zz/sbxc-run-test/a")


def test_cache_folder_is_a_runtime_parameter_and_its_root_stays_masked():
    low = lower(default_like(), HOST)
    names = {p["name"]: p for p in low.data["params"]}
    assert names["SBXC_CACHE_DIR"] == {"name": "SBXC_CACHE_DIR", "source": "cache", "default": CACHE_DIR}
    prof = load(low.data["profile"], runtime_params(low.data))
    assert prof.allows("file-write-create", CACHE_DIR + "/pip/x")
    assert not prof.allows("file-read-data", CACHE_ROOT + "/other-project/x")
    # relocated to a throwaway: the profile grants that folder instead
    moved = load(low.data["profile"], {**runtime_params(low.data), "SBXC_CACHE_DIR": "/private/var/tmp/sbxc-throwaway-1/0123abcd"})
    assert moved.allows("file-write-create", "/private/var/tmp/sbxc-throwaway-1/0123abcd/x")
    assert not moved.allows("file-write-create", CACHE_DIR + "/x")


def test_network_off_allows_no_ip_but_unix_sockets_follow_file_rules():
    low, prof = profile_of(default_like(network=Network("off")))
    assert not prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=443)
    assert not prof.allows("network-outbound", proto="tcp", host="localhost", port=8080)
    assert not prof.allows("network-bind", proto="tcp", host="*", port=8080)
    assert prof.allows("network-outbound", PROJ + "/.run/app.sock")
    assert not prof.allows("network-outbound", "/private/var/run/docker.sock")
    # name lookups would reach the network through mDNSResponder, even under `read /`
    assert not prof.allows("network-outbound", "/private/var/run/mDNSResponder")
    v = {v.subject: v for v in low.verdicts}["network: false"]
    assert v.status == "narrowed" and "loopback" in v.why


def test_network_on():
    _, prof = profile_of(default_like())
    assert prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=443)
    assert not prof.allows("network-outbound", "/private/var/run/docker.sock")


def test_network_rules_per_port():
    net = Network("rules", (NetRule("connect", "tcp", 443, 443, Span("p", 9, 1)),
                            NetRule("bind", "tcp", 8000, 8002, Span("p", 10, 1)),
                            NetRule("connect", "tcp", 1, 65535, Span("p", 11, 1)),
                            NetRule("bind", "tcp", 2000, 9000, Span("p", 12, 1))))
    low, prof = profile_of(default_like(network=net))
    assert '(remote tcp "*:443")' in low.data["profile"]
    assert prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=443)
    assert prof.allows("network-bind", proto="tcp", host="*", port=8001)
    assert not prof.allows("network-bind", proto="tcp", host="*", port=8003)
    assert not prof.allows("network-bind", proto="tcp", host="*", port=2500)  # too wide: left out
    status = {v.subject: v.status for v in low.verdicts}
    assert status["connect tcp 443"] == "enforced"
    assert status["bind tcp 8000-8002"] == "enforced"
    assert status["connect tcp 1-65535"] == "enforced"
    assert status["bind tcp 2000-9000"] == "narrowed"


def test_verdicts_cover_every_rule_once():
    plan = default_like(syscalls=("ptrace",))
    low = lower(plan, HOST)
    spans = [v.span for v in low.verdicts]
    for r in plan.fs:
        assert spans.count(r.span) == 1, r
    status = {v.subject: v.status for v in low.verdicts}
    assert status["mask /Users/u/.ssh"] == "partial"       # name visible in ~ listing
    assert status["mask /Users/u/.aws"] == "enforced"      # missing: nothing to list
    assert status["syscalls.deny"] == "partial"
    assert status["write /Users/u/proj"] == "enforced"


@pytest.mark.parametrize("text", ['a"b', "a\\b", 'x\\"y', "(allow default)", "#|", "|#", ";", "é ü 漢"])
def test_sbpl_string_round_trips_through_the_reader(text):
    tokens = tokenize(sbpl_string(text))
    assert tokens == [text] and len(tokens) == 1


@pytest.mark.parametrize("text", ["a\nb", "a\tb", "a\rb", "\x7f", "\u2028", "\x00"])
def test_sbpl_string_refuses_unprintable_text(text):
    with pytest.raises(Unrepresentable):
        sbpl_string(text)


def test_unprintable_path_goes_as_parameter_never_into_the_text():
    weird = PROJ + "/a\n(allow default)\nb"
    low = lower(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(weird, "mask")), HOST)
    assert "(allow default)" not in low.data["profile"]
    assert {"name": "SBXC_P0", "value": weird} in low.data["params"]
    prof = load(low.data["profile"], runtime_params(low.data))
    assert not prof.allows("file-read-data", weird + "/x")
    assert prof.allows("file-read-data", "/etc/passwd")


def test_mask_that_cannot_be_written_refuses_the_plan():
    bad = PROJ + "/\udcff-not-utf8"
    low = lower(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(bad, "mask")), HOST)
    v = {x.subject: x for x in low.verdicts}["mask " + bad]
    assert v.status == "not enforceable"
    assert low.data["refuse"]


def test_write_rule_that_cannot_be_written_is_narrowed_away():
    bad = PROJ + "/\udcff"
    low = lower(make_plan(rule("/", "read"), rule(PROJ, "read"), rule(bad, "write")), HOST)
    v = {x.subject: x for x in low.verdicts}["write " + bad]
    assert v.status == "narrowed" and not low.data["refuse"]
    prof = load(low.data["profile"], runtime_params(low.data))
    assert not prof.allows("file-write-data", bad + "/x")


def test_read_rule_under_write_that_cannot_be_written_refuses():
    # Leaving it out would make the path writable: more than the policy.
    bad = PROJ + "/" + "x" * (MAX_PATH_BYTES + 1)
    low = lower(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(bad, "read")), HOST)
    assert {x.subject: x.status for x in low.verdicts}["read " + bad] == "not enforceable"
    assert low.data["refuse"]


def test_evaluator_rejects_what_it_does_not_understand():
    from support.sbpl_eval import ProfileError

    for text in ['(version 1)\n(deny default)\n(allow file-read* (subpath "a\\nb"))',
                 "(version 1)\n(deny default)\n(allow file-read* (vnode-type REGULAR-FILE))",
                 "(version 1)\n(allow file-read*)",
                 '(version 1)\n(deny default)\n(allow file-read* (subpath (param "NOPE")))',
                 "(deny default)"]:
        with pytest.raises(ProfileError):
            load(text)


def test_evaluator_last_match_wins_and_comments_are_skipped():
    prof = load('(version 1)\n(deny default)\n#| (allow file-read*) |#\n; (allow file-read*)\n'
                '(allow file-read* (subpath "/a"))\n(deny file-read* (literal "/a/b"))\n(allow file-read-data (literal "/a/b"))\n')
    assert prof.allows("file-read-data", "/a/x")
    assert prof.allows("file-read-data", "/a/b")
    assert not prof.allows("file-read-metadata", "/a/b")
    assert not prof.allows("file-read-data", "/ab")


def test_hidden_home_keeps_the_way_to_the_project_resolvable():
    low, prof = profile_of(make_plan(rule("/", "read"), rule(HOME, "mask", origin="home"), rule(PROJ, "write"),
                                     home_mode="hidden"))
    assert prof.allows("file-read-metadata", HOME)          # realpath() of the project works
    assert not prof.allows("file-read-data", HOME)          # but the home cannot be listed
    assert not prof.allows("file-read-metadata", HOME + "/.bashrc")
    assert not prof.allows("file-read-data", HOME + "/.bashrc")
    assert prof.allows("file-write-create", PROJ + "/x")
    v = {x.subject: x for x in low.verdicts}["home: hidden (mask /Users/u)"]
    assert v.status == "partial" and "metadata" in v.why


def test_host_rules_allow_only_the_proxy_port():
    from sbxc.compiler.plan import HostRule

    net = Network("hosts", (NetRule("connect", "tcp", 22, 22, Span("p", 9, 1)),),
                  Span("p", 8, 1), (HostRule("example.org", (80, 443), Span("p", 10, 1), "allow example.org"),))
    low = lower(default_like(network=net), HOST)
    assert '(remote tcp (param "SBXC_PROXY"))' in low.data["profile"]
    params = runtime_params(low.data)
    params["SBXC_PROXY"] = "localhost:41234"  # what the runner passes once the proxy listens
    prof = load(low.data["profile"], params)
    assert prof.allows("network-outbound", proto="tcp", host="localhost", port=41234)
    assert prof.allows("network-outbound", proto="tcp", host="127.0.0.1", port=41234)
    assert not prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=41234)
    assert not prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=443)  # only through the proxy
    assert not prof.allows("network-outbound", proto="tcp", host="localhost", port=41235)
    assert not prof.allows("network-outbound", proto="udp", host="localhost", port=41234)
    assert prof.allows("network-outbound", proto="tcp", host="127.0.0.2", port=22)  # the port rule stays
    # name lookups go through the proxy, never mDNSResponder
    assert not prof.allows("network-outbound", "/private/var/run/mDNSResponder")
    status = {v.subject: v.status for v in low.verdicts}
    assert status["allow example.org"] == "enforced"
    assert status["network: host rules"] == "partial"


def test_runner_passes_the_proxy_port():
    from sbxc.runtime.errors import Refusal
    from sbxc.runtime.sbpl_run import param_args

    assert param_args([{"name": "SBXC_PROXY", "source": "proxy", "default": ""}], "", "", 41234) == [
        "-D", "SBXC_PROXY=localhost:41234"]
    with pytest.raises(Refusal):
        param_args([{"name": "SBXC_PROXY", "source": "proxy", "default": ""}], "", "", 0)
