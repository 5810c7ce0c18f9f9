"""``sbxc doctor`` and ``sbxc cache path|clear``."""
import os
import shlex
import subprocess
import sys

import pytest

from sbxc import cache
from sbxc.commands import doctor
from sbxc.hostfacts import HostFacts
from sbxc.runtime import cachedir, probe

UID = os.getuid()
SBXC = [sys.executable, "-m", "sbxc"]


SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))


def sbxc(*args, cwd=None):
    return subprocess.run(SBXC + list(args), capture_output=True, text=True, cwd=cwd, timeout=120, env=ENV)


def du_k(path):
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def make_cache(root, project):
    d = cache.project_dir(str(root), str(project))
    c = {"enabled": True, "root": str(root), "dir": d, "env": cache.cache_env(cache.DEFAULT_TOOLS, d)}
    setup = cachedir.prepare(c, project=str(project))
    assert setup.warning is None
    return d


@pytest.fixture
def base(tmp_path):
    os.chmod(tmp_path, 0o700)
    return tmp_path


# --- host capabilities --------------------------------------------------------------------

@pytest.mark.parametrize("facts,works", [
    (dict(bwrap="", userns=False, landlock_abi=0), False),
    (dict(bwrap="/usr/bin/bwrap", userns=False, landlock_abi=0), False),
    (dict(bwrap="/usr/bin/bwrap", userns=True, landlock_abi=0), True),
    (dict(bwrap="", userns=False, landlock_abi=3), True),
])
def test_host_lines_say_what_works_and_why(facts, works):
    lines, ok = doctor.host_lines(HostFacts(**facts), "the reason")
    assert ok is works
    text = "\n".join(lines)
    for word in ("bwrap:", "user namespaces:", "landlock:", "seccomp:"):
        assert word in text
    assert "(the reason)" in text
    if not facts["bwrap"]:
        assert "not found" in text
    if not facts["landlock_abi"]:
        assert "landlock: no (" in text


def test_doctor_exits_1_when_no_linux_backend_works(monkeypatch, capsys, base):
    monkeypatch.setattr(probe, "probe_host", lambda environ, full=True: HostFacts(uid=UID, bwrap="", landlock_abi=0))
    monkeypatch.setattr(probe, "userns_works", lambda bwrap: (False, "bwrap is not installed"))
    assert doctor.main(["--root", str(base / "none")]) == 1
    out = capsys.readouterr().out
    assert "backend auto: none works here" in out


def test_doctor_on_this_host():
    host = probe.probe_host(os.environ, full=True)
    r = sbxc("doctor")
    works = (bool(host.bwrap) and host.userns) or host.landlock_abi > 0
    assert r.returncode == (0 if works else 1), r.stderr
    for word in ("bwrap:", "user namespaces:", "landlock:", "seccomp:", "backend auto:"):
        assert word in r.stdout
    if host.bwrap:
        assert host.bwrap_version and host.bwrap_version in r.stdout
        # The same probe as a compile's: what the report's line for host mounts rests on.
        want = "yes" if host.private_mounts else "no"
        assert f"  bwrap in a private mount namespace: {want} (" in r.stdout, r.stdout
    if host.landlock_abi:
        assert f"landlock: ABI {host.landlock_abi}" in r.stdout
    # The OCI backend's runtime, found by the runner's own trusted lookup (the set-up
    # installs Debian's runc).
    runc = probe.host_program("runc", os.environ)[0]
    assert runc, "scripts/setup installs runc"
    line = next(l for l in r.stdout.splitlines() if l.startswith("  runc: "))
    assert line.startswith(f"  runc: {runc}, version ") and "unknown" not in line, line


@pytest.mark.parametrize("uid,err,yes,runs", [
    (0, 0, True, True),
    (1000, 1, False, True),
    (0, 1, False, False),  # root without CAP_SYS_ADMIN: Landlock runs as root refuse
    (1000, 0, True, True),
])
def test_namespace_line_says_yes_or_no_and_why(uid, err, yes, runs):
    line, landlock_runs = doctor.namespace_line(uid, err)
    assert line.startswith("  landlock PID and IPC namespaces: " + ("yes (" if yes else "no ("))
    assert landlock_runs is runs
    if not yes:
        assert "Operation not permitted" in line
        assert ("refuse (exit 125)" in line) if uid == 0 else ("user namespace" in line and f"uid {uid}" in line)


def test_root_without_namespaces_has_no_landlock_backend():
    host = HostFacts(uid=0, bwrap="", userns=False, landlock_abi=7)
    assert doctor.host_lines(host, "why", ns_errno=0)[1] is True
    lines, ok = doctor.host_lines(host, "why", ns_errno=1)
    assert ok is False and any("namespaces: no (" in x for x in lines)


