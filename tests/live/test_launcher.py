"""The installed command: ``VENV/bin/sbxc``, the launcher scripts/setup writes in place of
pip's console script (and the file the ``sbxc`` on PATH points at). Every other test runs
``python -m sbxc``; these run the command a user runs, and check that it behaves as the
module does (arguments, exit codes, standard streams), that its runs are sandboxed as
ever (seen from inside), that the hot path stays lean, and that no PYTHON* variable can
choose the code it runs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import PYTHON, SANDBOX_PYTHON, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

LAUNCHER = os.path.join(os.path.dirname(sys.executable), "sbxc")
POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"


def interpreter_line(path: str) -> list:
    """[interpreter, flags...] that the kernel (or sh, for long or spaced paths) runs."""
    with open(path) as f:
        first, second = f.readline().rstrip("\n"), f.readline().rstrip("\n")
    if first == "#!/bin/sh":
        # '''exec' 'PYTHON' -IS "$0" "$@"
        parts = second.split("'")
        return [parts[5]] + parts[6].split()[:1]
    assert first.startswith("#!"), first
    py, _, flags = first[2:].partition(" ")
    return [py] + ([flags] if flags else [])


@pytest.fixture(scope="session")
def launcher():
    if not os.path.exists(LAUNCHER):
        pytest.fail(f"{LAUNCHER} is missing: scripts/setup installs it")
    line = interpreter_line(LAUNCHER)
    if line[1:] != ["-IS"]:
        pytest.fail(f"{LAUNCHER} is not the launcher (runs {line}; pip's console script?): re-run scripts/setup")
    return LAUNCHER


def _same(a, b):
    return (a.rc, a.out, a.err) == (b.rc, b.out, b.err)


@pytest.mark.parametrize("args", [[], ["--version"], ["help"], ["no-such-command"], ["exec", "--help"],
                                  ["exec"], ["compile", "--check"]])
def test_launcher_answers_as_the_module(launcher, tmp_path, home, args):
    # A policy with an error: compile takes the cold path (YAML, Lark) through the
    # launcher's sys.path, and its diagnostic and status must be the module's.
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\nnetwork: maybe\n")
    env = base_env(home)
    via_launcher = run([launcher, *args], env=env, cwd=str(tmp_path))
    via_module = run(sbxc_argv(*args), env=env, cwd=str(tmp_path))
    assert _same(via_launcher, via_module), (via_launcher, via_module)
    if args == ["compile", "--check"]:
        assert via_launcher.rc == 1 and "sandbox.policy.yaml:2:" in via_launcher.out + via_launcher.err


def _landlock_abi() -> int:
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi()


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_exec_through_launcher_is_sandboxed(launcher, bwrap_works, project, home, tmp_path, tcp_server, backend):
    if backend == "landlock" and _landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {_landlock_abi()} here; the builtin profile needs 6")
    os.chmod(tmp_path, 0o755)  # Landlock runs need every user to reach the fake home
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    probe = (f'cat > {project}/got; echo to-stdout; echo to-stderr >&2; cat {home}/.ssh/id_rsa;'
             f' echo x > {home}/planted && echo home-writable;'
             f' {SANDBOX_PYTHON} -c "import socket; socket.create_connection((\'127.0.0.1\', {tcp_server.port}), 2)"'
             f' 2>/dev/null && echo host-loopback-reached; exit 7')
    argv = [launcher, "exec", "--backend", backend, "--", "sh", "-c", probe]
    p = subprocess.run(argv, input=b"from stdin\n", capture_output=True, env=base_env(home), cwd=project, timeout=60)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 7, (p.returncode, out, err)
    assert open(os.path.join(project, "got")).read() == "from stdin\n"
    assert "to-stdout" in out and "to-stderr" in err, (out, err)
    assert "PRIVATE KEY" not in out + err and "home-writable" not in out, (out, err)
    assert not os.path.exists(os.path.join(home, "planted"))
    assert "host-loopback-reached" not in out and tcp_server.hits == 0, (out, err)
    # Control: the same probe unsandboxed reads the key, writes the home, reaches the server.
    c = subprocess.run(["sh", "-c", probe], input=b"from stdin\n", capture_output=True, cwd=project, timeout=60)
    assert b"PRIVATE KEY" in c.stdout and b"home-writable" in c.stdout, c
    assert b"host-loopback-reached" in c.stdout, c
    os.unlink(os.path.join(home, "planted"))

    # A signal's death is reported as a shell reports it, as with the module.
    r = run([launcher, "exec", "--backend", backend, "--", "sh", "-c", "kill -TERM $$"], env=base_env(home), cwd=project)
    # On OCI the shell is pid 1 of its namespace, where the kernel drops a signal it sends
    # itself without a handler (docs/kubernetes.md): it goes on and exits 0.
    assert r.rc == (0 if backend == "oci" else 128 + 15), r


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_cached_exec_through_launcher_imports_little(launcher, bwrap_works, project, home, backend):
    """What the file's own #! line runs, with -X importtime added: a cached run loads
    neither site (no .pth files, no sitecustomize) nor re, json, yaml, lark or pyseccomp,
    nor, on bwrap, os itself (sbxc.fastos)."""
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    env = base_env(home)
    argv = [launcher, "exec", "--backend", backend, "--", "/bin/true"]
    first = run(argv, env=env, cwd=project)  # compiles and caches the plan
    assert first.rc == 0, first
    line = interpreter_line(launcher)
    r = run([line[0], *line[1:], "-X", "importtime", *argv], env=env, cwd=project)
    assert r.rc == 0, r
    loaded = {ln.split("|")[-1].strip() for ln in r.err.splitlines() if ln.startswith("import time:")}
    assert "sbxc.runtime.launch" in loaded, r.err[-2000:]  # the timing lines are there to read
    tops = {m.split(".")[0] for m in loaded}
    # Landlock's system calls need ctypes, which imports os; bwrap's run needs neither.
    lean = ("os", "posixpath", "_collections_abc", "ctypes") if backend == "bwrap" else ()
    for heavy in ("site", "sitecustomize", "re", "json", "yaml", "lark", "pyseccomp", "enum", "subprocess", "__future__",
                  *lean):
        assert heavy not in tops, (heavy, sorted(loaded))
    assert "sbxc.commands._args" not in loaded, sorted(loaded)  # only exec's own options are built
    if backend == "bwrap":
        # Every module of sbxc's own that the run loads is in the bundle's hot part, read
        # with its index (scripts/write-launcher, HOT).
        hot = set(_write_launcher_module().HOT)
        assert {m for m in loaded if m.split(".")[0] == "sbxc"} <= hot, sorted(loaded)
    # Without host rules nothing of the proxy is loaded.
    assert not [m for m in loaded if m.startswith("sbxc.runtime.proxy") or m == "sbxc.hostnames"], sorted(loaded)


def test_cached_exec_with_host_rules_imports_little(launcher, bwrap_works, project, home):
    """With host rules the proxy is loaded, and still nothing heavy in sbxc's own process."""
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nnetwork: [allow example.invalid:8443]\n")
    env = base_env(home)
    first = run([launcher, "exec", "--", "/bin/true"], env=env, cwd=project)
    assert first.rc == 0, first
    line = interpreter_line(launcher)
    r = run([line[0], *line[1:], "-X", "importtime", launcher, "exec", "--", "/bin/true"], env=env, cwd=project)
    assert r.rc == 0, r
    loaded = {ln.split("|")[-1].strip() for ln in r.err.splitlines() if ln.startswith("import time:")}
    assert "sbxc.runtime.proxy_run" in loaded, r.err[-2000:]
    tops = {m.split(".")[0] for m in loaded}
    for heavy in ("site", "sitecustomize", "re", "json", "yaml", "lark", "pyseccomp", "enum", "subprocess",
                  "socket", "threading", "tempfile"):
        assert heavy not in tops, (heavy, sorted(loaded))


