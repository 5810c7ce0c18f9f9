"""Host rules, live (SPEC §2, §5): the command reaches upstream servers that the test starts
on loopback only through sbxc's proxy, and only where a rule allows; refused hosts are
named after the run with the rule to add. bwrap, Landlock and OCI (runc), as root and
unprivileged (rootless runc).

Every upstream is a server of this test on 127.0.0.1; refused targets are loopback or
``.invalid`` names, never another host.
"""
from __future__ import annotations

import http.server
import os
import ssl
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock", "oci"]


@pytest.fixture(autouse=True)
def _runc_for_oci(request):
    from conftest import runc_for

    runc_for(request)


CLIENT = r'''
import os, socket, ssl, sys, urllib.request

mode, arg = sys.argv[1], sys.argv[2:]
proxy = os.environ["HTTP_PROXY"]
phost, pport = proxy.rsplit("/", 1)[-1].split(":")
pport = int(pport)

def via_proxy(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            print("STATUS", r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print("STATUS", e.code)

def connect(target, host_header):
    s = socket.create_connection((phost, pport), timeout=30)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {host_header}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head.split(b" ")[1].decode() if head else "EOF"

if mode == "get":
    via_proxy(arg[0])
elif mode == "connect":
    s, status = connect(arg[0], arg[1])
    print("STATUS", status)
elif mode == "tls":
    s, status = connect(arg[0], arg[0])
    ctx = ssl.create_default_context(cafile=arg[1])
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
    data = b""
    while True:
        chunk = t.recv(65536)
        if not chunk:
            break
        data += chunk
    print("STATUS", status, data.split(b"\r\n\r\n", 1)[-1].decode())
elif mode == "socks":
    host, port = arg[0], int(arg[1])
    s = socket.create_connection((phost, pport), timeout=30)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    try:
        addr = b"\x01" + socket.inet_aton(host)
    except OSError:
        addr = b"\x03" + bytes([len(host)]) + host.encode()
    s.sendall(b"\x05\x01\x00" + addr + port.to_bytes(2, "big"))
    reply = s.recv(10)
    if reply[1] == 0:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        print("SOCKS 0", data.split(b"\r\n\r\n", 1)[-1].decode())
    else:
        print("SOCKS", reply[1])
elif mode == "direct":
    try:
        socket.create_connection(("127.0.0.1", int(arg[0])), timeout=5)
        print("DIRECT connected")
    except OSError as e:
        print("DIRECT refused", e.errno)
'''


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from upstream"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def upstream():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def tls_upstream(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(cert, 0o644)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1], str(cert)
    srv.shutdown()
    srv.server_close()


def policy(backend: str, *rules: str) -> str:
    from conftest import interpreter_rules

    lines = "".join(f"  - {r}\n" for r in rules)
    return f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork:\n{lines}" + interpreter_rules()


