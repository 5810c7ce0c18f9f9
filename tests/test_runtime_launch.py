"""Runtime core pieces that need no sandbox: flags, globs, environment, refusal lines,
bwrap message mapping, path re-checks, the hint scanner, and the hot path's imports."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sbxc.commands import exec as exec_cmd
from sbxc.runtime import errors, launch, planload, staleness, supervise
from sbxc.runtime.errors import Refusal


def test_parse_args_command_after_dashdash_is_untouched():
    a = exec_cmd.parse_args(["--policy", "p.yaml", "--network=false", "--", "--bind", "/", "/x"])
    assert a.policy == "p.yaml" and a.network == "off" and a.cmd == ["--bind", "/", "/x"]
    a = exec_cmd.parse_args(["--plan=f.json", "--backend", "bwrap", "echo", "--network"])
    assert a.plan == "f.json" and a.backend == "bwrap" and a.cmd == ["echo", "--network"] and a.network is None
    assert exec_cmd.parse_args(["--network", "--", "x"]).network == "on"
    assert exec_cmd.parse_args(["--network=TRUE", "--", "x"]).network == "on"


@pytest.mark.parametrize("argv", [
    [], ["--policy"], ["--policy", "a", "--plan", "b", "--", "x"], ["--network=maybe", "--", "x"],
    ["--backend", "docker", "--", "x"], ["--frobnicate", "--", "x"], ["--session", "s1", "--ephemeral", "--", "x"],
])
def test_parse_args_refusals(argv):
    with pytest.raises(Refusal):
        exec_cmd.parse_args(argv)


@pytest.mark.parametrize("pat,name,ok", [
    ("LC_*", "LC_ALL", True), ("LC_*", "LC_", True), ("LC_*", "XLC_ALL", False),
    ("A?C", "ABC", True), ("A?C", "AC", False), ("*TOKEN*", "GITHUB_TOKEN", True),
    ("*", "", True), ("", "", True), ("A*B*C", "AxxBxxC", True), ("A*B*C", "AxxBxx", False),
    ("PATH", "PATH", True), ("PATH", "PATHX", False),
])
def test_glob_match(pat, name, ok):
    assert launch.glob_match(pat, name) is ok


def test_build_env_order_and_filtering():
    rt = {"env_pass": ["PATH", "LC_*"], "env_set": [["CI", "1"], ["PATH", "/set"]]}
    host = {"PATH": "/host", "LC_ALL": "C", "GITHUB_TOKEN": "secret", "LCX": "no"}
    env = launch.build_env(rt, host, [("PIP_CACHE_DIR", "/c/pip"), ("CI", "cache")])
    assert env == {"PATH": "/set", "LC_ALL": "C", "PIP_CACHE_DIR": "/c/pip", "CI": "1"}


def test_refusal_line_is_one_printable_line():
    line = Refusal("bad\npath\x1b[31m", "fix\tit").line()
    assert line.startswith("sbxc: ") and "\n" not in line and "\x1b" not in line and "; fix it" in line


@pytest.mark.parametrize("msg,word", [
    ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.", "user namespace"),
    ("bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.", "user namespace"),
    ("bwrap: Creating new namespace failed: Operation not permitted", "namespace"),
    ("bwrap: setting up uid map: Permission denied", "uid"),
    ("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted", "loopback"),
    ("bwrap: Failed to make / slave: Permission denied", "mount namespace"),
    ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", "/proc"),
    ("something odd", "bwrap failed"),
])
def test_bwrap_failure_mapping(msg, word):
    cause, fix = errors.bwrap_failure(msg + "\n")
    assert word in cause and fix


def test_recheck_paths(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    f = tmp_path / "f"
    f.write_text("x")
    staleness.recheck_paths([[str(d), "dir", "read"], [str(f), "file", "mask"]])
    with pytest.raises(Refusal, match="now a file"):
        staleness.recheck_paths([[str(f), "dir", "read"]])
    with pytest.raises(Refusal, match="no longer exists"):
        staleness.recheck_paths([[str(tmp_path / "gone"), "dir", "read"]])
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(Refusal, match="symlink"):
        staleness.recheck_paths([[str(link), "dir", "read"]])
    (d / "sub").mkdir()
    real = tmp_path / "real"
    d.rename(real)
    (tmp_path / "d").symlink_to(real)
    with pytest.raises(Refusal, match="on the way"):
        staleness.recheck_paths([[str(tmp_path / "d" / "sub"), "dir", "read"]])


def test_host_mismatch():
    env = {"HOME": "/home/x"}
    u = os.uname()
    facts = {"platform": "linux" if u.sysname == "Linux" else "darwin", "arch": u.machine, "uid": os.getuid(), "home": "/home/x"}
    assert staleness.host_mismatch(facts, env) == ""
    assert "uid" in staleness.host_mismatch(dict(facts, uid=os.getuid() + 1), env)
    assert "home" in staleness.host_mismatch(dict(facts, home="/elsewhere"), env)
    assert staleness.host_mismatch(dict(facts, arch="sparc"), env)


def test_launch_refuses_sandbox_exec_on_linux(capsys):
    if sys.platform == "darwin":
        pytest.skip("Linux only")
    rc = launch.launch({"format": "sbxc-plan/1", "backend": "sandbox-exec", "host": {}, "runtime": {}}, ["true"], {}, "/")
    assert rc == 125 and "needs macOS" in capsys.readouterr().err


def test_hint_is_a_constant_line():
    from sbxc.runtime import hint

    assert hint.NETWORK_HINT.endswith("\n") and hint.NETWORK_HINT.count("\n") == 1
    assert all(p == p.lower() for p in hint.NETWORK_PATTERNS)


def test_exec_hot_path_imports():
    code = ("import sys, sbxc.cli, sbxc.commands.exec, sbxc.runtime.launch, sbxc.runtime.plancache, sbxc.runtime.bwrap_run, "
            "sbxc.runtime.cachedir, sbxc.runtime.errors, sbxc.runtime.landlock_run, sbxc.runtime.supervise, "
            "sbxc.runtime.staleness, sbxc.runtime.planstore, sbxc.runtime.planload, sbxc.discovery\n"
            "bad = [m for m in ('re', 'json', 'argparse', 'subprocess', 'dataclasses', 'fnmatch', 'yaml', 'lark', "
            "'pyseccomp', 'hashlib', 'enum', 'signal') if m in sys.modules]\nprint(','.join(bad))")
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "", p.stdout


# ------------------------------------------------------------------ --plan: where the file lies

def _plan_at(folder, mode=0o644):
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "plan.json"
    p.write_text("{}")
    os.chmod(p, mode)
    return str(p)


def test_plan_location_ok_outside_the_current_folder(tmp_path):
    plan = _plan_at(tmp_path / "plans")
    planload.check_plan_location(os.path.realpath(plan), str(tmp_path / "project"))


def test_plan_location_refusals(tmp_path):
    real = os.path.realpath
    with pytest.raises(Refusal, match="current folder's tree"):
        planload.check_plan_location(real(_plan_at(tmp_path / "proj" / "sub")), real(str(tmp_path / "proj")))
    with pytest.raises(Refusal, match="writable by others"):
        planload.check_plan_location(real(_plan_at(tmp_path / "gw", 0o664)), "/nonexistent")
    shared = tmp_path / "shared"
    plan = _plan_at(shared)
    os.chmod(shared, 0o777)  # writable by others, not sticky: anyone could swap the file
    with pytest.raises(Refusal, match="writable by others and not sticky"):
        planload.check_plan_location(real(plan), "/nonexistent")
    os.chmod(shared, 0o1777)  # sticky: the caller's own file in it is fine
    planload.check_plan_location(real(plan), "/nonexistent")
    with pytest.raises(Refusal, match="not a plan file"):
        planload.check_plan_location(real(str(tmp_path)), "/nonexistent")


@pytest.mark.root_only  # giving a file to another user
def test_plan_location_other_owner(tmp_path):
    plan = _plan_at(tmp_path / "theirs")
    os.chown(plan, 65534, 65534)
    with pytest.raises(Refusal, match="owned by uid 65534"):
        planload.check_plan_location(os.path.realpath(plan), "/nonexistent")
    os.chown(plan, 0, 0)
    os.chown(tmp_path / "theirs", 65534, 65534)
    with pytest.raises(Refusal, match="on the way to the plan"):
        planload.check_plan_location(os.path.realpath(plan), "/nonexistent")


def test_recheck_paths_folders_checked_once_still_see_every_link(tmp_path):
    """The folders on the way are looked at once per check for all rules: a link deeper on
    the way of a later rule, below folders an earlier rule passed, is still found; and a
    refusal names the rule of the path it is about."""
    (tmp_path / "a" / "ok").mkdir(parents=True)
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "b").symlink_to(tmp_path / "real")
    ok = [str(tmp_path / "a" / "ok"), "dir", "read", "/p/sandbox.policy.yaml:5:7", "/x/ok"]
    bad = [str(tmp_path / "a" / "b" / "sub"), "dir", "write", "/p/sandbox.policy.yaml:6:9", "{project}/b/sub"]
    staleness.recheck_paths([ok])
    with pytest.raises(Refusal) as e:
        staleness.recheck_paths([ok, bad], "/p")
    assert "on the way to" in e.value.cause and 'rule sandbox.policy.yaml:6:9 "write {project}/b/sub"' in e.value.cause
    # control: resolved one by one, as realpath does, the answer is the same
    assert os.path.realpath(bad[0]) != bad[0] and os.path.realpath(ok[0]) == ok[0]


# A child's stderr relayed by supervise.run, then a line of sbxc's own: written by the
# core (feedback), or by the runner (command_status, as bwrap_run words a failure after
# bwrap's own cut message). argv[1]: what the child prints on stderr.
_RELAY = r"""
import sys
from sbxc.runtime import supervise
from sbxc.runtime.spec import LaunchSpec
def status(rc, first):
    supervise.own_line("sbxc: the runner's line\n")
    return rc
