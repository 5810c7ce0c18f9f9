"""compile, print-config and schema as a person runs them (with a fixed fake host)."""
from __future__ import annotations

import io
import json
import os

import pytest

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree


@pytest.fixture
def case(tmp_path):
    root = str(tmp_path)
    make_tree(root)
    proj = os.path.join(root, "proj")
    home = os.path.join(root, "home/user")

    def write(text, name="sandbox.policy.yaml", where=proj):
        with open(os.path.join(where, name), "w") as f:
            f.write(text)

    def run(module, argv, host=None, cwd=proj, env=None):
        out, err = io.StringIO(), io.StringIO()
        code = module.run(argv, cwd=cwd, environ=env or fake_environ(home), host=host or fake_host(home=home),
                          paths=FakePaths(root), stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    class Case:
        pass

    c = Case()
    c.root, c.proj, c.home, c.write, c.run = root, proj, home, write, run
    return c


def compile_cmd():
    from sbxc.commands import compile as m

    return m


def print_config():
    from sbxc.commands import print_config as m

    return m


def test_exit_codes(case):
    case.write("sbxc: 1\nextends: [builtin:default]\n")
    assert case.run(compile_cmd(), ["--check"])[0] == 0
    case.write("sbxc: 1\nhome: hiden\n")
    code, out, err = case.run(compile_cmd(), ["--check"])
    assert code == 1 and "[SBX013]" in out and "1 error" in out
    assert case.run(compile_cmd(), ["--check", "--bogus"])[0] == 2
    assert case.run(compile_cmd(), ["--check", "--backend", "nope"])[0] == 2


def test_warnings_do_not_fail(case):
    case.write("sbxc: 1\nfilesystem:\n  - read /\n  - read /usr\n  - read /usr/\n")
    code, out, _ = case.run(compile_cmd(), ["--check"])
    assert code == 0 and "warning" in out and "[SBX040]" in out


def test_strict_turns_partial_into_an_error(case):
    # Landlock cannot hide a masked file's name: partial.
    case.write("sbxc: 1\nfilesystem:\n  - read /\n  - mask {home}/.netrc\n")
    code, out, _ = case.run(compile_cmd(), ["--check", "--backend", "landlock"])
    assert code == 0 and "partial" in out
    code, out, _ = case.run(compile_cmd(), ["--check", "--backend", "landlock", "--strict"])
    assert code == 1 and "[SBX051]" in out


def test_output_plan_file(case):
    case.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    code, out, err = case.run(compile_cmd(), ["-o", "plan.json"])
    assert code == 0, err
    data = json.load(open(os.path.join(case.proj, "plan.json")))
    assert data["backend"] == "bwrap" and data["runtime"]["network"] == "off"
    assert any(src[0] == "builtin:default" for src in data["sources"])


def test_no_plan_written_on_errors(case):
    case.write("sbxc: 1\nhome: hiden\n")
    assert case.run(compile_cmd(), ["-o", "plan.json"])[0] == 1
    assert not os.path.exists(os.path.join(case.proj, "plan.json"))


def test_discovery_uses_the_nearest_parent(case):
    case.write("sbxc: 1\nnetwork: false\nfilesystem: [read /]\n")
    sub = os.path.join(case.proj, "src")
    code, out, _ = case.run(compile_cmd(), ["--check"], cwd=sub)
    assert code == 0 and "a parent of the current folder" in out


def test_print_config_without_a_policy_says_builtin_default(case):
    code, out, _ = case.run(print_config(), [])
    assert code == 0
    first = out.splitlines()[0]
    assert "builtin:default" in first and "no sandbox.policy.yaml" in first


def _row(out, key):
    return next(l for l in out.splitlines() if l.split()[0] == key)


def test_flags_beat_files_in_both_directions(case):
    case.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    code, out, _ = case.run(print_config(), ["--network=true"])
    row = _row(out, "network")
    assert code == 0 and " true " in row and "from command line" in row and "beat false (sandbox.policy.yaml:3:10)" in row
    case.write("sbxc: 1\nextends: [builtin:default]\nnetwork: true\n")
    row = _row(case.run(print_config(), ["--network=false"])[1], "network")
    assert " false " in row and "from command line" in row and "beat true (sandbox.policy.yaml:3:10)" in row
    row = _row(case.run(print_config(), [])[1], "network")
    assert "from sandbox.policy.yaml:3:10" in row and "beat true (builtin:default" in row


def test_flag_beats_a_locked_file_value(case):
    case.write("sbxc: 1\nnetwork: false\nlocked: [network]\nfilesystem: [read /]\n", "base.yaml")
    case.write("sbxc: 1\nextends: [./base.yaml]\n")
    row = _row(case.run(print_config(), ["--network"])[1], "network")
    assert " true " in row and "from command line" in row


@pytest.mark.parametrize("host_kw, policy_net, backend, expect", [
    (dict(bwrap="", userns=False), "false", "bwrap", "(no effect: bwrap is not installed)"),
    (dict(userns=False), "false", "bwrap", "(no effect: bwrap cannot create namespaces here)"),
    (dict(), "[connect tcp 443]", "bwrap", "(narrowed: bwrap cannot allow single ports; the command gets no network)"),
    (dict(landlock_abi=3), "[connect tcp 443]", "landlock", "(no effect: per-port rules need Landlock ABI 4; this kernel has 3)"),
    (dict(landlock_abi=0), "false", "landlock", "(no effect: Landlock is not available on this kernel)"),
    (dict(), "false", "sandbox-exec", "(no effect: sandbox-exec needs macOS)"),
    (dict(), "false", "bwrap", ""),
    (dict(landlock_abi=4), "[connect tcp 443]", "landlock", ""),
    (dict(bwrap="", userns=False), "true", "bwrap", ""),
])
def test_network_row_says_when_it_has_no_effect(case, host_kw, policy_net, backend, expect):
    case.write(f"sbxc: 1\nfilesystem: [read /]\nnetwork: {policy_net}\n")
    host = fake_host(home=case.home, **host_kw)
    row = _row(case.run(print_config(), ["--backend", backend], host=host)[1], "network")
    if expect:
        assert row.endswith(expect), row
    else:
        assert "no effect" not in row and "narrowed" not in row, row


def test_auto_backend_resolution_is_shown(case):
    case.write("sbxc: 1\nfilesystem: [read /]\n")
    out = case.run(print_config(), [], host=fake_host(home=case.home, bwrap="", userns=False, landlock_abi=5))[1]
    assert "landlock" in _row(out, "backend") and "bwrap is not installed" in out


def test_print_config_json(case):
    case.write("sbxc: 1\nfilesystem: [read /]\nhome: hidden\n")
    data = json.loads(case.run(print_config(), ["--format", "json"])[1])
    home = next(r for r in data["settings"] if r["key"] == "home")
    assert home["value"] == "hidden" and home["origin"] == "sandbox.policy.yaml:3:7"
    assert home["beat"] == [{"value": "read-only", "origin": "default"}]


def test_schema_matches_the_loader(tmp_path):
    """Every key the loader accepts is in the schema and the reverse, at every level."""
    from sbxc.compiler.settings import json_schema, schema

    js = json_schema()

    def walk(fields, props, where):
        assert set(fields) == set(props), where
        for name, f in fields.items():
            if f.kind == "map":
                assert props[name]["additionalProperties"] is False
                walk(f.fields, props[name]["properties"], f"{where}.{name}")

    walk(schema(), js["properties"], "")
    assert js["additionalProperties"] is False and js["required"] == ["sbxc"]

    # and the loader really accepts each key of the schema (no SBX010), and rejects others
    from test_frontend_input import compile_bytes

    r = compile_bytes(tmp_path, b"""sbxc: 1
extends: [builtin:default]
project: .
backend: auto
home: read-only
filesystem: [read /]
network: [connect tcp 443, allow @db]
host_groups: {db: [db.example.org:5432]}
cache: {tools: [pip], root: "/var/tmp/sbxc-{uid}", required: false}
env: {pass: [PATH], set: {A: b}}
landlock: {min_abi: 1, best_effort: false}
syscalls: {deny: [ptrace], allow_unix_sockets: false}
locked: [network]
workspace: {max_sessions: 2, max_bytes: 1000, pool: 1, stage: ["/etc/hostname:hostname"]}
""")
    assert r.ok, [d.message for d in r.diagnostics]
    import yaml

    doc = yaml.safe_load(open(os.path.join(str(tmp_path), "proj", "sandbox.policy.yaml")))
    assert set(doc) == set(js["properties"])
    for name, sub in js["properties"].items():
        if sub.get("type") == "object" and "properties" in sub:
            assert set(doc[name]) == set(sub["properties"]), name


def test_schema_command_prints_valid_json(capsys):
    from sbxc.commands import schema

    assert schema.main([]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "filesystem" in data["properties"]
    assert schema.main(["extra"]) == 2
