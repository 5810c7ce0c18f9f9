"""The proxy refuses a name that resolves to an address the kernel delivers to this host
itself, also where that address is not assigned but routed as local: a local route over
an IPv6 prefix (some hosts answer for a whole prefix so), which bind() refuses, so a check
by bind() alone took it for a public address and tunnelled to the host's own services.

Run in a network namespace of the test's own (``unshare -rn``: the host's routes are not
touched), which the script first checks holds its loopback and nothing else, so no packet
can leave the machine whatever the code does. The routed prefix is the documentation one
(2001:db8::/32, never routed anywhere), counted as public for this test as a stand-in for a
public prefix a host answers for. A server on ``[::]`` and the proxy in a thread. The
control: in the same namespace a plain connect to the routed address reaches that server,
and bind() to it fails (what the old check saw).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import SRC

pytestmark = pytest.mark.live

SCRIPT = textwrap.dedent(r'''
    import json, socket, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    # Only the loopback here: nothing sent below can leave the machine.
    assert [name for _, name in socket.if_nameindex()] == ["lo"], socket.if_nameindex()
    for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "-6", "route", "add", "local", "2001:db8:5b0::/48", "dev", "lo"]):
        subprocess.run(cmd, check=True)
    from sbxc.runtime import proxy_match
    from sbxc.runtime.proxy import Proxy
    from sbxc.runtime.proxy_server import own_address

    prefix = socket.inet_pton(socket.AF_INET6, "2001:db8:5b0::")[:6]
    real = proxy_match.is_public
    proxy_match.is_public = lambda fam, packed: packed[:6] == prefix or real(fam, packed)

    out = {}
    srv = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    v6 = socket.inet_pton(socket.AF_INET6, "2001:db8:5b0::1")
    # The control: the routed address reaches the host's server, and cannot be bound.
    c = socket.create_connection(("2001:db8:5b0::1", port), timeout=5)
    srv.accept()[0].close()
    c.close()
    out["control reached"] = True
    b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        b.bind(("2001:db8:5b0::1", 0))
        out["control bind"] = "bound"
    except OSError as e:
        out["control bind"] = e.errno
    b.close()
    out["own v6 routed"] = own_address(socket.AF_INET6, v6)
    out["own v6 elsewhere"] = own_address(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, "2001:db8:5b1::1"))
    names = {"cdn.example.com": ["2001:db8:5b0::1"]}
    p = Proxy([("cdn.example.com", (port,), "t.yaml:1:5: allow cdn.example.com")], mode="thread",
              resolver=lambda name: names.get(name, []))
    p.start()
    try:
        s = socket.create_connection(p.tcp_address, timeout=5)
        s.sendall(f"CONNECT cdn.example.com:{port} HTTP/1.1\r\nHost: cdn.example.com:{port}\r\n\r\n".encode())
        out["head"] = s.recv(200).decode("latin-1").split("\r\n")[0]
        s.close()
    finally:
        p.stop()
    try:
        srv.accept()[0].close()
        out["reached through the proxy"] = True
    except TimeoutError:
        out["reached through the proxy"] = False
    out["refused"] = [r for _, _, r in p.refused()]
    print(json.dumps(out))
''')


def test_a_name_routed_to_this_host_is_refused():
    if not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("needs ip (iproute2) and unshare (scripts/setup installs them)")
    p = subprocess.run(["unshare", "-rn", sys.executable, "-c", SCRIPT, SRC], capture_output=True, text=True,
                       timeout=60, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["control reached"] and got["control bind"] != "bound", got
    assert got["own v6 routed"], got
    assert not got["own v6 elsewhere"], got
    assert got["head"].startswith("HTTP/1.1 403") and not got["reached through the proxy"], got
    assert any("own addresses" in r for r in got["refused"]), got
