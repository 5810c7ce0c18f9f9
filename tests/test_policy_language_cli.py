"""The policy language as a person meets it through the real command line: values YAML
would retype, the schema's verdict matching compile's, and shell spellings in paths."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def sbxc(*args, cwd):
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def _check(tmp_path, text: str, *flags):
    (tmp_path / "sandbox.policy.yaml").write_text(text)
    return sbxc("compile", "--check", *flags, cwd=tmp_path)


@pytest.mark.parametrize("written, how", [
    ("0755", "an integer (755 under YAML 1.2, 493 under YAML 1.1)"),
    ("1.10", "a number (1.1)"),
    ("0x10", "an integer (16)"),
    ("1e3", "a number (1000.0) under YAML 1.2"),
    ("yes", "a boolean (true) under YAML 1.1"),
    ("Off", "a boolean (false) under YAML 1.1"),
    ("~", "null (no value)"),
    ("2026-01-02", "a date (2026-01-02) under YAML 1.1"),
    ("1:30", "an integer (90) under YAML 1.1"),
    (".inf", "a number (inf)"),
])
def test_a_retyped_env_value_is_an_error_with_the_quoted_form(tmp_path, written, how):
    r = _check(tmp_path, f"sbxc: 1\nextends: [builtin:default]\nenv:\n  set:\n    V: {written}\n")
    assert r.returncode == 1, r
    lines = r.stdout.splitlines()
    assert lines[0] == (f"sandbox.policy.yaml:5:8: error: env.set.V: YAML reads {written} as {how}, "
                        "not as text  [SBX026]"), r.stdout
    assert f'  hint: quote it to keep it as written: "{written}"' in lines, r.stdout


def test_the_quoted_form_compiles_and_the_plan_carries_it_unchanged(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text(
        'sbxc: 1\nextends: [builtin:default]\nenv:\n  set:\n    V: "0755"\n    W: \'1.10\'\n    X: !!str 0x10\n')
    r = sbxc("compile", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    env = dict(json.loads(r.stdout)["ir"]["env"]["set"])
    assert (env["V"], env["W"], env["X"]) == ("0755", "1.10", "0x10")


def test_retyped_text_elsewhere_in_the_schema(tmp_path):
    r = _check(tmp_path, "sbxc: 1\nextends: [builtin:default]\ncache:\n  root: 0777\nenv:\n  pass: [PATH, 1_000]\n"
                         "landlock:\n  min_abi: 010\n", "--format", "json")
    assert r.returncode == 1
    got = {(d["code"], d["span"]["line"], d["span"]["col"]) for d in json.loads(r.stdout)["diagnostics"]}
    assert got == {("SBX026", 4, 9), ("SBX026", 6, 16), ("SBX027", 8, 12)}, got


# (policy, compile --check exit) for structural mistakes the schema must judge alike
STRUCTURAL = [
    ("sbxc: 1\nextends: [builtin:default]\n", 0),
    ("sbxc: 1\nextends: [builtin:default]\nnetwrok: false\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nhome: [read-only]\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nhome: hiden\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nenv: {set: {A: {B: c}}}\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nenv: {pass: PATH}\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\ncache:\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nfilesystem: [read/usr]\n", 1),
    ("sbxc: 1\nextends: [builtin:default]\nlandlock: {min_abi: 4.0}\n", 0),
    ("sbxc: 1\nextends: [builtin:default]\nnetwork: [connect tcp 443]\n", 0),
    ("sbxc: 1\nextends: [builtin:default]\nnetwork: [connect tcp 0]\n", 1),
]


@pytest.mark.parametrize("text, code", STRUCTURAL)
def test_compile_and_the_schema_command_agree(tmp_path, text, code):
    from support.jsonschema_eval import schema_accepts

    schema = json.loads(sbxc("schema", cwd=tmp_path).stdout)
    r = _check(tmp_path, text)
    assert r.returncode == code, r.stdout
    assert schema_accepts(text, schema) == (code == 0)


@pytest.mark.parametrize("rule, col, expect", [
    ("read $HOME/x", 10, '"$HOME" is shell syntax, which sbxc does not expand; did you mean "{home}"?  [SBX029]'),
    ("read? /x/$PWD", 14, '"$PWD" is shell syntax, which sbxc does not expand; did you mean "{project}"?  [SBX029]'),
    ("mask /home/$USER/.ssh", 16, '"$USER" is shell syntax, which sbxc does not expand; did you mean "${USER}"?  [SBX029]'),
    ("read ~alice/x", 10, '"~alice" is shell syntax, which sbxc does not expand  [SBX029]'),
    ("read {HOME}/x", 10, 'unknown variable "{HOME}"; did you mean "{home}"?  [SBX030]'),
    ("read {{project}}/x", 10, 'malformed variable: "{{" is template syntax  [SBX032]'),
    ("read ${HOME-/x}", 10, 'malformed variable: "${HOME-/x}" is not ${NAME} or ${NAME:-default}; '
                            'did you mean "${HOME:-/x}"?  [SBX032]'),
    ("read /x/$(pwd)", 13, '"$(pwd)" is command substitution, which sbxc does not expand  [SBX029]'),
])
def test_shell_spellings_in_a_path_get_a_did_you_mean(tmp_path, rule, col, expect):
    r = _check(tmp_path, f"sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - {rule}\n")
    assert r.returncode == 1, r.stdout
    assert f"sandbox.policy.yaml:4:{col}: error: {expect}" in r.stdout.splitlines(), r.stdout


def test_a_windows_variable_warns_and_double_dollar_is_a_literal_dollar(tmp_path):
    (tmp_path / "a$b").mkdir()
    (tmp_path / "%X%").mkdir()
    r = _check(tmp_path, "sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - read {project}/a$$b\n"
                         "  - read {project}/%X%\n")
    assert r.returncode == 0, r.stdout
    assert ('sandbox.policy.yaml:5:20: warning: "%X%" looks like a Windows variable, which sbxc does not expand; '
            'the path keeps it as written; did you mean "${X}"?  [SBX028]') in r.stdout.splitlines(), r.stdout
    plan = json.loads(sbxc("compile", cwd=tmp_path).stdout)
    paths = {e["path"] for e in plan["ir"]["fs"]}
    assert str(tmp_path.resolve() / "a$b") in paths and str(tmp_path.resolve() / "%X%") in paths
