"""Ordinary work under the builtin toolchain profiles with the network off, on both
backends: each test checks the result (the artifact, the test outcome), not only the exit
status. Everything the work needs is made by the test; nothing is fetched."""
from __future__ import annotations

import os
import shutil
import sys
import zipfile

import pytest

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock", "oci"]


def policy(backend, *profiles):
    from conftest import interpreter_rules

    return (f"sbxc: 1\nextends: [{', '.join('builtin:' + p for p in profiles)}]\nbackend: {backend}\n"
            "network: false\n" + interpreter_rules())


def root_on_landlock(sbxc, backend, profile) -> bool:
    """Landlock as root refuses chmod of the command's own files and running what it built
    (root owns every root-owned file, so the rules cover metadata too): git, venv, pip
    install and running a fresh binary need those. The enforcement report says so before
    any run; that is what is asserted there (the work runs on bwrap as root, and on both
    backends unprivileged)."""
    if not (backend == "landlock" and os.geteuid() == 0):
        return False
    from conftest import base_env, run, sbxc_argv

    path = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write(policy(backend, profile))
    r = run(sbxc_argv("compile", path, "--check"), env=base_env(sbxc.home), cwd=sbxc.project)
    assert "use bwrap for root" in r.out, r
    return True


def tool(name):
    found = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
    assert found, f"{name} is installed by the set-up"
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_init_add_commit(sbxc, backend):
    git = tool("git")
    if root_on_landlock(sbxc, backend, "git"):
        return
    with open(os.path.join(sbxc.project, "a.txt"), "w") as f:
        f.write("one\n")
    script = (f"{git} init -q repo && cp a.txt repo/ && cd repo && {git} add a.txt && "
              f"{git} -c user.name=t -c user.email=t@example.invalid commit -q -m first && {git} log --format=%s")
    r = sbxc(policy(backend, "git"), "sh", "-c", script)
    assert r.rc == 0, r
    assert r.out.strip() == "first", r
    assert os.path.isdir(os.path.join(sbxc.project, "repo", ".git", "objects"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_make_with_gcc(sbxc, backend):
    tool("gcc")
    make = tool("make")
    if root_on_landlock(sbxc, backend, "default"):
        return
    with open(os.path.join(sbxc.project, "hello.c"), "w") as f:
        f.write('#include <stdio.h>\nint main(void) { puts("built by make"); return 0; }\n')
    with open(os.path.join(sbxc.project, "Makefile"), "w") as f:
        f.write("hello: hello.c\n\tgcc -o hello hello.c\n")
    r = sbxc(policy(backend, "default"), "sh", "-c", f"{make} -s && ./hello")
    assert r.rc == 0, r
    assert r.out == "built by make\n", r
    assert os.access(os.path.join(sbxc.project, "hello"), os.X_OK)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pytest_under_the_python_profile(sbxc, backend):
    with open(os.path.join(sbxc.project, "test_sample.py"), "w") as f:
        f.write("def test_adds():\n    assert 1 + 1 == 2\n\ndef test_fails():\n    assert 1 + 1 == 3\n")
    r = sbxc(policy(backend, "python"), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "test_sample.py")
    assert r.rc == 1, r  # one test fails on purpose: pytest's own verdict comes through
    assert "1 failed, 1 passed" in r.out, r


def _wheel(folder: str) -> str:
    """A pure-Python wheel made by hand (no build backend, nothing fetched)."""
    name = os.path.join(folder, "sbxcprobe-1.0-py3-none-any.whl")
    files = {
        "sbxcprobe/__init__.py": "VALUE = 'installed from a local wheel'\n",
        "sbxcprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sbxcprobe\nVersion: 1.0\n",
        "sbxcprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + "sbxcprobe-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(name, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
        z.writestr("sbxcprobe-1.0.dist-info/RECORD", record)
    return name


@pytest.mark.parametrize("backend", BACKENDS)
def test_venv_and_pip_install_of_a_local_wheel(sbxc, backend):
    if root_on_landlock(sbxc, backend, "python"):
        return
    wheel = _wheel(sbxc.project)
    script = (f"{sys.executable} -m venv --without-pip env && "
              f"{sys.executable} -m pip --python env/bin/python install --no-index --no-deps "
              f"--disable-pip-version-check -q {os.path.basename(wheel)} && "
              "env/bin/python -c 'import sbxcprobe; print(sbxcprobe.VALUE)'")
    r = sbxc(policy(backend, "python"), "sh", "-c", script, timeout=180)
    assert r.rc == 0, r
    assert r.out.strip().endswith("installed from a local wheel"), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_npm_pack_install_and_test(sbxc, backend):
    npm = tool("npm")
    lib = os.path.join(sbxc.project, "lib")
    app = os.path.join(sbxc.project, "app")
    os.makedirs(lib)
    os.makedirs(app)
    with open(os.path.join(lib, "package.json"), "w") as f:
        f.write('{"name": "sbxc-probe-lib", "version": "1.0.0", "main": "index.js"}\n')
    with open(os.path.join(lib, "index.js"), "w") as f:
        f.write("module.exports = (a, b) => a + b;\n")
    with open(os.path.join(app, "package.json"), "w") as f:
        f.write('{"name": "app", "version": "1.0.0", "private": true, '
                '"scripts": {"test": "node -e \\"process.exit(require(\'sbxc-probe-lib\')(2, 2) === 4 ? 0 : 1)\\" '
                '&& echo tests passed"}}\n')
    flags = "--no-audit --no-fund --no-update-notifier --offline"
    script = (f"cd lib && {npm} pack -q {flags} >/dev/null && cd ../app && "
              f"{npm} install {flags} ../lib/sbxc-probe-lib-1.0.0.tgz >/dev/null && {npm} test {flags}")
    r = sbxc(policy(backend, "node"), "sh", "-c", script, timeout=240)
    assert r.rc == 0, r
    assert "tests passed" in r.out, r
    assert os.path.isfile(os.path.join(lib, "sbxc-probe-lib-1.0.0.tgz"))
    assert os.path.isfile(os.path.join(app, "node_modules", "sbxc-probe-lib", "index.js"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cargo_build_of_a_crate_without_dependencies(sbxc, backend):
    """Debian's cargo (installed by the set-up), its registry and build caches in the
    per-project cache (CARGO_HOME, set by the profile), the build in the project."""
    cargo = tool("cargo")
    rustc = tool("rustc")  # Debian's, beside its cargo (a rustup proxy on PATH would want its own home)
    if root_on_landlock(sbxc, backend, "rust"):
        return
    crate = os.path.join(sbxc.project, "hello")
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n')
    with open(os.path.join(crate, "src", "main.rs"), "w") as f:
        f.write('fn main() { println!("built by cargo: {}", 6 * 7); }\n')
    r = sbxc(policy(backend, "rust"), "sh", "-c", f"cd hello && RUSTC={rustc} {cargo} build --offline -q && ./target/debug/hello",
             timeout=300)
    assert r.rc == 0, r
    assert r.out.strip() == "built by cargo: 42", r
    assert os.access(os.path.join(crate, "target", "debug", "hello"), os.X_OK)
    # Nothing of cargo's own state went to the home folder (it is read-only in the sandbox).
    assert not os.path.exists(os.path.join(sbxc.home, ".cargo")), os.listdir(sbxc.home)
