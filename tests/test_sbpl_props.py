"""Property: no path, however it is spelled, changes what the profile means.

A rule on an arbitrary path (quotes, parentheses, backslashes, newlines, ``#|``, ``|#``,
``;``, NUL, lone surrogates from non-UTF-8 names, very long) must end in one of:

* a refusal (``not enforceable``, the plan will not run), or
* a ``narrowed`` rule left out where that grants no more, or
* a profile that the evaluator reads back as exactly the intended statements: the rule's
  own statements on exactly that path, nothing else touched, no statement lost.
"""
import dataclasses

from hypothesis import HealthCheck, given, settings, strategies as st

from sbxc.backends.sbpl import lower
from sbxc.compiler.decide import OPS, decide
from support.sbpl_eval import Filter, disagreement, load, profile_allows, runtime_params

from test_sbpl_backend import HOST, PROJ, make_plan, rule

NASTY = ['"', "\\", "(", ")", "#|", "|#", ";", "\n", "\r", "\t", "\x00", "\x7f", " ", "#", "|",
         "\u2028", "\u00a0", "\ufeff", "é", "\udcff", "\udc80", "'", "`", "*", "$", "{", "}",
         "(allow default)", '") (allow file-write* (subpath "/', "\\\"", "..", "."]

component = st.lists(st.one_of(st.sampled_from(NASTY), st.text(min_size=1, max_size=8)),
                     min_size=1, max_size=6).map("".join).filter(
    lambda c: "/" not in c and c not in (".", ".."))
long_component = st.integers(min_value=200, max_value=1200).map(lambda n: "L" * n)
paths = st.lists(st.one_of(component, long_component), min_size=1, max_size=3).map(
    lambda parts: PROJ + "/" + "/".join(parts))


def _path_filters(f: Filter):
    if f.kind in ("literal", "subpath", "regex"):
        yield f
    for c in f.children:
        yield from _path_filters(c)


def _statements_on(profile, path):
    return [(r.action, r.ops, f.kind) for r in profile.rules for f in r.filters
            for pf in _path_filters(f) if pf.kind != "regex" and pf.value == path]


EXPECTED = {
    "write": [("allow", ("file-read*", "file-map-executable", "process-exec*", "file-write*", "network-outbound"), "subpath")],
    "read": [("allow", ("file-read*", "file-map-executable", "process-exec*", "network-outbound"), "subpath"),
             ("deny", ("file-write*",), "subpath")],
    "mask": [("deny", ("file-read*", "file-map-executable", "process-exec*", "file-write*", "network-outbound"), "subpath")],
    "tmpfs": [("deny", ("file-read*", "file-map-executable", "process-exec*", "file-write*", "network-outbound"), "subpath")],
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=paths, access=st.sampled_from(["mask", "read", "write", "tmpfs"]),
       kind=st.sampled_from(["dir", "file", "missing"]), parent=st.sampled_from(["read", "write"]))
def test_any_path_is_refused_narrowed_or_exact(path, access, kind, parent):
    plan = make_plan(rule("/", "read"), rule(PROJ, parent), rule(path, access, kind=kind))
    target = next(r for r in plan.fs if r.path == path)
    low = lower(plan, HOST)
    v = [x for x in low.verdicts if x.span == target.span]
    assert len(v) == 1, v
    v = v[0]

    if v.status == "not enforceable":
        assert low.data["refuse"], "a rule that cannot be expressed must stop the run"
        return
    assert not low.data["refuse"]
    params = runtime_params(low.data)
    prof = load(low.data["profile"], params)

    # The same plan with the rule on a plain path: the statement count must not change
    # (nothing swallowed by a comment or a broken string, nothing injected).
    plain = PROJ + "/plain"
    twin = make_plan(rule("/", "read"), rule(PROJ, parent), rule(plain, access, kind=kind))
    twin_low = lower(twin, HOST)
    twin_prof = load(twin_low.data["profile"], runtime_params(twin_low.data))

    if v.status == "narrowed" and "left out" in v.why:
        assert _statements_on(prof, path) == []
        assert len(prof.rules) == len(twin_prof.rules) - len(EXPECTED[access]) or len(prof.rules) < len(twin_prof.rules)
        # what is left grants no more than the rule did
        for op in OPS:
            if profile_allows(prof, path, op):
                assert decide(plan, path).allows(op), (op, v.why)
        return

    assert _statements_on(prof, path) == EXPECTED[access]
    assert len(prof.rules) == len(twin_prof.rules)
    # every path the profile names is one the plan, its ancestors or the baseline explain
    known = {r.path for r in plan.fs} | set(low.data["baseline"]["metadata"]) | set(low.data["protect"]) \
        | {d[0] for d in low.data["baseline"]["devices"]} | set(low.data["baseline"]["read"]) \
        | set(low.data["deny_connect"]) | set(low.data["baseline"]["connect"]) | set(params.values())
    for r in prof.rules:
        for f in r.filters:
            for pf in _path_filters(f):
                if pf.kind != "regex":
                    assert pf.value in known, pf.value
    # and the evaluator answers as the decision model does, for the path and beneath it
    for q in (path, path + "/child", PROJ + "/other"):
        for op in OPS:
            why = disagreement(plan, low.data, low.verdicts, prof, q, op, params)
            assert not why, why


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_sbpl_string_reads_back_or_refuses(text):
    from sbxc.backends.sbpl import Unrepresentable, sbpl_string
    from support.sbpl_eval import tokenize

    try:
        lit = sbpl_string(text)
    except Unrepresentable:
        assert not text.isprintable()
        return
    assert tokenize(lit) == [text]


# Random plans over a small tree with prefix traps (/a vs /ab): whatever the mix of rules,
# the profile must answer every path and operation as the decision model does, apart from
# what the backend declares.
TREE = ["/", "/a", "/ab", "/a/b", "/a/b/c", "/a/b/c/d", "/a/c", "/a/bc", "/x", "/x/y"]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(TREE), st.tuples(st.sampled_from(["mask", "read", "write", "tmpfs"]),
                                                         st.sampled_from(["dir", "file", "missing"])),
                       min_size=1, max_size=7),
       st.sampled_from(["on", "off"]))
def test_random_plans_agree_with_decide(rules, net):
    from sbxc.compiler.plan import Network

    plan = make_plan(*(rule(p, a, kind=k) for p, (a, k) in rules.items()), network=Network(net))
    low = lower(plan, HOST)
    assert not low.data["refuse"]
    params = runtime_params(low.data)
    prof = load(low.data["profile"], params)
    queries = set(TREE) | {p + "/z" for p in TREE} | {"/a/b/cz", "/abc"}
    for q in sorted(queries):
        for op in OPS:
            why = disagreement(plan, low.data, low.verdicts, prof, q, op, params)
            assert not why, why