def test_doctor_namespace_line_matches_this_host():
    from sbxc.runtime.landlock_reaper import namespace_errno

    if probe.landlock_abi() <= 0:
        pytest.skip("no Landlock here: doctor prints no namespace line")
    err = namespace_errno()
    r = sbxc("doctor")
    line = next(x for x in r.stdout.splitlines() if "landlock PID and IPC namespaces:" in x)
    assert (": yes (" in line) is (err == 0), line
    if os.geteuid() != 0:
        assert err != 0 and ": no (" in line  # no user namespace, no CAP_SYS_ADMIN: see SECURITY.md


# --- caches in doctor ---------------------------------------------------------------------

def test_doctor_size_agrees_with_du_and_its_clear_command_empties(base):
    root = base / "root"
    project = base / "proj"
    project.mkdir()
    d = make_cache(root, project)
    with open(os.path.join(d, "pip", "wheel.whl"), "wb") as f:
        f.write(os.urandom(200_000))
    os.makedirs(os.path.join(d, "go", "mod", "x@v1"))
    with open(os.path.join(d, "go", "mod", "x@v1", "a.go"), "w") as f:
        f.write("package x\n" * 500)
    os.chmod(os.path.join(d, "go", "mod", "x@v1"), 0o555)
    r = sbxc("doctor", "--root", str(root))
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    i = lines.index(f"  {os.path.basename(d)}")
    block = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip() for ln in lines[i + 1:i + 5]}
    assert block["project"] == str(project)
    assert int(block["size"].split()[0]) == du_k(d) >= 200
    assert block["last used"].endswith("UTC")
    cmd = shlex.split(block["clear"])
    assert cmd[:3] == ["sbxc", "cache", "clear"] and "--project" in cmd
    r2 = subprocess.run(SBXC + cmd[1:], capture_output=True, text=True, timeout=60, env=ENV)
    assert r2.returncode == 0, r2.stderr
    assert os.listdir(d) == []
    assert du_k(d) <= 4  # the empty folder itself
    r3 = sbxc("doctor", "--root", str(root))
    assert f"size:      {du_k(d)} KiB" in r3.stdout


def test_doctor_lists_a_folder_without_marker_by_id(base):
    root = base / "root"
    d = make_cache(root, "/somewhere/gone")
    os.unlink(d + cache.MARKER_SUFFIX)
    r = sbxc("doctor", "--root", str(root))
    assert "project:   unknown (no marker)" in r.stdout
    clear = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("clear:")][0]
    assert f"--id {os.path.basename(d)}" in clear
    open(os.path.join(d, "f"), "w").close()
    r2 = subprocess.run(SBXC + shlex.split(clear.split(":", 1)[1])[1:], capture_output=True, text=True, env=ENV)
    assert r2.returncode == 0 and os.listdir(d) == []


def test_doctor_reports_an_unsafe_root(base):
    target = base / "t"
    target.mkdir()
    (base / "root").symlink_to(target)
    r = sbxc("doctor", "--root", str(base / "root"))
    assert "unsafe: cache root" in r.stdout and "is a symlink" in r.stdout


# --- cache path / clear -------------------------------------------------------------------

def test_cache_path_is_the_planned_folder(base):
    project = base / "proj"
    project.mkdir()
    (base / "link").symlink_to(project)
    r = sbxc("cache", "path", "--project", str(base / "link"), "--root", str(base / "root"))
    assert r.returncode == 0
    assert r.stdout.strip() == cache.project_dir(str(base / "root"), str(project))
    assert not os.path.exists(base / "root")  # asking creates nothing


def test_cache_path_defaults_to_the_default_root(base):
    project = base / "proj"
    project.mkdir()
    r = sbxc("cache", "path", cwd=project)
    assert r.returncode == 0
    assert r.stdout.strip() == cache.project_dir(cache.default_root(UID, os.environ), str(project))


def test_clear_never_follows_links_out(base):
    victim = base / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    project = base / "proj"
    project.mkdir()
    d = make_cache(base / "root", project)
    os.symlink(victim, os.path.join(d, "xdg", "link"))
    os.symlink(victim / "keep", os.path.join(d, "flink"))
    r = sbxc("cache", "clear", "--project", str(project), "--root", str(base / "root"))
    assert r.returncode == 0, r.stderr
    assert os.listdir(d) == [] and (victim / "keep").read_text() == "x"


def test_clear_refuses_a_symlinked_root_or_project(base):
    victim = base / "victim"
    victim.mkdir()
    project = base / "proj"
    project.mkdir()
    pid = cache.project_id(str(project))
    (victim / pid).mkdir()
    (victim / pid / "keep").write_text("x")
    (base / "root").symlink_to(victim)
    r = sbxc("cache", "clear", "--project", str(project), "--root", str(base / "root"))
    assert r.returncode == 1 and "symlink" in r.stderr
    assert (victim / pid / "keep").exists()
    os.unlink(base / "root")
    (base / "root").mkdir(mode=0o700)
    (base / "root" / pid).symlink_to(victim / pid)
    r = sbxc("cache", "clear", "--project", str(project), "--root", str(base / "root"))
    assert r.returncode == 1 and "symlink" in r.stderr
    assert (victim / pid / "keep").exists()


