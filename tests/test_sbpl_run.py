"""The sandbox-exec runner, checked on Linux with a stand-in for /usr/bin/sandbox-exec.

What a real Mac does with the profile is not tested here (see docs/macos.md); this checks
the argv, the parameters, the private folders and the fail-closed paths.
"""
import os
import stat
import subprocess
import sys

import pytest

from sbxc.backends.sbpl import lower
from sbxc.planfile import build
from sbxc.runtime import sbpl_run
from sbxc.runtime.errors import Refusal
from sbxc.runtime.launch import Context

from test_sbpl_backend import HOST, PROJ, default_like, make_plan, rule


class FakeCache:
    def __init__(self, d):
        self.dir = d


def _pf(plan):
    low = lower(plan, HOST)
    return build(plan, HOST, "sandbox-exec", low.data, low.verdicts)


@pytest.fixture
def fake_sandbox_exec(tmp_path, monkeypatch):
    exe = tmp_path / "sandbox-exec"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sbpl_run, "SANDBOX_EXEC", str(exe))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return str(exe)


def _ctx(cache_dir=None):
    return Context(project=PROJ, cwd=PROJ, uid=501, is_root=False, network="on",
                   cache=FakeCache(cache_dir) if cache_dir else None, plans_dir="/nowhere", warn=print)


def test_argv_profile_and_parameters(fake_sandbox_exec, tmp_path):
    pf = _pf(default_like())
    cache = tmp_path / "cache"
    cache.mkdir()
    spec = sbpl_run.prepare(pf, ["make", "-j4"], {"PATH": "/usr/bin"}, _ctx(str(cache)))
    try:
        argv = spec.argv
        assert argv[0] == fake_sandbox_exec and argv[1] == "-f"
        assert open(argv[2]).read() == pf["lowered"]["profile"]
        assert stat.S_IMODE(os.stat(os.path.dirname(argv[2])).st_mode) == 0o700
        sep = argv.index("--")
        assert argv[sep + 1:] == ["make", "-j4"]
        d = dict(a.split("=", 1) for a in argv[3:sep] if a != "-D")
        assert argv[3:sep:2] == ["-D"] * (len(argv[3:sep]) // 2)
        assert d["SBXC_CACHE_DIR"] == os.path.realpath(str(cache))
        run_tmp = d["SBXC_RUN_TMP"]
        assert os.path.isdir(run_tmp) and stat.S_IMODE(os.stat(run_tmp).st_mode) == 0o700
        assert spec.env["TMPDIR"] == run_tmp + "/"
        assert not spec.exec_is_command
    finally:
        for fn in reversed(spec.cleanups):
            fn()
    assert not os.path.exists(argv[2])
    assert not os.path.exists(run_tmp)


def test_fixed_parameter_carries_the_exact_path(fake_sandbox_exec):
    weird = PROJ + "/a\nb"
    pf = _pf(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(weird, "mask")))
    spec = sbpl_run.prepare(pf, ["true"], {}, _ctx())
    try:
        assert f"SBXC_P0={weird}" in spec.argv
    finally:
        for fn in reversed(spec.cleanups):
            fn()


def test_plan_with_an_inexpressible_rule_refuses(fake_sandbox_exec):
    pf = _pf(make_plan(rule("/", "read"), rule(PROJ, "write"), rule(PROJ + "/\udcff", "mask")))
    with pytest.raises(Refusal) as e:
        sbpl_run.prepare(pf, ["true"], {}, _ctx())
    assert "cannot express" in e.value.cause


def test_missing_sandbox_exec_refuses(monkeypatch):
    monkeypatch.setattr(sbpl_run, "SANDBOX_EXEC", "/nonexistent/sandbox-exec")
    with pytest.raises(Refusal):
        sbpl_run.prepare(_pf(default_like()), ["true"], {}, _ctx())


def test_plan_without_profile_refuses(fake_sandbox_exec):
    pf = _pf(default_like())
    pf["lowered"]["profile"] = "(version 1)\n(allow default)\n"
    with pytest.raises(Refusal):
        sbpl_run.prepare(pf, ["true"], {}, _ctx())


def test_sandbox_exec_failures_are_told_from_the_command_status(fake_sandbox_exec, capsys):
    spec = sbpl_run.prepare(_pf(default_like()), ["true"], {}, _ctx())
    try:
        cs = spec.command_status
        assert cs(3, b"make: *** error\n") == 3
        assert cs(0, b"sandbox-exec: anything\n") == 0
        assert cs(71, b"sandbox-exec: execvp() of 'nope' failed: No such file or directory\n") == 127
        assert cs(71, b"sandbox-exec: execvp() of 'x' failed: Permission denied\n") == 126
        assert cs(65, b"sandbox-exec: unbound variable: foo\n") == 125
        assert "sbxc:" in capsys.readouterr().err
    finally:
        for fn in reversed(spec.cleanups):
            fn()


