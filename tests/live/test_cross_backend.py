"""The shared case list under every Linux backend and under the decision model.

A backend may answer differently from ``decide`` only by granting less, and only where its
report says ``narrowed`` or ``partial`` for the deciding rule. Granting more fails always.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from sbxc.compiler.decide import decide  # noqa: E402

pytestmark = pytest.mark.live


def _landlock_ok() -> str:
    from sbxc.runtime.probe import landlock_abi

    abi = landlock_abi()
    return "" if abi >= 6 else f"Landlock ABI {abi} on this kernel (the shared cases need 6)"


def _bwrap_ok() -> str:
    from sbxc.runtime.probe import host_program, userns_works

    b = host_program("bwrap", os.environ)[0]
    if not b:
        return "bwrap is not installed"
    ok, why = userns_works(b)
    return "" if ok else f"bwrap cannot run here: {why}"


def _available(backend: str) -> str:
    if backend == "landlock":
        return _landlock_ok()
    return _bwrap_ok()


def _verdicts(pf: dict) -> list:
    return pf["report"]


@pytest.mark.parametrize("variant", ["a", "b"])
@pytest.mark.parametrize("backend", ["landlock", "bwrap"])
def test_shared_cases_agree_with_decide(backend, variant, tmp_path):
    why = _available(backend)
    if why:
        pytest.skip(why)
    root = str(tmp_path / "tree")
    os.makedirs(root)
    os.chmod(tmp_path, 0o755)
    cases.build_tree(root)
    plan = cases.make_plan(cases.shared_rules(root, variant), project=f"{root}/proj")
    pf = cases.planfile_for(plan, backend)
    res = cases.run_planfile(pf, ["/bin/sh", "-c", cases.probe_script(root)], cwd=f"{root}/proj", tmp=str(tmp_path))
    got = cases.parse_probe(res.out)
    assert len(got) == len(cases.CASES), (res.rc, res.err)

    report = _verdicts(pf)
    problems = []
    for name, rel, op in cases.CASES:
        path = cases.case_path(root, rel)
        d = decide(plan, path)
        want = d.allows(op)
        if got[name] == want:
            continue
        if got[name] and not want:
            problems.append(f"{backend} grants more than the policy: {name} ({op} {path}), decide says {d.access}")
            continue
        # Less access: only where the report admits it for the deciding rule.
        rule_path = d.rule.path if d.rule else ""
        admitted = [v for v in report if rule_path and v[0].endswith(" " + rule_path) and v[1] in ("narrowed", "partial")]
        if not admitted:
            problems.append(f"{backend} denies {name} ({op} {path}) that decide allows, and its report does not say so")
    assert not problems, "\n".join(problems)


def test_case_list_can_fail(tmp_path):
    """The comparison is not vacuous: the unsandboxed run disagrees with decide."""
    root = str(tmp_path / "tree")
    os.makedirs(root)
    cases.build_tree(root)
    plan = cases.make_plan(cases.shared_rules(root), project=f"{root}/proj")
    import subprocess

    out = subprocess.run(["/bin/sh", "-c", cases.probe_script(root)], capture_output=True, text=True, cwd=root).stdout
    got = cases.parse_probe(out)
    more = [n for n, rel, op in cases.CASES if got[n] and not decide(plan, cases.case_path(root, rel)).allows(op)]
    assert more, "without a sandbox some case must be allowed that the policy denies"
