"""The one command-line grammar, through the real command line (``python -m sbxc``): flags
mean the same on every command, a word after a flag is never the command, ambiguous or
wrong lines are one-line usage errors, help lists options and exit codes, and the output
formats (short and verbose reports, JSON, SARIF 2.1.0)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from sbxc.layout import BACKENDS  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"


def sbxc(*args, cwd=None, env=None):
    e = dict(os.environ, PYTHONPATH=SRC)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=120)


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text(POLICY)
    return tmp_path


def _network_row(r):
    rows = json.loads(r.stdout)["settings"]
    return next(x for x in rows if x["key"] == "network")


ON = [["--network"], ["--network", "true"], ["--network=true"], ["--network=on"], ["--network", "yes"],
      ["--network=TRUE"], ["--network", "1"]]
OFF = [["--no-network"], ["--network", "false"], ["--network=false"], ["--network=off"], ["--network", "no"],
       ["--network=0"]]


@pytest.mark.parametrize("flags,want", [(f, "true") for f in ON] + [(f, "false") for f in OFF])
def test_network_spellings_mean_the_same_on_print_config_and_compile(proj, flags, want):
    r = sbxc("print-config", *flags, "--format", "json", cwd=proj)
    row = _network_row(r)
    assert r.returncode == 0 and row["value"] == want and row["origin"] == "command line", r.stderr
    r = sbxc("compile", *flags, "--check", "--format", "json", cwd=proj)
    report = json.loads(r.stdout)["report"]["bwrap"]["verdicts"]
    assert any(v["subject"] == f"network: {want}" for v in report), report
    r = sbxc("explain", "sandbox.policy.yaml", *flags, "--format", "json", cwd=proj)
    assert r.returncode == 0, r.stderr
    # exec reads the same words (the run itself is in the live tests)
    from sbxc.commands import exec as exec_cmd

    assert exec_cmd.parse_args([*flags, "--", "make"]).network == ("on" if want == "true" else "off")


@pytest.mark.parametrize("cmd", [["compile", "--check"], ["print-config"], ["explain", "x"]])
@pytest.mark.parametrize("flags", [["--network", "maybe"], ["--network=maybe"], ["--network", "sandbox.policy.yaml"],
                                   ["--network", "--no-network"], ["--backend", "dockr"], ["--netwrok"],
                                   ["--backend"], ["--check=yes"]])
def test_bad_or_ambiguous_flags_are_one_line_usage_errors(proj, cmd, flags):
    if flags == ["--check=yes"] and cmd[0] != "compile":
        flags = ["--format=yaml"]
    r = sbxc(*cmd, *flags, cwd=proj)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"sbxc {cmd[0]}: ") and f"sbxc help {cmd[0]}" in r.stderr


def test_exec_never_takes_a_flag_word_as_the_command(proj):
    marker = proj / "ran"
    for argv, why in [(["--network", "make"], "'make' is not a value of --network"),
                      (["--network", "true"], "that word is the value of --network"),
                      (["--policy"], "--policy needs a value"),
                      (["--backend", "--", "touch", str(marker)], "--backend needs a value"),
                      (["--netwrok", "touch", str(marker)], "did you mean --network?")]:
        r = sbxc("exec", *argv, cwd=proj)
        assert r.returncode == 125 and why in r.stderr and len(r.stderr.splitlines()) == 1, (argv, r.stderr)
        assert not marker.exists()
    from sbxc.commands import exec as exec_cmd

    # the case that ran `true -- make` before: now the command is make
    assert exec_cmd.parse_args(["--network", "true", "--", "make"]).cmd == ["make"]
    assert exec_cmd.parse_args(["--network=false", "make", "--network"]).cmd == ["make", "--network"]


def test_flags_beat_files_and_print_config_names_the_loser(proj):
    r = sbxc("print-config", "--network", "true", "--format", "json", cwd=proj)
    row = _network_row(r)
    assert row["value"] == "true" and row["beat"][0]["value"] == "false"
    assert row["beat"][0]["origin"].startswith("sandbox.policy.yaml:3:")


def test_compile_takes_policy_as_word_or_flag_but_not_two_different(proj):
    (proj / "other.policy.yaml").write_text("sbxc: 1\nextends: [builtin:default]\n")
    a = sbxc("compile", "--check", "other.policy.yaml", "--format", "json", cwd=proj)
    b = sbxc("compile", "--check", "--policy", "other.policy.yaml", "--format", "json", cwd=proj)
    assert json.loads(a.stdout)["policy"] == json.loads(b.stdout)["policy"] == str(proj / "other.policy.yaml")
    r = sbxc("compile", "--check", "other.policy.yaml", "--policy", "sandbox.policy.yaml", cwd=proj)
    assert r.returncode == 2 and "were both given" in r.stderr


# ------------------------------------------------------------------ help

@pytest.mark.parametrize("name", ["compile", "exec", "print-config", "explain", "doctor", "cache", "schema",
                                  "completion", "help"])
def test_help_command_and_dash_dash_help_list_options_and_exit_codes(name):
    from sbxc.commands import _args

    a, b = sbxc("help", name), sbxc(name, "--help")
    assert a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout, (a.stderr, b.stderr)
    assert a.stdout.startswith(f"usage: sbxc {name}") and "options:" in a.stdout and "exit status:" in a.stdout
    cmd = _args.BY_NAME[name]
    for f in cmd.flags + tuple(x for s in cmd.subcommands for x in s.flags):
        assert f.name in a.stdout


def test_exec_help_lists_network_and_the_exit_codes():
    out = sbxc("help", "exec").stdout
    for word in ("--policy P", "--plan F", "--backend B", "--network[=true|false]", "--no-network", "125", "126", "127"):
        assert word in out


def test_every_flag_in_the_table_is_accepted_by_the_parser():
    """The help and the completions come from the table; the parser must take every entry."""
    from sbxc.commands import _args

    for cmd in _args.COMMANDS + tuple(s for c in _args.COMMANDS for s in c.subcommands):
        for f in cmd.flags:
            if f.name == "--help":
                continue
            word = f"{f.name}={f.choices[0]}" if f.choices else (f"{f.name}=x" if f.takes_value() else f.name)
            tail = ["--", "x"] if cmd.rest else [p.choices[0] if p.choices else "x" for p in cmd.positionals
                                                if p.required]
            got = _args.parse(cmd, [word, *tail])
            assert got[f.dest] is not None, (cmd.name, f.name)


def test_unknown_subcommand_names_it_and_the_choices():
    r = sbxc("cache", "foo")
    assert r.returncode == 2 and r.stderr.strip() == (
        "sbxc cache: unknown subcommand 'foo' (choose from: path, clear) (see: sbxc help cache)")
    r = sbxc("cache")
    assert r.returncode == 2 and "path, clear" in r.stderr
    r = sbxc("wirte")
    assert r.returncode == 2 and "unknown command 'wirte'" in r.stderr and "did you mean write" not in r.stderr
    r = sbxc("complie")
    assert "did you mean compile?" in r.stderr
    r = sbxc("help", "nope")
    assert r.returncode == 2 and "unknown command 'nope'" in r.stderr


def test_print_config_on_a_policy_with_errors_exits_1(proj):
    (proj / "sandbox.policy.yaml").write_text("sbxc: 1\nhome: hiden\n")
    r = sbxc("print-config", cwd=proj)
    assert r.returncode == 1 and "[SBX013]" in r.stderr and "a run would refuse" in r.stdout
    r = sbxc("print-config", "--format", "json", cwd=proj)
    data = json.loads(r.stdout)
    assert r.returncode == 1 and data["exit"] == 1 and data["errors"] == 1
    assert data["diagnostics"][0]["code"] == "SBX013"


# ------------------------------------------------------------------ compile --check output

def test_short_report_by_default_full_table_with_verbose(proj):
    short = sbxc("compile", "--check", "--backend", "landlock", cwd=proj)
    full = sbxc("compile", "--check", "--backend", "landlock", "--verbose", cwd=proj)
    assert short.returncode == full.returncode == 0
    s, f = short.stdout.splitlines(), full.stdout.splitlines()
    summaries = [l for l in f if l.startswith("  ") and not l.startswith("    ")]
    assert summaries == [l for l in s if l.startswith("  ") and not l.startswith("    ")]
    assert len(summaries) == len(BACKENDS) and "landlock (selected)" in summaries[1]
    detail = [l for l in s if l.startswith("    ")]
    assert detail and all(": enforced" not in l for l in detail)
    assert set(detail) < set(f)  # the short lines are the full table's, verbatim
    assert any(l.endswith("/tmp: enforced") for l in f) and "(every rule on every backend: --verbose)" in s
    r = sbxc("compile", "--verbose", cwd=proj)
    assert r.returncode == 2 and "--verbose needs --check" in r.stderr


BAD = ("sbxc: 1\nextends: [builtin:default]\nhome: hiden\nfilesystem:\n  - wirte /tmp\n  - read /usr\n"
       "  - read /usr\n")


def validate_sarif(doc: dict) -> None:
    """The SARIF 2.1.0 required fields and value rules (OASIS SARIF 2.1.0, §3.13 sarifLog,
    §3.14 run, §3.18 tool, §3.19 toolComponent, §3.27 result, §3.28 location, §3.30 region,
    §3.49 reportingDescriptor)."""
    assert doc["version"] == "2.1.0"
    assert isinstance(doc.get("$schema", ""), str)
    assert isinstance(doc["runs"], list) and doc["runs"]
    for run in doc["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rules = driver.get("rules", [])
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids)) and all(isinstance(i, str) and i for i in ids)
        for r in rules:
            if "defaultConfiguration" in r:
                assert r["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
            if "shortDescription" in r:
                assert isinstance(r["shortDescription"]["text"], str)
        assert isinstance(run["results"], list)
        for res in run["results"]:
            msg = res["message"]
            assert isinstance(msg.get("text"), str) or isinstance(msg.get("id"), str)
            assert res.get("level", "warning") in ("none", "note", "warning", "error")
            if "ruleIndex" in res:
                assert 0 <= res["ruleIndex"] < len(rules) and rules[res["ruleIndex"]]["id"] == res["ruleId"]
            for loc in res.get("locations", []) + res.get("relatedLocations", []):
                phys = loc["physicalLocation"]
                assert isinstance(phys["artifactLocation"]["uri"], str) and phys["artifactLocation"]["uri"]
                region = phys.get("region")
                if region is not None:
                    assert region["startLine"] >= 1 and region.get("startColumn", 1) >= 1
                    assert region.get("endLine", region["startLine"]) >= region["startLine"]
                    if region.get("endLine", region["startLine"]) == region["startLine"] and "endColumn" in region:
                        assert region["endColumn"] >= region.get("startColumn", 1)
            for rl in res.get("relatedLocations", []):
                assert isinstance(rl.get("id", 0), int) and rl.get("id", 0) >= 0


def test_sarif_has_the_required_fields_and_file_line_col_regions(proj):
    (proj / "sandbox.policy.yaml").write_text(BAD)
    r = sbxc("compile", "--check", "--format", "sarif", cwd=proj)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    validate_sarif(doc)
    results = doc["runs"][0]["results"]
    by_code = {x["ruleId"]: x for x in results}
    assert {"SBX012", "SBX013", "SBX040"} <= set(by_code)
    verb = by_code["SBX012"]
    assert verb["level"] == "error" and "wirte" in verb["message"]["text"]
    loc = verb["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "sandbox.policy.yaml"
    assert loc["region"]["startLine"] == 5 and loc["region"]["startColumn"] == 5
    assert by_code["SBX040"]["level"] == "warning"
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert sorted(x["id"] for x in rules) == sorted(by_code)


def test_sarif_validator_rejects_broken_documents():
    """Control: the structural check above can fail."""
    good = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "sbxc", "rules": [{"id": "SBX001"}]}},
                                          "results": [{"ruleId": "SBX001", "ruleIndex": 0, "message": {"text": "m"},
                                                       "locations": [{"physicalLocation": {
                                                           "artifactLocation": {"uri": "a.yaml"},
                                                           "region": {"startLine": 1, "startColumn": 1}}}]}]}]}
    validate_sarif(good)
    for broken in (
        {**good, "version": "2.0.0"},
        {"version": "2.1.0", "runs": [{"tool": {"driver": {}}, "results": []}]},
        json.loads(json.dumps(good).replace('"startLine": 1', '"startLine": 0')),
        json.loads(json.dumps(good).replace('"ruleIndex": 0', '"ruleIndex": 3')),
        json.loads(json.dumps(good).replace('{"text": "m"}', '{}')),
    ):
        with pytest.raises((AssertionError, KeyError)):
            validate_sarif(broken)


def test_check_json_has_a_format_and_the_exit(proj):
    (proj / "sandbox.policy.yaml").write_text(BAD)
    r = sbxc("compile", "--check", "--format", "json", cwd=proj)
    data = json.loads(r.stdout)
    assert r.returncode == 1 and data["format"] == "sbxc-check/1" and data["exit"] == 1
    assert {d["code"] for d in data["diagnostics"]} >= {"SBX012", "SBX013"}


def test_sarif_needs_check(proj):
    r = sbxc("compile", "--format", "sarif", cwd=proj)
    assert r.returncode == 2 and "needs --check" in r.stderr


def test_doctor_json(tmp_path):
    r = sbxc("doctor", "--format", "json", "--root", str(tmp_path / "root"))
    data = json.loads(r.stdout)
    assert r.returncode == data["exit"] and data["format"] == "sbxc-doctor/1"
    assert {"host", "capabilities", "linux_backend_works", "backend_auto", "caches"} <= set(data)
    assert data["caches"][0]["root"] == str(tmp_path / "root") and data["caches"][0]["projects"] == []
    names = [c["name"] for c in data["capabilities"]]
    assert "seccomp" in names and "user namespaces" in names
    assert sbxc("doctor", "--root", "relative").returncode == 2


# ------------------------------------------------------------------ explain

def test_explain_names_the_rule_and_each_backend(proj):
    (proj / "secret").mkdir()
    (proj / "secret" / "k").write_text("x")
    (proj / "sandbox.policy.yaml").write_text(POLICY + "filesystem:\n  - mask {project}/secret\n")
    r = sbxc("explain", "secret/k", cwd=proj)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("rule: sandbox.policy.yaml:5:10: mask {project}/secret")
    assert any(l.startswith("  bwrap (selected):") and "not there" in l for l in lines)
    assert any(l.strip().startswith("the rule is partial here: Landlock cannot hide names") for l in lines)
    data = json.loads(sbxc("explain", "secret/k", "--format", "json", cwd=proj).stdout)
    assert data["format"] == "sbxc-explain/1" and data["access"] == "mask"
    assert data["rule"]["span"] == f"{proj}/sandbox.policy.yaml:5:10"
    assert set(data["backends"]) == set(BACKENDS)
    assert all(not b["read"] for b in data["backends"].values())
    w = json.loads(sbxc("explain", str(proj), "--format", "json", cwd=proj).stdout)
    assert w["access"] == "write" and w["rule"]["text"] == "write {project}"


def test_explain_exits(proj):
    assert sbxc("explain", cwd=proj).returncode == 2
    (proj / "sandbox.policy.yaml").write_text("sbxc: 1\nhome: hiden\n")
    r = sbxc("explain", "/etc", cwd=proj)
    assert r.returncode == 1 and "[SBX013]" in r.stderr


def test_exec_without_options_reads_as_the_grammar_reads_it():
    """``exec -- CMD...`` skips building exec's option table; what it gives is what the
    grammar gives for the same words, and every other form still goes through the grammar."""
    from sbxc.commands import _grammar
    from sbxc.commands import exec as exec_cmd

    for argv in (["--", "x"], ["--", "x", "--policy", "p"], ["--", "--"], ["--", "-h"], ["--", "sh", "-c", "exit 3"]):
        fast = exec_cmd.parse_args(list(argv))
        slow = exec_cmd.Args(_grammar.parse(_grammar.EXEC, list(argv)))
        assert {k: getattr(fast, k) for k in exec_cmd.Args.__slots__} == \
               {k: getattr(slow, k) for k in exec_cmd.Args.__slots__}, argv
    assert exec_cmd.parse_args(["--help"]) is None
    assert exec_cmd.parse_args(["--backend", "bwrap", "--", "x"]).backend == "bwrap"
