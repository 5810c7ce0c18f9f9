"""sbxc.fastos: the hot path's ``os`` without ``os``. Its path functions give posixpath's
results, over generated paths and a folder tree with every kind of symlink (relative,
absolute, dangling, chains, loops); its environment is ``os.environ``'s; and a bare
``sbxc exec`` really runs without importing ``os``."""
from __future__ import annotations

import os
import posixpath
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbxc import fastos

LEAN = fastos._lean_os()
P = LEAN.path


def test_the_real_os_is_used_once_it_is_imported():
    assert fastos.os is os


def test_environment_and_names_match_os():
    # In a fresh interpreter: here pytest has changed os.environ since start-up. A value
    # that is not UTF-8 decodes as os.environ decodes it.
    code = ("import sys; from sbxc import fastos; lean = fastos._lean_os(); import os; "
            "print(lean.environ == dict(os.environ), lean.environ['SBXC_T'] == os.environ['SBXC_T'])")
    env = {**os.environ, "SBXC_T": "x"}
    r = subprocess.run([sys.executable, "-c", code], env={k.encode(): v.encode() for k, v in env.items()} | {
        b"SBXC_T": b"caf\xe9"}, capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["True", "True"], r
    assert LEAN.fsencode("a\udcff") == os.fsencode("a\udcff")
    assert LEAN.fsdecode(b"a\xff") == os.fsdecode(b"a\xff")
    assert LEAN.devnull == os.devnull
    for name in ("open", "O_PATH", "O_NOFOLLOW", "WNOHANG", "getuid", "scandir", "pipe2", "waitstatus_to_exitcode"):
        assert getattr(LEAN, name) is getattr(os, name)


COMPONENT = st.sampled_from(["a", "b", "f", "l1", "l2", "abs", "dang", "loop1", "self", "chain", "up", ".", "..", "",
                             "missing", "d"])
PATHS = st.builds(lambda lead, parts, trail: lead + "/".join(parts) + trail,
                  st.sampled_from(["", "/", "//", "///"]), st.lists(COMPONENT, max_size=7), st.sampled_from(["", "/"]))


@given(PATHS)
def test_lexical_functions_match_posixpath(path):
    for fn in ("normpath", "dirname", "basename", "split"):
        assert getattr(P, fn)(path) == getattr(posixpath, fn)(path), (fn, path)
    for other in ("", "x", "/y", "z/"):
        assert P.join(path, other) == posixpath.join(path, other)
        assert P.join(other, path) == posixpath.join(other, path)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """a/b/f (a file), d (a folder), l1 -> a (relative), l2 -> l1/b, abs -> <root>/a/b
    (absolute), dang -> nowhere, loop1 <-> loop2, self -> self, chain -> l2/../.., up -> ..,
    and the same links inside a/ so that paths meet them at depth."""
    root = tmp_path_factory.mktemp("fastos")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (root / "d").mkdir()
    for base in (root, root / "a"):
        os.symlink("a" if base == root else "b", base / "l1")
        os.symlink("l1/b" if base == root else "l1", base / "l2")
        os.symlink(str(root / "a" / "b"), base / "abs")
        os.symlink("nowhere", base / "dang")
        os.symlink("loop2", base / "loop1")
        os.symlink("loop1", base / "loop2")
        os.symlink("self", base / "self")
        os.symlink("l2/../..", base / "chain")
        os.symlink("..", base / "up")
    return str(root)


@settings(max_examples=600, deadline=None)
@given(PATHS)
def test_realpath_and_tests_match_posixpath_in_a_tree_of_links(tree, path):
    rel = path.lstrip("/")
    for candidate in (tree + "/" + rel, rel):
        old = os.getcwd()
        os.chdir(tree)
        try:
            assert P.realpath(candidate) == posixpath.realpath(candidate), candidate
            assert P.abspath(candidate) == posixpath.abspath(candidate), candidate
            for fn in ("exists", "lexists", "isfile", "isdir", "islink"):
                assert getattr(P, fn)(candidate) == getattr(posixpath, fn)(candidate), (fn, candidate)
        finally:
            os.chdir(old)


def test_a_cached_exec_never_imports_os(tmp_path):
    """The point of the module: the hot path's imports, as ``sbxc exec`` makes them in a
    fresh interpreter started as the launcher starts it (-I -S), leave ``os`` out."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(fastos.__file__)))
    code = ("import sys\n"
            f"sys.path.insert(0, {src!r})\n"
            "import sbxc.cli, sbxc.commands.exec, sbxc.runtime.launch, sbxc.runtime.plancache, "
            "sbxc.runtime.planstore, sbxc.runtime.cachedir, sbxc.runtime.bwrap_run, sbxc.runtime.supervise, "
            "sbxc.runtime.journal, sbxc.runtime.owncode, sbxc.runtime.hint, sbxc.runtime.runwarn, "
            "sbxc.runtime.probe, sbxc.runtime.staleness, sbxc.runtime.safeopen, sbxc.discovery\n"
            "print('os' in sys.modules, sorted(m for m in ('posixpath', '_collections_abc') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False []", r.stdout


def test_realpath_refuses_a_nul_byte_as_posixpath_does():
    with pytest.raises(ValueError):
        posixpath.realpath("a\x00b")
    with pytest.raises(ValueError):
        P.realpath("a\x00b")
    assert P.exists("a\x00b") is False and posixpath.exists("a\x00b") is False


def test_oci_runner_reads_runc_init_under_the_lean_os(tmp_path, monkeypatch):
    """The OCI runner's check whether the container's process is still runc's init reads
    /proc bytes; with the hot path's os (no real os loaded) it must still answer.
    Control: a process that is not runc's init is told apart."""
    import time

    from sbxc.runtime import oci_run

    monkeypatch.setattr(oci_run, "os", LEAN)
    fifo = tmp_path / "exec.fifo"
    os.mkfifo(fifo)
    (tmp_path / "init").write_text("sleep 30\n")  # a script named init: sh keeps argv [NAME, init]

    def with_argv0(name):
        p = subprocess.Popen(["bash", "-c", f'exec -a "{name}" /bin/sh init'], cwd=tmp_path, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                if f.read() == os.fsencode(name) + b"\0init\0":
                    return p
            time.sleep(0.01)
        os.killpg(p.pid, 9)
        raise AssertionError("the stand-in process did not start")

    for name, want in ((f"{tmp_path}/runc", True), (f"{tmp_path}/other", False)):
        p = with_argv0(name)
        try:
            assert oci_run._still_waiting(p.pid, "/usr/sbin/runc", str(fifo)) is want, name
        finally:
            os.killpg(p.pid, 9)  # sh and its sleep
            p.wait()
