"""The command dispatcher: usage, unknown commands, and a reader that goes away."""
import subprocess
import sys


def sbxc(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, **kw)


def test_no_arguments_is_a_usage_error():
    r = sbxc()
    assert r.returncode == 2 and "usage: sbxc" in r.stdout


def test_help_exits_zero_and_says_sessions_are_not_in_this_version():
    r = sbxc("--help")
    assert r.returncode == 0
    assert "session" in r.stdout and "not part of this version" in r.stdout


def test_unknown_command():
    r = sbxc("wirte")
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_closed_pipe_gives_no_traceback():
    # `sbxc schema | head -0`: the reader is gone before sbxc writes; no traceback.
    import os

    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "sbxc", "schema"], stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    err = p.stderr.decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert p.returncode == 141


def test_compile_alone_prints_the_plan(tmp_path):
    import json

    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\nextends: [builtin:default]\n")
    r = sbxc("compile", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["format"] == "sbxc-plan/1"


def test_exec_help_exits_zero_and_runs_nothing(tmp_path):
    r = sbxc("exec", "--help", "--", "touch", str(tmp_path / "ran"), cwd=tmp_path)
    assert r.returncode == 0 and "usage: sbxc exec" in r.stdout
    assert not (tmp_path / "ran").exists()
