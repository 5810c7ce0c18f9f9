"""builtin:default hides the user's runtime folder by its fixed path, /run/user/{uid}, also
when the caller has no XDG_RUNTIME_DIR (su, cron, ssh without a login session, CI): the
session bus, the user's systemd and agents listen there and start programs outside any
sandbox.

The test builds its own world in the real /run/user/{uid} (a login session makes it; CI
makes it for its unprivileged user as logind would; as root the test makes /run/user/0
when it is missing and removes it afterwards): a listening Unix socket of its own, next to
whatever is there, never replacing anything. With XDG_RUNTIME_DIR unset, the control
connects to it directly and gets an answer; ``sbxc exec`` on bwrap and on Landlock runs a
command that tries the same and must fail.
"""
import os
import socket
import threading

import pytest

from conftest import PYTHON, SANDBOX_PYTHON, SRC, base_env, run

pytestmark = pytest.mark.live

PROBE = r"""
import socket, sys
try:
    # On Landlock the socket itself is refused (new Unix sockets are, below ABI 9)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sys.argv[1])
    print("connected:" + s.recv(16).decode().strip())
except OSError as e:
    print("refused:" + (e.strerror or str(e)))
"""

def _serve(path: str):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    srv.settimeout(0.5)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.sendall(b"pong\n")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, stop, t


def _probe(argv, env, cwd):
    r = run(argv, env=env, cwd=cwd, timeout=120)
    return {"rc": r.rc, "out": r.out.strip(), "err": r.err[-2000:]}


def test_session_bus_by_fixed_path_is_hidden_without_xdg_runtime_dir(bwrap_works, project, home):
    from sbxc.runtime.probe import landlock_abi

    uid = os.getuid()
    rundir = f"/run/user/{uid}"
    made = False
    if not os.path.isdir(rundir):
        if uid != 0:
            pytest.skip(f"{rundir} is missing (a login session makes it; CI makes it for its unprivileged user)")
        os.makedirs(rundir, mode=0o700)
        made = True
    sock = os.path.join(rundir, f"sbxc-test-{os.getpid()}.sock")
    srv, stop, t = _serve(sock)
    try:
        env = base_env(home, {"PYTHONPATH": SRC})
        assert "XDG_RUNTIME_DIR" not in env
        # control: the socket answers whoever can reach it
        control = _probe([SANDBOX_PYTHON, "-c", PROBE, sock], env, project)
        assert control["out"] == "connected:pong", control
        from sbxc.runtime.probe import host_program

        backends = ["bwrap"] + (["landlock"] if landlock_abi() > 0 else []) + (
            ["oci"] if host_program("runc", os.environ)[0] else [])
        for b in backends:
            res = _probe([PYTHON, "-m", "sbxc", "exec", "--backend", b, "--", SANDBOX_PYTHON, "-c", PROBE, sock],
                         env, project)
            assert res["rc"] == 0, (b, res)
            assert res["out"].startswith("refused:"), (b, res)
        # The folder itself is not there inside: nothing under it can be listed either.
        listing = _probe([PYTHON, "-m", "sbxc", "exec", "--backend", "bwrap", "--", "ls", "-A", rundir], env, project)
        assert os.path.basename(sock) not in listing["out"], listing
    finally:
        stop.set()
        t.join(2)
        srv.close()
        os.unlink(sock)
        if made:
            os.rmdir(rundir)
