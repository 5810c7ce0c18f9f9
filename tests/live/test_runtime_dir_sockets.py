"""builtin:default hides the user's runtime folder by its fixed path, /run/user/{uid}, also
when the caller has no XDG_RUNTIME_DIR (su, cron, ssh without a login session, CI): the
session bus there starts programs outside any sandbox.

The test builds its own world: an outer bwrap (a mount namespace of the test's own, with
the host's / and an empty /run/user) in which a listening Unix socket stands where the
session bus would, /run/user/{uid}/bus. In there, with XDG_RUNTIME_DIR unset: the control
connects to it directly and gets an answer; ``sbxc exec`` on bwrap and on Landlock runs a
command that tries the same and must fail. (The outer namespace is what lets an
unprivileged user own /run/user/{uid} without a login session; nothing on the host's
/run/user is touched.)
"""
import json
import os
import sys

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

# Runs inside the outer namespace: serves the socket, then the control and the sandboxed tries.
DRIVER = r"""
import json, os, socket, subprocess, sys, threading
bus = sys.argv[1]
probe, sandbox_python, backends = sys.argv[2], sys.argv[3], sys.argv[4].split(",")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(bus)
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
threading.Thread(target=serve, daemon=True).start()
out = {"env": os.environ.get("XDG_RUNTIME_DIR")}
out["control"] = subprocess.run([sandbox_python, "-c", probe, bus], capture_output=True, text=True).stdout.strip()
for b in backends:
    r = subprocess.run([sys.executable, "-m", "sbxc", "exec", "--backend", b, "--", sandbox_python, "-c", probe, bus],
                       capture_output=True, text=True, timeout=120)
    out[b] = {"rc": r.returncode, "out": r.stdout.strip(), "err": r.stderr[-2000:]}
stop.set()
print(json.dumps(out))
"""


def test_session_bus_by_fixed_path_is_hidden_without_xdg_runtime_dir(bwrap_works, project, home, tmp_path):
    from sbxc.runtime.probe import landlock_abi

    uid = os.getuid()
    backends = ["bwrap"] + (["landlock"] if landlock_abi() > 0 else [])
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    os.chmod(tmp_path, 0o755)
    bus = f"/run/user/{uid}/bus"
    outer = [bwrap_works, "--dev-bind", "/", "/", "--tmpfs", "/run/user", "--dir", f"/run/user/{uid}",
             "--chmod", "0700", f"/run/user/{uid}", "--unshare-user", "--die-with-parent", "--",
             PYTHON, str(driver), bus, PROBE, SANDBOX_PYTHON, ",".join(backends)]
    env = base_env(home, {"PYTHONPATH": SRC})
    assert "XDG_RUNTIME_DIR" not in env
    r = run(outer, env=env, cwd=project, timeout=300)
    assert r.rc == 0, r
    res = json.loads(r.out.strip().splitlines()[-1])
    assert res["env"] is None
    # control: the socket answers whoever can reach it
    assert res["control"] == "connected:pong", res
    for b in backends:
        assert res[b]["rc"] == 0, (b, res[b])
        assert res[b]["out"].startswith("refused:"), (b, res[b])