spec = LaunchSpec(["/bin/sh", "-c", 'printf "%s" "$1" >&2; exit 3', "sh", sys.argv[1]], {"PATH": "/usr/bin:/bin"},
                  command_status=status)
from sbxc.runtime.runstatus import _Tee
recorded = []
sys.stderr = _Tee(sys.stderr, recorded)  # as --format json records sbxc's lines
rc = supervise.run(spec, False, feedback=lambda rc, scan: "sbxc: the core's line\n")
sys.stderr.flush()
print(repr([line for line in recorded if line]))
sys.exit(rc)
"""


@pytest.mark.parametrize("printed", ["bwrap: ", "done\n", ""])
def test_sbxc_lines_after_the_relayed_output_start_a_line(printed):
    """Each of sbxc's own lines after the command's stderr starts on a line of its own,
    also when that output ended mid-line (a message of two writers cut off: "bwrap: ");
    none is added after output that ended its line, or after none."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    p = subprocess.run([sys.executable, "-c", _RELAY, printed], env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, p
    want = printed + ("\n" if printed and not printed.endswith("\n") else "")
    assert p.stderr == want + "sbxc: the runner's line\nsbxc: the core's line\n", p.stderr
    # --format json's record of sbxc's lines holds each once, and nothing of the command's.
    assert p.stdout == repr(["sbxc: the runner's line", "sbxc: the core's line"]) + "\n", p.stdout