def test_clear_all_and_nothing_to_clear(base):
    root = base / "root"
    for name in ("a", "b"):
        (base / name).mkdir()
        d = make_cache(root, base / name)
        open(os.path.join(d, "f"), "w").close()
    r = sbxc("cache", "clear", "--all", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert os.listdir(root) == []
    r = sbxc("cache", "clear", "--all", "--root", str(base / "missing"))
    assert r.returncode == 0 and "nothing to clear" in r.stdout


@pytest.mark.parametrize("args", [["--id", "../x"], ["--id", ".."], ["--all", "--id", "x"], ["bogus"]])
def test_clear_usage_errors(base, args):
    r = sbxc("cache", "clear", "--root", str(base / "root"), *args)
    assert r.returncode == 2


def test_root_entries_that_are_not_project_caches_are_left_alone(base):
    root = base / "root"
    (base / "p").mkdir()
    make_cache(root, base / "p")
    (root / "plans").mkdir(mode=0o700)  # the plan cache shares the root
    (root / "plans" / "p-1").write_text("plan")
    r = sbxc("doctor", "--root", str(root))
    assert "  plans" not in r.stdout.splitlines()
    r = sbxc("cache", "clear", "--all", "--root", str(root))
    assert r.returncode == 0 and "cleared 1 project cache(s)" in r.stdout
    assert os.listdir(root) == ["plans"] and (root / "plans" / "p-1").exists()


@pytest.mark.parametrize("name,ok", [
    (cache.project_id("/x/y"), True), ("plans", False), ("a-0123456789abcdeg", False),
    ("-0123456789abcdef", False), ("a-0123456789abcdef.project", False), ("..", False),
])
def test_is_project_id(name, ok):
    assert cachedir.is_project_id(name) is ok


def test_doctor_lists_and_clear_all_removes_leftover_throwaways(base):
    name = f"{cachedir.THROWAWAY_PREFIX}{UID}-{os.urandom(8).hex()}"
    p = os.path.join(cachedir.THROWAWAY_BASES[0], name)
    os.makedirs(os.path.join(p, "x"))
    os.utime(p, (1, 1))
    try:
        r = sbxc("doctor", "--root", str(base / "root"))
        assert "leftover throwaway caches" in r.stdout and p in r.stdout
        r = sbxc("cache", "clear", "--all", "--root", str(base / "root"))
        assert r.returncode == 0 and "removed" in r.stdout
        assert not os.path.lexists(p)
    finally:
        if os.path.lexists(p):
            subprocess.run(["rm", "-rf", p])


def test_doctor_says_when_the_project_is_gone(base):
    root = base / "root"
    (base / "p").mkdir()
    make_cache(root, base / "p")
    os.rmdir(base / "p")
    r = sbxc("doctor", "--root", str(root))
    assert f"project:   {base / 'p'}  (gone: that folder no longer exists)" in r.stdout


def test_cache_path_notes_an_unsafe_folder(base):
    root = base / "root"
    root.mkdir()
    os.chmod(root, 0o755)
    (base / "p").mkdir()
    r = sbxc("cache", "path", "--project", str(base / "p"), "--root", str(root))
    assert r.returncode == 0
    assert r.stdout.strip() == cache.project_dir(str(root), str(base / "p"))
    assert "mode 0755" in r.stderr and "throwaway" in r.stderr
    assert sbxc("cache", "--help").returncode == 0


def test_relative_root_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    for cmd in (["doctor", "--root", "relative/root"], ["cache", "path", "--root", "relative/root"]):
        r = subprocess.run([sys.executable, "-m", "sbxc", *cmd], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "absolute path" in r.stderr
    assert not (tmp_path / "relative").exists()


def test_wide_mode_fix_does_not_tell_to_chmod_a_foreign_folder(tmp_path):
    import os

    from sbxc.runtime import cachedir

    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o755)
    try:
        cachedir.open_root(str(root), os.getuid(), create=False)
    except cachedir.Unsafe as e:
        text = e.fix
        assert "if it is a folder of sbxc's own" in text and "set cache.root" in text
    else:
        raise AssertionError("a 0755 root passed the checks")


def test_runc_line_says_when_the_watchers_sh_is_missing(tmp_path):
    """OCI runs need sh for their watcher: a PATH whose system folders hold runc but no sh
    makes doctor say that OCI runs are refused. Control: the real PATH has one."""
    runc = probe.host_program("runc", os.environ)[0]
    assert runc
    env = {"PATH": os.path.dirname(runc), "SBXC_SH": str(tmp_path / "no-such-sh")}
    line = doctor.runc_line(env)
    assert line.startswith(f"  runc: {runc}") and "no sh that sbxc may start" in line and "refused" in line, line
    assert "no sh" not in doctor.runc_line(os.environ)