def test_python_variables_cannot_choose_sbxc_code(launcher, tmp_path, home):
    """sbxc runs outside the sandbox: a PYTHONPATH entry (say, a project folder that
    sandboxed commands write) must not be able to put its own sbxc in place of the real one."""
    evil = tmp_path / "evil"
    (evil / "sbxc").mkdir(parents=True)
    marker = tmp_path / "evil-ran"
    (evil / "sbxc" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = base_env(home, {"PYTHONPATH": str(evil), "PYTHONSTARTUP": str(evil / "sbxc" / "__init__.py"),
                          "PYTHONINSPECT": None})
    r = run([launcher, "--version"], env=env, cwd=str(tmp_path))
    assert r.rc == 0 and r.out.startswith("sbxc "), r
    assert not marker.exists()
    # Control: the interpreter run without -I takes the planted package.
    c = run([PYTHON, "-m", "sbxc", "--version"], env=env, cwd=str(tmp_path))
    assert marker.exists(), c


def _write_launcher_module():
    """scripts/write-launcher as a module (it has no .py suffix)."""
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "scripts", "write-launcher")
    spec = spec_from_loader("write_launcher", SourceFileLoader("write_launcher", path))
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod




def _loaders(launcher_path: str, python: str, modules=("sbxc", "sbxc.cli", "sbxc.layout")) -> dict:
    """Run the launcher's own text (as `sbxc --version`) in a fresh -IS interpreter, then
    name the loader each of ``modules`` came through and the version it printed."""
    code = ("import sys\n"
            f"L = {launcher_path!r}\n"
            "sys.argv = ['sbxc', '--version']\n"
            "src = open(L).read()\n"
            "try:\n    exec(compile(src, L, 'exec'), {'__name__': '__main__'})\nexcept SystemExit:\n    pass\n"
            f"for m in {list(modules)!r}:\n"
            "    print(m, type(sys.modules[m].__spec__.loader).__name__ if not isinstance(sys.modules[m].__spec__.loader, type) "
            "else sys.modules[m].__spec__.loader.__name__)\n")
    r = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    return {"version": lines[0], **dict(ln.split(" ", 1) for ln in lines[1:])}