def client(sbxc, backend, rules, *args):
    path = os.path.join(sbxc.project, "client.py")
    with open(path, "w") as f:
        f.write(CLIENT)
    return sbxc(policy(backend, *rules), sys.executable, "-I", path, *args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_address_literal(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow 127.0.0.1:{upstream}"], "get", f"http://127.0.0.1:{upstream}/")
    assert r.rc == 0, r
    assert "STATUS 200 hello from upstream" in r.out, r
    assert "sbxc: blocked" not in r.err


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_name_with_its_address_rule(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow localhost:{upstream}", f"allow 127.0.0.1:{upstream}"],
               "get", f"http://localhost:{upstream}/")
    assert "STATUS 200 hello from upstream" in r.out, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_name_resolving_to_loopback_needs_an_address_rule(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow localhost:{upstream}"], "get", f"http://localhost:{upstream}/")
    assert "STATUS 403" in r.out, r
    want = (f"sbxc: blocked localhost:{upstream} (it resolves only to the non-public address 127.0.0.1, which no "
            f'rule in sandbox.policy.yaml:5 names); allow it with "allow 127.0.0.1:{upstream}"')
    assert want in r.err.splitlines(), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_refused_host_is_named_with_the_rule_to_add(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow 127.0.0.1:{upstream}"], "get", "http://pkgs.example.invalid/x")
    assert "STATUS 403" in r.out, r
    want = ('sbxc: blocked pkgs.example.invalid:80 (not allowed by sandbox.policy.yaml:5); '
            'allow it with "allow pkgs.example.invalid"')
    assert want in r.err.splitlines(), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_connect_with_mismatched_host_is_refused(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow 127.0.0.1:{upstream}"], "connect", f"127.0.0.1:{upstream}", "other.invalid")
    assert "STATUS 400" in r.out, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_tls_through_connect(sbxc, backend, tls_upstream):
    port, cert_src = tls_upstream
    cert = os.path.join(sbxc.project, "ca.pem")  # the sandbox's /tmp is its own
    with open(cert_src) as f, open(cert, "w") as g:
        g.write(f.read())
    r = client(sbxc, backend, [f"allow localhost:{port}", f"allow 127.0.0.1:{port}"], "tls", f"localhost:{port}", cert)
    assert "STATUS 200 hello from upstream" in r.out, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_socks5_with_address_and_name(sbxc, backend, upstream):
    rules = [f"allow 127.0.0.1:{upstream}"]
    r = client(sbxc, backend, rules, "socks", "127.0.0.1", str(upstream))
    assert "SOCKS 0 hello from upstream" in r.out, r
    # By name: localhost resolves to loopback, which only an address rule with a name rule admits.
    r = client(sbxc, backend, rules, "socks", "localhost", str(upstream))
    assert "SOCKS 2" in r.out, r
    r = client(sbxc, backend, rules + [f"allow localhost:{upstream}"], "socks", "localhost", str(upstream))
    assert "SOCKS 0 hello from upstream" in r.out, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_command_ignoring_the_proxy_reaches_nothing(sbxc, backend, upstream):
    r = client(sbxc, backend, [f"allow 127.0.0.1:{upstream}"], "direct", str(upstream))
    assert "DIRECT refused" in r.out, r
    # Control: the same probe unsandboxed reaches the server.
    path = os.path.join(sbxc.project, "client.py")
    env = dict(os.environ, HTTP_PROXY="http://127.0.0.1:1")
    out = subprocess.run([sys.executable, "-I", path, "direct", str(upstream)], env=env, capture_output=True,
                         text=True, timeout=30).stdout
    assert "DIRECT connected" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_proxy_variables_for_the_toolchains(sbxc, backend, upstream):
    r = sbxc(policy(backend, f"allow 127.0.0.1:{upstream}"), "env")
    env = dict(line.split("=", 1) for line in r.out.splitlines() if "=" in line)
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "PIP_PROXY", "npm_config_proxy",
                 "npm_config_https_proxy", "CARGO_HTTP_PROXY"):
        assert env.get(name, "").startswith("http://127.0.0.1:"), (name, r)
    assert env["ALL_PROXY"].startswith("socks5h://127.0.0.1:") and env["all_proxy"] == env["ALL_PROXY"]
    assert env["NO_PROXY"] == "" and env["no_proxy"] == ""
    # The network is there through the proxy: none of the no-network retry settings.
    assert "npm_config_fetch_retries" not in env and "RES_OPTIONS" not in env, r


NETNS_PROBE = r"""
import os, socket, sys
upstream = int(sys.argv[1])
print("IFACES", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
listening = [l.split()[1] for l in open("/proc/net/tcp").readlines()[1:] if l.split()[3] == "0A"]
print("LISTEN", listening)
mounts = [l.split()[4] for l in open("/proc/self/mountinfo")]
print("PROXY MOUNTS", [m for m in mounts if "sbxc-proxy" in m])
for host in ("127.0.0.1", "127.0.0.2", "::1"):
    try:
        socket.create_connection((host, upstream), timeout=5).close()
        print("DIRECT", host, "connected")
    except OSError as e:
        print("DIRECT", host, "refused", e.errno)
"""


def proxy_is_the_only_way_out(sbxc, backend: str, upstream: int) -> None:
    """The sandbox's network namespace has `lo` alone, the proxy's port is its only
    listener, and the test's server on the host's loopback is reachable only through the
    proxy, where a rule allows it. Control: the same probe unsandboxed connects directly."""
    path = os.path.join(sbxc.project, "netns_probe.py")
    with open(path, "w") as f:
        f.write(NETNS_PROBE)
    r = sbxc(policy(backend, f"allow 127.0.0.1:{upstream}"), sys.executable, "-I", path, str(upstream))
    assert r.rc == 0, r
    assert "IFACES ['lo']" in r.out, r
    # 0100007F:0C38 is 127.0.0.1:3128 (the proxy's port inside), the only listener.
    assert "LISTEN ['0100007F:0C38']" in r.out, r
    if backend == "bwrap":
        assert "PROXY MOUNTS []" in r.out, r  # nothing of the host is bound in for it
    for host in ("127.0.0.1", "127.0.0.2", "::1"):
        assert f"DIRECT {host} refused" in r.out, r
    r = client(sbxc, backend, [f"allow 127.0.0.1:{upstream}"], "get", f"http://127.0.0.1:{upstream}/")
    assert r.rc == 0 and "STATUS 200 hello from upstream" in r.out, r
    out = subprocess.run([sys.executable, "-I", path, str(upstream)], capture_output=True, text=True,
                         timeout=30).stdout
    assert "DIRECT 127.0.0.1 connected" in out, out


def test_bwrap_the_proxy_listens_inside_and_nothing_else_is_reachable(sbxc, upstream):
    """bwrap: the proxy's listening socket lives in the sandbox's own network namespace
    (loopback only), nothing of the host is bound in for it, and the test's server on
    the host's loopback is out of reach except through the proxy, where a rule allows."""
    proxy_is_the_only_way_out(sbxc, "bwrap", upstream)


FAIL_SETNS = r"""
import sys
from sbxc.runtime import proxy_netns

def refuse(fd, kinds):
    raise PermissionError(1, "Operation not permitted")

proxy_netns._setns = refuse
from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_bwrap_refuses_when_the_proxy_cannot_enter_the_sandbox(sbxc, upstream, home):
    """Fail closed: when the listener cannot be made in the sandbox's namespace (here the
    kernel's refusal of setns, simulated in sbxc's helper), bwrap is killed before it
    execs the command: 125, one sbxc line, and the command never ran."""
    from conftest import PYTHON, base_env, run

    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(policy("bwrap", f"allow 127.0.0.1:{upstream}"))
    marker = os.path.join(sbxc.project, "ran")
    argv = [PYTHON, "-c", FAIL_SETNS, "exec", "--policy", ppath, "--", "touch", marker]
    r = run(argv, env=base_env(home), cwd=sbxc.project)
    assert r.rc == 125, r
    lines = [line for line in r.err.splitlines() if line.startswith("sbxc: ") and "warning" not in line]
    assert lines == ["sbxc: the network proxy could not be put into the sandbox (cannot listen in the sandbox's "
                     "network namespace (Operation not permitted)); check that bwrap may create user and network "
                     "namespaces (sbxc doctor)"], r
    assert not os.path.exists(marker), r
    # Control: the same run without the fault runs the command.
    r = run([PYTHON, "-m", "sbxc", "exec", "--policy", ppath, "--", "touch", marker], env=base_env(home),
            cwd=sbxc.project)
    assert r.rc == 0 and os.path.exists(marker), r
