"""``sbxc session``'s command line, read with the one command table (``_args.SESSION``):
the parse results as session.py gets them, and the usage errors and help of the real
command (exit 2 with one line naming the choices; help exit 0)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sbxc.commands import _args

VERBS = {c.name: c for c in _args.SESSION.subcommands}


def sbxc(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def parse(verb, *argv):
    return _args.parse(VERBS[verb], list(argv))


def test_session_is_in_the_table():
    assert _args.BY_NAME["session"] is _args.SESSION
    assert list(VERBS) == ["start", "list", "diff", "apply", "stop", "drop"]
    assert "session" in _args.HELP_CMD.positionals[0].choices


def test_start_options():
    got = parse("start", "--policy", "p.yaml", "--from=snap", "--format", "json")
    assert got["policy"] == "p.yaml" and got["snapshot"] == "snap" and got["format"] == "json"
    assert got["stage"] == []


def test_repeated_stage_keeps_every_value_in_order():
    got = parse("start", "--stage", "a:x", "--stage=b:y", "--stage", "a:x")
    assert got["stage"] == ["a:x", "b:y", "a:x"]


def test_repeated_plain_flag_with_another_value_is_still_a_usage_error():
    with pytest.raises(_args.Usage, match="disagree"):
        parse("start", "--format", "json", "--format", "text")
    with pytest.raises(_args.Usage, match="disagree"):
        parse("stop", "ID", "--snapshot", "a", "--snapshot", "b")


def test_apply_takes_paths_after_the_id():
    assert parse("apply", "s1")["paths"] == []
    got = parse("apply", "s1", "README", "src/x.py", "--format", "json")
    assert got["id"] == "s1" and got["paths"] == ["README", "src/x.py"] and got["format"] == "json"
    got = parse("apply", "--format=json", "s1", "--", "--odd-name")
    assert got["id"] == "s1" and got["paths"] == ["--odd-name"]


@pytest.mark.parametrize("verb", ["diff", "apply", "stop"])
def test_missing_id(verb):
    with pytest.raises(_args.Usage, match="ID is missing"):
        parse(verb)


def test_stray_words():
    with pytest.raises(_args.Usage, match="unexpected argument 'b'"):
        parse("diff", "a", "b")
    with pytest.raises(_args.Usage, match="takes none"):
        parse("list", "x")


def test_exec_rest_is_unchanged_by_the_variadic_positional():
    got = _args.parse(_args.EXEC, ["--network=false", "make", "-j2", "--network"])
    assert got["cmd"] == ["make", "-j2", "--network"]


# ------------------------------------------------------------------ the real command


@pytest.mark.parametrize("argv,want", [
    (["session", "start", "--bogus"],
     "sbxc session start: unknown option '--bogus' for start (choose from: --policy, --from, --stage, --format, "
     "--help)"),
    (["session", "start", "--format", "xml"], "sbxc session start: --format 'xml': choose from text, json"),
    (["session", "list", "--format=yaml"], "'--format=yaml': --format takes one of text, json"),
    (["session", "diff"], "sbxc session diff: ID is missing"),
    (["session", "stop"], "sbxc session stop: ID is missing"),
    (["session", "drop"], "sbxc session drop: SNAPSHOT is missing"),
    (["session", "stop", "s1", "--from", "x"], "unknown option '--from' for stop"),
    (["session", "start", "--stage", "nocolon"], "sbxc session start: --stage 'nocolon' is not SRC:DEST"),
    (["session", "start", "--stage", ":dest"], "--stage ':dest' is not SRC:DEST"),
    (["session", "strat"], "unknown subcommand 'strat'; did you mean start? (choose from: start, list, diff, "
     "apply, stop, drop)"),
    (["session"], "a subcommand is needed first (choose from: start, list, diff, apply, stop, drop)"),
])
def test_usage_errors_exit_2_with_one_line(argv, want, tmp_path):
    r = sbxc(*argv, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and want in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_stage_value_is_made_absolute_from_the_current_folder(monkeypatch, tmp_path):
    from sbxc.commands import session

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert session._stage_arg("cfg/a.toml:.tool/a.toml") == (str(tmp_path / "cfg/a.toml"), ".tool/a.toml")
    assert session._stage_arg("~/x:y") == (str(tmp_path / "home/x"), "y")
    # the last colon splits: a source path may hold one
    assert session._stage_arg("/a:b:c") == ("/a:b", "c")


def test_list_format_json_on_an_empty_store(tmp_path):
    import json

    env = dict(os.environ, SBXC_ROOT=str(tmp_path / "root"))
    r = subprocess.run([sys.executable, "-m", "sbxc", "session", "list", "--format", "json"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"sessions": [], "snapshots": [], "pool": []}
    r = subprocess.run([sys.executable, "-m", "sbxc", "session", "list", "--format=text"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout == "no sessions or snapshots\n", r.stderr


@pytest.mark.parametrize("argv", [["help", "session"], ["session", "--help"], ["session", "-h"]])
def test_session_help_lists_every_verb_its_options_and_exit_codes(argv):
    r = sbxc(*argv)
    assert r.returncode == 0, r.stderr
    for word in ("start", "list", "diff", "apply", "stop", "drop", "--policy P", "--from SNAPSHOT",
                 "--stage SRC:DEST", "--format FORMAT", "--snapshot NAME", "ID", "PATH...", "SNAPSHOT",
                 "exit status:", "0 ", "1 refused", "2 usage error", "3 sbxc itself broke"):
        assert word in r.stdout, (word, r.stdout)


@pytest.mark.parametrize("argv", [["help", "session", "start"], ["session", "start", "--help"]])
def test_session_start_help(argv):
    r = sbxc(*argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: sbxc session start [--policy P] [--from SNAPSHOT] [--stage SRC:DEST]... "
                               "[--format FORMAT]\n")
    for word in ("(repeatable)", "(text|json)", "0 started", "1 refused", "2 usage error"):
        assert word in r.stdout, (word, r.stdout)


def test_help_session_unknown_verb():
    r = sbxc("help", "session", "begin")
    assert r.returncode == 2 and "unknown subcommand of session 'begin'" in r.stderr