def test_cleanup_does_not_follow_links_planted_in_the_run_folder(fake_sandbox_exec, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    spec = sbpl_run.prepare(_pf(default_like()), ["true"], {}, _ctx())
    run_tmp = spec.env["TMPDIR"].rstrip("/")
    os.symlink(str(victim), os.path.join(run_tmp, "link"))
    os.mkdir(os.path.join(run_tmp, "d"))
    open(os.path.join(run_tmp, "d", "f"), "w").close()
    for fn in reversed(spec.cleanups):
        fn()
    assert not os.path.exists(run_tmp)
    assert (victim / "keep").exists()


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the Linux refusal")
def test_exec_with_sandbox_exec_backend_on_linux_exits_125(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\nextends: [builtin:default]\n")
    p = subprocess.run([sys.executable, "-m", "sbxc", "exec", "--backend", "sandbox-exec", "--", "true"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 125
    assert "needs macOS" in p.stderr


# ---------------------------------------------------------------------------------------
# Through the runtime core, with a stand-in sandbox-exec that checks its arguments and runs
# the command (no Seatbelt here: this checks the plumbing, not the confinement).

FAKE = r'''#!/bin/sh
# stand-in for /usr/bin/sandbox-exec: -f PROFILE, -D NAME=VALUE..., --, CMD...
# (it runs with the command's filtered environment, so its settings sit beside it)
here=$(dirname "$0"); SBXC_FAKE_LOG="$here/log"; SBXC_FAKE_FAIL=$(cat "$here/fail" 2>/dev/null)
[ "$1" = "-f" ] || { echo "sandbox-exec: usage" >&2; exit 64; }
prof="$2"; shift 2
head -2 "$prof" | tr '\n' ' ' | grep -q '^(version 1) (deny default) $' || { echo "sandbox-exec: bad profile" >&2; exit 65; }
: > "$SBXC_FAKE_LOG"
while [ "$1" = "-D" ]; do printf '%s\n' "$2" >> "$SBXC_FAKE_LOG"; shift 2; done
printf 'profile=%s\n' "$prof" >> "$SBXC_FAKE_LOG"
[ "$1" = "--" ] || { echo "sandbox-exec: no --" >&2; exit 64; }
shift
if [ -n "$SBXC_FAKE_FAIL" ]; then echo "sandbox-exec: $SBXC_FAKE_FAIL" >&2; exit 71; fi
exec "$@"
'''

DRIVER = r'''
import json, os, sys
sys.platform = "darwin"   # launch refuses this backend elsewhere; the stand-in takes its place
from sbxc.runtime import sbpl_run, launch
sbpl_run.SANDBOX_EXEC = os.environ["SBXC_FAKE"]
pf = json.load(open(sys.argv[1]))
sys.exit(launch.launch(pf, sys.argv[2:], os.environ, os.getcwd()))
'''


def _run_driver(tmp_path, cmd, fail=""):
    import json

    from sbxc.runtime.probe import probe_host

    host = probe_host(full=False)
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    plan = make_plan(rule("/", "read"), rule(str(proj), "write"), rule("/tmp", "tmpfs"))
    import dataclasses

    plan = dataclasses.replace(plan, project=str(proj), home=host.home, uid=host.uid)
    low = lower(plan, host)
    pf = build(plan, host, "sandbox-exec", low.data, low.verdicts)
    (tmp_path / "plan.json").write_text(json.dumps(pf))
    fake = tmp_path / "sandbox-exec"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    if fail:
        (tmp_path / "fail").write_text(fail)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    tmpdir = tmp_path / "t"
    tmpdir.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": host.home, "SBXC_FAKE": str(fake), "TMPDIR": str(tmpdir), "SBXC_ROOT": os.environ["SBXC_ROOT"],
           "PYTHONPATH": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")}
    p = subprocess.run([sys.executable, str(driver), str(tmp_path / "plan.json"), *cmd], cwd=proj, env=env,
                       capture_output=True, text=True, timeout=60)
    return p, tmpdir, tmp_path / "log"


@pytest.mark.skipif(sys.platform == "darwin", reason="uses a stand-in for sandbox-exec")
def test_through_launch_status_tmpdir_and_cleanup(tmp_path):
    p, tmpdir, log = _run_driver(tmp_path, ["sh", "-c", 'echo "$TMPDIR" > "$PWD/seen"; touch "$TMPDIR/x"; exit 7'])
    assert p.returncode == 7, p.stderr
    seen = (tmp_path / "proj" / "seen").read_text().strip()
    assert seen.startswith(os.path.realpath(str(tmpdir)) + "/sbxc-run-")
    lines = log.read_text().splitlines()
    assert any(l.startswith("SBXC_RUN_TMP=" + seen.rstrip("/")) for l in lines)
    # the per-run folder and the profile are gone afterwards
    assert not os.path.exists(seen)
    prof = [l for l in lines if l.startswith("profile=")][0][len("profile="):]
    assert not os.path.exists(prof)
    assert os.listdir(tmpdir) == []


@pytest.mark.skipif(sys.platform == "darwin", reason="uses a stand-in for sandbox-exec")
@pytest.mark.parametrize("fail,code", [
    ("execvp() of 'nope' failed: No such file or directory", 127),
    ("sandbox_apply: Operation not permitted", 125),
])
def test_through_launch_sandbox_exec_failures(tmp_path, fail, code):
    p, tmpdir, _ = _run_driver(tmp_path, ["true"], fail=fail)
    assert p.returncode == code, p.stderr
    if code == 125:
        assert "sbxc: sandbox-exec refused the profile or could not apply it" in p.stderr
    assert os.listdir(tmpdir) == []


def test_tmpdir_from_env_set_is_kept(fake_sandbox_exec):
    pf = _pf(default_like())
    pf["runtime"]["env_set"] = [["TMPDIR", PROJ + "/.tmp"]]
    spec = sbpl_run.prepare(pf, ["true"], {"TMPDIR": PROJ + "/.tmp"}, _ctx())
    try:
        assert spec.env["TMPDIR"] == PROJ + "/.tmp"
        assert any(a.startswith("SBXC_RUN_TMP=") for a in spec.argv)
    finally:
        for fn in reversed(spec.cleanups):
            fn()
