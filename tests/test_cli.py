"""The command dispatcher: usage, unknown commands, and a reader that goes away."""
import subprocess
import sys


def sbxc(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, **kw)


def test_no_arguments_is_a_usage_error():
    r = sbxc()
    assert r.returncode == 2 and "usage: sbxc" in r.stdout


def test_help_exits_zero_and_lists_sessions():
    r = sbxc("--help")
    assert r.returncode == 0
    assert "session start|list|diff|apply|stop" in r.stdout and "--ephemeral" in r.stdout


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


# ------------------------------------------------------------------ sbxc's own bugs: exit 3

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\n"


def _policy(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text(POLICY)
    return str(tmp_path / "sandbox.policy.yaml")


def _broken_backend(monkeypatch):
    from sbxc.backends import bwrap

    def lower(_plan, _host):
        raise RuntimeError("a bug in the backend")

    monkeypatch.setattr(bwrap, "lower", lower)


def test_a_backend_that_raises_is_an_internal_error_not_a_policy_error(tmp_path, monkeypatch, capsys):
    from sbxc.cli import main

    path = _policy(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "--check", path]) == 0  # control: the policy itself is fine
    capsys.readouterr()
    _broken_backend(monkeypatch)
    assert main(["compile", "--check", path]) == 3
    out = capsys.readouterr()
    assert "sbxc: internal error: the bwrap backend failed (RuntimeError: a bug in the backend); please report this" \
        in out.err
    assert "SBX052" not in out.out + out.err and "Traceback" not in out.err
    assert "landlock" in out.out  # the other backends' reports are still there
    plan = tmp_path / "plan.json"
    assert main(["compile", path, "-o", str(plan)]) == 3
    assert not plan.exists()  # no plan from a backend that failed
    capsys.readouterr()
    assert main(["compile", "--check", "--format", "json", path]) == 3
    assert '"exit": 3' in capsys.readouterr().out


def test_an_unexpected_exception_is_one_line_and_exit_3(tmp_path, monkeypatch, capsys):
    from sbxc.cli import main
    from sbxc.runtime import probe

    path = _policy(tmp_path)
    monkeypatch.chdir(tmp_path)

    def probe_host(*_a, **_kw):
        raise KeyError("boom")

    monkeypatch.setattr(probe, "probe_host", probe_host)
    for argv in (["compile", "--check", path], ["print-config"], ["doctor"], ["cache", "path"]):
        rc = main(argv)
        err = capsys.readouterr().err
        if argv[0] == "cache":
            # sbxc cache keeps working when the policy cannot be compiled (a broken policy
            # must not keep anyone from finding a cache): no exception reaches the top
            assert rc == 0, err
            continue
        assert rc == 3, (argv, err)
        assert err.strip().splitlines()[-1] == "sbxc: internal error: KeyError: 'boom'; please report this", (argv, err)
        assert "Traceback" not in err


def test_schema_bug_is_exit_3(monkeypatch, capsys):
    from sbxc.cli import main
    from sbxc.compiler import settings

    def json_schema():
        raise ValueError("no schema")

    monkeypatch.setattr(settings, "json_schema", json_schema)
    assert main(["schema"]) == 3
    assert capsys.readouterr().err == "sbxc: internal error: ValueError: no schema; please report this\n"


def test_a_policy_with_errors_stays_exit_1(tmp_path, capsys):
    from sbxc.cli import main

    (tmp_path / "p.yaml").write_text("sbxc: 1\nfilesystem:\n  - wirte /tmp\n")
    assert main(["compile", "--check", str(tmp_path / "p.yaml")]) == 1
