"""The SBPL profile, read by the evaluator, against the decision model, case by case.

For every (plan, path, operation) the evaluator's answer must equal
``sbxc.compiler.decide``'s, or the difference must be declared by the backend: towards
less access with a ``narrowed``/``partial`` verdict, towards more only for the start-up
baseline it reports. Any other difference fails.

Cases come from two places: the shared list in tests/live/cases.py (the same cases the
Linux backends answer, when it is there) and the plans below.
"""
import importlib.util
import pathlib

import pytest

from sbxc.backends.sbpl import lower
from sbxc.compiler.decide import OPS
from sbxc.compiler.plan import Network, NetRule, Span
from support.sbpl_eval import disagreement, load, runtime_params

from test_sbpl_backend import CACHE_DIR, CACHE_ROOT, HOME, HOST, PROJ, default_like, make_plan, rule


def _plans():
    yield "default", default_like()
    yield "default-net-off", default_like(network=Network("off"))
    yield "default-net-rules", default_like(network=Network("rules", (NetRule("connect", "tcp", 443, 443, Span("p", 1, 1)),)))
    yield "home-hidden", make_plan(rule("/", "read"), rule(HOME, "mask", origin="home"), rule(PROJ, "write"),
                                   rule(PROJ + "/.git/config", "read", kind="file"), home_mode="hidden")
    yield "home-writable", make_plan(rule("/", "read"), rule(HOME, "write", origin="home"),
                                     rule(HOME + "/.ssh", "mask"), rule(HOME + "/.ssh/known_hosts", "read", kind="file"),
                                     home_mode="writable")
    yield "narrow", make_plan(rule("/usr/bin", "read"), rule("/bin", "read"), rule(PROJ, "write"),
                              rule("/usr/lib/private", "mask"))
    yield "write-root", make_plan(rule("/", "write"), rule("/private/etc", "read"), rule("/private/etc/master.passwd", "mask", kind="file"),
                                  rule("/private/tmp", "tmpfs"), rule("/private/tmp/keep", "write"))
    yield "mask-in-tmpfs", make_plan(rule("/", "read"), rule("/private/tmp", "tmpfs"), rule("/private/tmp/x", "mask", kind="missing"))
    yield "deep-chain", make_plan(rule("/", "read"), rule("/a", "write"), rule("/a/b", "read"), rule("/a/b/c", "write"),
                                  rule("/a/b/c/d", "mask"), rule("/a/b/c/d/e", "write"), rule("/a/bc", "mask", kind="file"))
    yield "odd-names", make_plan(rule("/", "read"), rule(PROJ, "write"), rule(PROJ + '/we"ird (1)', "mask"),
                                 rule(PROJ + "/back\\slash", "read"), rule(PROJ + "/new\nline", "mask"),
                                 rule(PROJ + "/#|x|#;y", "read"))
    yield "cache", default_like()


def _paths(plan):
    out = {"/", "/etc/passwd", "/private/etc/hosts", "/usr/lib/libSystem.B.dylib", "/usr/bin/env",
           "/dev/null", "/dev/tty", "/dev/fd/3", "/dev/disk0", "/private/var/run/mDNSResponder",
           HOME, HOME + "/.bashrc", PROJ + "/src/x.c", CACHE_ROOT, CACHE_DIR + "/pip/x", CACHE_ROOT + "/other/x",
           "/private/var/folders/zz/sbxc-run-test", "/private/var/folders/zz/sbxc-run-test/f"}
    for r in plan.fs:
        p = r.path
        out.update({p, p + "/child", p + "/child/grandchild", p + "x"})
        if p != "/":
            out.add(p.rsplit("/", 1)[0] or "/")
    return sorted(out)


def _own_cases():
    for name, plan in _plans():
        for path in _paths(plan):
            for op in OPS:
                yield name, plan, path, op


def _shared_cases():
    """tests/live/cases.py, the case list shared with the Linux backends' live tests."""
    here = pathlib.Path(__file__).parent / "live" / "cases.py"
    import sys

    spec = importlib.util.spec_from_file_location("sbxc_live_cases", here)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look themselves up there
    spec.loader.exec_module(mod)
    return mod


def _check(plan, cases):
    low = lower(plan, HOST)
    assert not low.data["refuse"], low.data["refuse"]
    params = runtime_params(low.data)
    prof = load(low.data["profile"], params)
    problems = []
    for path, op in cases:
        why = disagreement(plan, low.data, low.verdicts, prof, path, op, params)
        if why:
            problems.append(why)
    return problems


@pytest.mark.parametrize("name,plan", list(_plans()), ids=[n for n, _ in _plans()])
def test_profile_agrees_with_decide(name, plan):
    cases = [(path, op) for path in _paths(plan) for op in OPS]
    assert len(cases) > 50
    problems = _check(plan, cases)
    assert not problems, "\n".join(problems[:20])


def test_the_comparison_catches_a_profile_that_grants_more():
    # The check must be able to fail: drop the mask from the profile and it must notice.
    plan = default_like()
    low = lower(plan, HOST)
    text = low.data["profile"].replace('(deny file-read* file-map-executable process-exec* file-write* network-outbound (subpath "/Users/u/.ssh"))', "")
    assert text != low.data["profile"]
    prof = load(text, runtime_params(low.data))
    assert disagreement(plan, low.data, low.verdicts, prof, HOME + "/.ssh/id_rsa", "read")


def test_the_comparison_catches_an_undeclared_narrowing():
    plan = default_like()
    low = lower(plan, HOST)
    prof = load(low.data["profile"] + '(deny file-write* (subpath "/Users/u/proj/src"))\n', runtime_params(low.data))
    assert disagreement(plan, low.data, low.verdicts, prof, PROJ + "/src/a.c", "write")


# A root that need not exist: lowering and deciding are pure.
SHARED_ROOT = "/private/var/tmp/sbxc-cases"


@pytest.mark.parametrize("network", ["on", "off"])
def test_shared_cases(network):
    """The same (path, op) cases the Linux backends answer in tests/live/test_cross_backend.py."""
    mod = _shared_cases()
    plan = mod.make_plan(mod.shared_rules(SHARED_ROOT), project=SHARED_ROOT + "/proj", network=network)
    items = [(mod.case_path(SHARED_ROOT, rel), op) for _name, rel, op in mod.CASES if op in OPS]
    assert len(items) >= 20
    problems = _check(plan, items)
    assert not problems, "\n".join(problems[:20])
