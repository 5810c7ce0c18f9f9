"""``sbxc explain`` against real sandboxes: for every path of the shared case list, what
explain says a backend allows is what a command inside that backend could really do.

The policy is the shared cases' policy written as a file; explain and exec both run
through the command line. Landlock's narrowing (a mask or read-only folder beneath a
writable one takes rights from the folder itself) must show in explain's answer.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import base_env, run, sbxc_argv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402

pytestmark = pytest.mark.live

# case op -> explain's question (delete is not one of explain's answers)
_ASK = {"read": "read", "list": "read", "write": "write", "create": "write"}


def _policy(root: str) -> str:
    return ("sbxc: 1\ncache: {tools: []}\nproject: tree/proj\nfilesystem:\n"
            f"  - read /\n  - write {root}/proj\n  - read {root}/proj/.git/hooks\n  - mask {root}/proj/secret\n"
            f"  - mask {root}/home/.ssh\n  - mask {root}/home/.netrc\n")


def _available(backend: str) -> str:
    from test_cross_backend import _available as why

    return why(backend)


@pytest.fixture
def world(tmp_path, home):
    os.chmod(tmp_path, 0o755)
    root = str(tmp_path / "tree")
    os.makedirs(root)
    cases.build_tree(root)
    policy = tmp_path / "sandbox.policy.yaml"
    policy.write_text(_policy(root))
    answers = {}
    env = base_env(str(home))
    for _name, rel, op in cases.CASES:
        path = cases.case_path(root, rel)
        if op in _ASK and path not in answers:
            r = run(sbxc_argv("explain", path, "--policy", str(policy), "--format", "json"), env=env, cwd=f"{root}/proj")
            assert r.rc == 0, r
            answers[path] = json.loads(r.out)
    return root, str(policy), answers, env


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_explain_says_what_the_sandbox_does(world, backend):
    why = _available(backend)
    if why:
        pytest.skip(why)
    root, policy, answers, env = world
    r = run(sbxc_argv("exec", "--policy", policy, "--backend", backend, "--", "/bin/sh", "-c", cases.probe_script(root)),
            env=env, cwd=f"{root}/proj")
    got = cases.parse_probe(r.out)
    assert len(got) == len(cases.CASES), r
    wrong = []
    for name, rel, op in cases.CASES:
        if op not in _ASK:
            continue
        ans = answers[cases.case_path(root, rel)]["backends"][backend]
        if ans[_ASK[op]] != got[name]:
            wrong.append(f"{name}: explain says {_ASK[op]}={ans[_ASK[op]]}, the sandbox did {got[name]}")
    assert not wrong, "\n".join(wrong)
    # Not vacuous: both answers occur.
    assert any(got.values()) and not all(got.values())


def test_explain_shows_landlock_narrowing(world):
    """A new file at the project's top level: the model allows it (write {project}), bwrap
    does it, Landlock cannot (the read-only .git/hooks beneath takes MAKE_REG from the
    project folder itself), and explain says so with the rule that narrowed."""
    root, _policy_path, answers, _env = world
    ans = answers[f"{root}/proj/new-top.txt"]
    assert ans["access"] == "write" and ans["rule"]["text"] == f"write {root}/proj"
    assert ans["backends"]["bwrap"]["write"] is True
    ll = ans["backends"]["landlock"]
    assert ll["write"] is False and ll["status"] == "narrowed" and "no file can be created" in ll["why"]