def test_installed_launcher_loads_sbxc_from_the_bundle(launcher):
    """The set-up's launcher takes sbxc's start-up modules from the hot-path bundle."""
    got = _loaders(launcher, interpreter_line(launcher)[0])
    assert got["sbxc.cli"] == "HotPath" and got["sbxc"] == "HotPath", got


def test_bundle_never_serves_code_older_than_its_source(tmp_path):
    """A module edited after the bundle was written is imported from its source, the
    others still from the bundle; a bundle of another interpreter is not used at all."""
    wl = _write_launcher_module()
    src = os.path.dirname(os.path.dirname(os.path.abspath(__import__("sbxc").__file__)))
    import shutil

    shutil.copytree(os.path.join(src, "sbxc"), tmp_path / "sbxc", ignore=shutil.ignore_patterns("__pycache__"))
    pkg = str(tmp_path / "sbxc")
    bundle = wl.write_bundle(pkg)
    launcher_path = str(tmp_path / "sbxc-launcher")
    with open(launcher_path, "w") as f:
        f.write(wl.launcher_text(sys.executable, [str(tmp_path)], bundle))
    python = sys.executable
    before = _loaders(launcher_path, python)
    assert before["sbxc.layout"] == "HotPath" and before["sbxc.cli"] == "HotPath", before
    # Control: the same file with a different version line, size kept and mtime moved, is seen.
    layout = tmp_path / "sbxc" / "layout.py"
    text = layout.read_text()
    old = before["version"].split()[-1]
    new = "9" * len(old) if len(old) > 0 else "9"
    layout.write_text(text.replace(f'"{old}"', f'"{new}"', 1))
    st = os.stat(layout)
    os.utime(layout, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    after = _loaders(launcher_path, python)
    assert after["version"] == f"sbxc {new}", after
    assert after["sbxc.layout"] == "SourceFileLoader" and after["sbxc.cli"] == "HotPath", after
    # Another interpreter's bundle (its magic number differs): nothing comes from it.
    with open(bundle, "r+b") as f:
        f.write(b"\0\0\0\0")
    other = _loaders(launcher_path, python)
    assert other["sbxc.cli"] == "SourceFileLoader" and other["version"] == f"sbxc {new}", other


def test_bundle_hot_part_comes_first_and_the_rest_on_demand(tmp_path):
    """The HOT modules' code is first in the bundle, and the index says where it ends; a
    module outside it is still imported from the bundle, read when it is needed."""
    import marshal

    wl = _write_launcher_module()
    src = os.path.dirname(os.path.dirname(os.path.abspath(__import__("sbxc").__file__)))
    data = wl.bundle_bytes(os.path.join(src, "sbxc"))
    loader_len = int.from_bytes(data[4:8], "little")
    index_len = int.from_bytes(data[8:12], "little")
    index = marshal.loads(data[12 + loader_len:12 + loader_len + index_len])
    hot_end = index.pop(wl.HOT_KEY)
    ends = {name: e[4] + e[5] for name, e in index.items()}
    assert set(wl.HOT) <= set(index)
    assert hot_end == max(ends[n] for n in wl.HOT)
    assert all(index[n][4] >= hot_end for n in index if n not in wl.HOT)
    assert any(n not in wl.HOT for n in index)  # control: there is a rest, read on demand


def test_bundle_is_never_read_through_a_reused_descriptor(launcher, tmp_path):
    """A process that closes every descriptor (a detached child does) and then opens a file
    of someone else's must still get sbxc's own code for a module imported afterwards,
    never bytes of that file. Control: the planted file really sits at the number the
    bundle would have had."""
    planted = tmp_path / "planted"
    planted.write_bytes(b"\xe3" + b"\x00" * (1 << 20))  # a marshal code-object tag, then junk
    code = ("import sys\n"
            f"L = {launcher!r}\n"
            "sys.argv = ['sbxc', '--version']\n"
            "src = open(L).read()\n"
            "try:\n    exec(compile(src, L, 'exec'), {'__name__': '__main__'})\nexcept SystemExit:\n    pass\n"
            "import os\n"
            "os.closerange(3, 1 << 16)\n"
            f"fds = [os.open({str(planted)!r}, os.O_RDONLY) for _ in range(8)]\n"
            "import sbxc.runtime.trees as t\n"
            "print(min(fds), type(t.__spec__.loader).__name__ if not isinstance(t.__spec__.loader, type) "
            "else t.__spec__.loader.__name__, callable(getattr(t, 'remove_tree', None)))\n")
    line = interpreter_line(launcher)
    r = subprocess.run([line[0], "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lowest, loader, ok = r.stdout.splitlines()[-1].split()
    assert lowest == "3"  # the planted file took the lowest free numbers
    assert loader == "HotPath" and ok == "True", r.stdout


def test_session_pool_refills_through_the_launcher(launcher, bwrap_works, project, home):
    """The pool's refill runs in a detached child of the command a user runs; it imports
    the rest of its code after closing every descriptor, and still fills the pool."""
    import time

    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY + "workspace: {pool: 1}\n")
    env = base_env(home)
    r = run([launcher, "session", "start"], env=env, cwd=project)
    assert r.rc == 0, r
    sid = r.out.strip()
    try:
        deadline = time.time() + 60
        listed = ""
        while time.time() < deadline:
            listed = run([launcher, "session", "list"], env=env, cwd=project).out
            if "1 ready of 1" in listed:
                break
            time.sleep(0.2)
        assert "1 ready of 1" in listed, listed
    finally:
        run([launcher, "session", "stop", sid], env=env, cwd=project)