_HELD = r"""
import os, sys
from sbxc.runtime import supervise
from sbxc.runtime.spec import LaunchSpec
marker, after = sys.argv[1], sys.argv[2]
script = ('printf "cp: cannot create /etc/x: Permission denied\\n" >&2; sleep 0.2; : > "$1"; sleep 0.2; '
          'printf "%s" "$2" >&2; exit 1')
spec = LaunchSpec(["/bin/sh", "-c", script, "sh", marker, after], {"PATH": "/usr/bin:/bin"},
                  started=lambda: os.path.exists(marker))
rc = supervise.run(spec, False, feedback=lambda rc, scan: f"sbxc: read {scan.denials!r}\n")
sys.exit(rc)
"""


@pytest.mark.parametrize("after", ["", "more: Permission denied\n"])
def test_stderr_held_until_the_start_is_seen_is_read_for_the_hints(tmp_path, after):
    """A runner that tells the command's start by a file (runc's pid file) can see it only
    after the command wrote to stderr: what was held until then is relayed and read as
    the rest, whether more comes after the start (held, then released in the relay) or
    not (all of it held to the end). Before, the held part reached the terminal unread:
    the hint for a refused path after the run went missing at random on OCI."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    p = subprocess.run([sys.executable, "-c", _HELD, str(tmp_path / "started"), after],
                       env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p
    assert p.stderr.startswith("cp: cannot create /etc/x: Permission denied\n" + after), p.stderr
    read = p.stderr.splitlines()[-1]
    assert read.startswith("sbxc: read [") and "/etc/x" in read, p.stderr


def test_a_plan_that_names_a_fifo_or_a_device_is_never_opened(tmp_path):
    """``--plan`` may name a file where a sandboxed command writes, which it can swap for a
    link to a FIFO or a device: the name is looked at through ``O_PATH`` and refused, never
    opened (a FIFO held sbxc until a writer came; a device's open runs its driver)."""
    import threading

    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "plan.json"
    link.symlink_to(fifo)
    got = []

    def load():
        try:
            planload.load_planfile(str(link))
        except errors.Refusal as r:
            got.append(r.line())

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5)
    held = t.is_alive()
    if held:
        # Still in its open of the FIFO, waiting for a writer: one lets it go, so the test ends.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
    assert not held, "sbxc opened the FIFO and waited for a writer"
    assert got and "is not a plan file" in got[0], got
    with pytest.raises(errors.Refusal, match="is not a plan file"):
        planload.load_planfile("/dev/null")  # a character device: looked at, not opened
