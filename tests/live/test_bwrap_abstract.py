"""bwrap and runc with the network on: the host's abstract Unix sockets stay out of reach.

The command shares the host's network namespace, where abstract socket names live; a
Landlock domain scoping only abstract sockets (ABI 6), made before bwrap or runc starts,
refuses the connect. The test binds an abstract socket of its own in this process.
"""
from __future__ import annotations

import os
import socket
import subprocess
import textwrap

import pytest

from conftest import SANDBOX_PYTHON, runc_for

pytestmark = pytest.mark.live

_PROBE = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(b"\\0" + sys.argv[1].encode())
        print("connected", s.recv(16).decode().strip())
    except OSError as e:
        print("errno", e.errno)
""")


@pytest.fixture
def abstract_server():
    name = f"sbxc-test-abstract-{os.getpid()}-{os.urandom(4).hex()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(b"\0" + name.encode())
    srv.listen(8)
    srv.settimeout(0.2)
    import threading

    stop = threading.Event()
    hits = []

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except (socket.timeout, OSError):
                continue
            hits.append(1)
            with c:
                c.sendall(b"pong\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield name, hits
    stop.set()
    t.join(5)
    srv.close()


def _abi():
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi()


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
def test_network_on_cannot_reach_host_abstract_socket(sbxc, abstract_server, backend, request):
    runc_for(request)
    name, hits = abstract_server
    if _abi() < 6:
        pytest.fail(f"Landlock ABI {_abi()} on this kernel; the scope needs 6")
    pol = f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: true\n"
    r = sbxc(pol, SANDBOX_PYTHON, "-c", _PROBE, name)
    assert r.rc == 0, r
    assert "errno 1" in r.out, r  # EPERM from the scope
    assert not hits
    # The rest of a networked sandbox still works: the runner set up its mounts, and the
    # command's own abstract sockets (inside the domain) still connect.
    own = textwrap.dedent("""
        import socket
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); a.bind(b"\\0sbxc-inner"); a.listen(1)
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); b.connect(b"\\0sbxc-inner"); print("inner ok")
    """)
    r = sbxc(pol, SANDBOX_PYTHON, "-c", own)
    assert (r.rc, r.out) == (0, "inner ok\n"), r
    r = sbxc(pol, "sbxc-no-such-command-xyz")
    assert r.rc == 127, r


@pytest.mark.parametrize("stdio", ["stdin a pipe", "one stream", "a terminal"])
def test_every_oci_path_scopes_host_abstract_sockets(sbxc, abstract_server, runc, stdio):
    """An OCI run whose stdio reach the command as they are (`runc create` + `runc start`:
    a stdin to read, stdout and stderr one stream, a terminal) starts inside the same
    domain as a single `runc run`. Before, only that one had it: an OCI run from a terminal,
    or fed a pipe, reached the host's X11, D-Bus and container shims' abstract sockets."""
    name, hits = abstract_server
    if _abi() < 6:
        pytest.fail(f"Landlock ABI {_abi()} on this kernel; the scope needs 6")
    from conftest import base_env, pty_run, sbxc_argv

    pol = "sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: true\n"
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(pol)
    argv = sbxc_argv("exec", "--", SANDBOX_PYTHON, "-c", _PROBE, name)
    env = base_env(sbxc.home)
    if stdio == "stdin a pipe":
        r, w = os.pipe()
        os.close(w)
        with os.fdopen(r, "rb") as rf:
            p = subprocess.run(argv, env=env, cwd=sbxc.project, stdin=rf, capture_output=True, text=True, timeout=60)
        rc, out = p.returncode, p.stdout
    elif stdio == "one stream":
        p = subprocess.run(argv, env=env, cwd=sbxc.project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        rc, out = p.returncode, p.stdout
    else:
        rc, got = pty_run(argv, env, sbxc.project)
        out = got.decode("utf-8", "replace")
    assert rc == 0, out
    assert "errno 1" in out, out  # EPERM from the scope
    assert not hits


def test_control_outside_connects(abstract_server):
    name, hits = abstract_server
    p = subprocess.run([SANDBOX_PYTHON, "-c", _PROBE, name], capture_output=True, text=True, timeout=30)
    assert "connected pong" in p.stdout, p
    assert hits


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
@pytest.mark.parametrize("network", ["[connect tcp 443]", "[allow pkgs.example.invalid]"])
def test_rules_give_a_namespace_where_host_abstract_sockets_do_not_exist(sbxc, abstract_server, network, backend,
                                                                          request):
    """Per-port and host rules: bwrap and runc give the command a network namespace of its own, so
    no Landlock scope is made for abstract sockets (none of the host's is bound there):
    the connect finds no such name (ECONNREFUSED), and the host's server sees nothing.
    The control above connects to the same name from outside."""
    name, hits = abstract_server
    runc_for(request)
    pol = f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: {network}\n"
    r = sbxc(pol, SANDBOX_PYTHON, "-c", _PROBE, name)
    assert r.rc == 0, r
    assert "errno 111" in r.out, r  # no such name in the sandbox's namespace, not EPERM of a scope
    assert not hits
