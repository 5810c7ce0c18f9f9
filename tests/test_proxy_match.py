"""Host rules and request parsing of the proxy, without sockets: which names and addresses a
rule admits, which resolved addresses count as public, how request heads are read."""
import pathlib
import socket
import subprocess
import sys

import pytest

from sbxc.runtime import proxy_match as match
from sbxc.runtime import proxy_proto as proto
from support.addrs import public_edges, public_v4


@pytest.fixture(autouse=True)
def _no_connections(monkeypatch):
    """The addresses below (public, private, link-local) are data for classification only.
    Should a change make any of it open a connection, it fails here instead of sending
    anything off this machine."""
    def refuse(*_a, **_k):
        raise AssertionError("test_proxy_match must not connect or resolve anything")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def rules(*specs):
    return match.Rules([(host, ports, f"test:{i}") for i, (host, ports) in enumerate(specs)])


def admitted(r, host, port=443):
    kind, value = match.parse_host(host)
    return r.admit(kind, value, port)[0] is not None


def test_exact_name_case_trailing_dot_and_default_ports():
    r = rules(("Example.ORG.", None))
    for host in ("example.org", "EXAMPLE.org", "example.org.", "eXample.Org."):
        assert admitted(r, host, 443) and admitted(r, host, 80)
    assert not admitted(r, "example.org", 8443)
    assert not admitted(r, "www.example.org")
    assert not admitted(r, "example.org.evil")
    rule, why = r.admit("name", "example.org", 22)
    assert rule is None and "port 22" in why and "443" in why


def test_wildcard_admits_exactly_one_more_label():
    r = rules(("*.files.example.org", None))
    assert admitted(r, "a.files.example.org")
    assert admitted(r, "A-B.Files.Example.org.")
    assert not admitted(r, "files.example.org")          # the parent itself
    assert not admitted(r, "a.b.files.example.org")      # two levels
    assert not admitted(r, "afiles.example.org")


def test_idna_forms_compare_in_ascii():
    r = rules(("bücher.example", None))
    assert admitted(r, "xn--bcher-kva.example")
    assert admitted(r, "BÜCHER.example.")
    r = rules(("xn--bcher-kva.example", (443,)))
    assert admitted(r, "bücher.example")
    with pytest.raises(match.BadTarget, match="invalid IDNA"):
        match.parse_host("xn--zzzzzzz-.example")
    with pytest.raises(match.BadTarget, match="2003 and 2008"):
        match.parse_host("faß.example")
    with pytest.raises(match.BadTarget):
        match.parse_host("exa mple.org")


def test_address_literals_need_an_address_rule():
    r = rules(("127.0.0.2", (5432,)), ("[::1]", (8080,)), ("example.org", None))
    assert admitted(r, "127.0.0.2", 5432)
    assert not admitted(r, "127.0.0.2", 443)
    assert admitted(r, "[::1]", 8080) and admitted(r, "::1", 8080)
    assert admitted(r, "[0:0:0:0:0:0:0:1]", 8080)
    assert not admitted(r, "127.0.0.3", 5432)
    # A mapped IPv6 address is the IPv4 address it stands for.
    assert admitted(r, "[::ffff:127.0.0.2]", 5432)
    # A name rule never admits a literal, nor an address spelt as a name.
    r = rules(("localhost", None))
    assert not admitted(r, "127.0.0.1")
    for spelling in ("127.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "127.000.000.001", "127.0.0.1."):
        with pytest.raises(match.BadTarget):
            match.parse_host(spelling)


@pytest.mark.parametrize("bad", [
    "", "*", "*.org", "a.*.example.org", "ex*ample.org", "127.0.0.*", "fe80::1%eth0", "-" * 64 + ".org", "a..b",
])
def test_unusable_rules_raise(bad):
    with pytest.raises(ValueError):
        match.parse_rule(bad)


@pytest.mark.parametrize("port", [0, 65536, "443", -1])
def test_bad_rule_ports_raise(port):
    with pytest.raises(ValueError):
        match.parse_rule("example.org", (port,))


NOT_PUBLIC = [
    "0.0.0.0", "10.0.0.1", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10", "169.254.169.254",
    "172.16.0.1", "172.31.255.255", "192.168.1.1", "192.0.2.1", "198.18.0.1", "224.0.0.1", "239.1.2.3",
    "240.0.0.1", "255.255.255.255",
    "::", "::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::127.0.0.1",
    "fc00::1", "fd12:3456::1", "fe80::1", "fec0::1", "ff02::1", "2001:db8::1", "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2002:a00:1::1", "100::1", "64:ff9b:1::1",
]
def _embedded(v4: str) -> list:
    """``v4`` in the IPv6 forms the classifier unwraps: mapped, NAT64, 6to4."""
    import ipaddress

    packed = ipaddress.ip_address(v4).packed
    return ["::ffff:" + v4, str(ipaddress.IPv6Address(b"\x00\x64\xff\x9b" + bytes(8) + packed)),
            str(ipaddress.IPv6Address(b"\x20\x02" + packed + bytes(9) + b"\x01"))]


# The addresses just outside each special range that the standard library calls public,
# computed (support/addrs.py): no routable address stands in the tests.
PUBLIC_V4 = public_v4()
PUBLIC = public_edges() + _embedded(PUBLIC_V4)


def test_the_public_edges_are_many():
    # Not a vacuous parametrization: both families, most of the table's ranges.
    assert len(PUBLIC) >= 30 and any(":" in a for a in PUBLIC) and any(":" not in a for a in PUBLIC)


@pytest.mark.parametrize("text", NOT_PUBLIC)
def test_special_addresses_are_not_public(text):
    family, packed = match.parse_addr(text)
    assert not match.is_public(family, packed)


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses(text):
    # Classification only: nothing here connects anywhere.
    family, packed = match.parse_addr(text)
    assert match.is_public(family, packed)


def test_resolved_address_usable_only_when_public_or_named_exactly():
    r = rules(("127.0.0.1", (8080,)))
    v4 = match.parse_addr("127.0.0.1")
    assert r.usable(*v4, 8080)
    assert not r.usable(*v4, 8081)
    assert not r.usable(*match.parse_addr("127.0.0.2"), 8080)
    assert r.usable(*match.parse_addr("::ffff:127.0.0.1"), 8080)
    assert r.usable(*match.parse_addr(PUBLIC_V4), 8080)


# --- request heads -------------------------------------------------------------------

def test_connect_head():
    req = proto.parse_request(b"CONNECT Example.org:443 HTTP/1.1\r\nHost: example.ORG:443")
    assert (req.connect, req.kind, req.host, req.port) == (True, "name", "example.org", 443)
    assert proto.parse_request(b"CONNECT [::1]:8080 HTTP/1.1\r\nHost: [::1]:8080").host[0] == socket.AF_INET6
    # A Host without a port stands for the target's port.
    assert proto.parse_request(b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org").port == 443


@pytest.mark.parametrize("head, status", [
    (b"CONNECT example.org:443 HTTP/1.1\r\nHost: other.org:443", 400),
    (b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:8443", 400),
    (b"CONNECT example.org HTTP/1.1", 400),
    (b"CONNECT ::1:443 HTTP/1.1", 400),
    (b"GET http://example.org/ HTTP/1.1\r\nHost: other.org", 400),
    (b"GET http://example.org/ HTTP/1.1\r\nHost: example.org:8080", 400),
    (b"GET http://example.org/ HTTP/1.1", 400),
    (b"GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\nHost: example.org", 400),
    (b"GET http://user@example.org/ HTTP/1.1\r\nHost: example.org", 400),
    (b"GET / HTTP/1.1\r\nHost: example.org", 400),
    (b"GET https://example.org/ HTTP/1.1\r\nHost: example.org", 400),
    (b"GET http://example.org/ HTTP/2.0\r\nHost: example.org", 505),
    (b"GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\n folded", 400),
    (b"GET http://example.org/ HTTP/1.1\r\nHost: example.org\nX: y", 400),
    (b"TRACE http://example.org/ HTTP/1.1\r\nHost: example.org", 405),
    (b"POST http://example.org/ HTTP/1.1\r\nHost: example.org\r\nTransfer-Encoding: chunked", 411),
    (b"POST http://example.org/ HTTP/1.1\r\nHost: example.org\r\nContent-Length: 1\r\nContent-Length: 2", 400),
    (b"GET http://example.org:0/ HTTP/1.1\r\nHost: example.org:0", 400),
    (b"GET http://xn--zzzzzzz-.org/ HTTP/1.1\r\nHost: xn--zzzzzzz-.org", 400),
])
def test_bad_heads(head, status):
    with pytest.raises(proto.HttpError) as e:
        proto.parse_request(head)
    assert e.value.status == status


def test_forwarded_head_is_rewritten_for_one_request():
    req = proto.parse_request(
        b"POST http://Example.org:8080/p?q=1#frag HTTP/1.1\r\nHost: example.org:8080\r\n"
        b"Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
        b"Content-Length: 3\r\nAccept: */*")
    assert (req.connect, req.host, req.port, req.body_length) == (False, "example.org", 8080, 3)
    assert req.forward_head == (b"POST /p?q=1 HTTP/1.1\r\nHost: example.org:8080\r\nContent-Length: 3\r\n"
                                b"Accept: */*\r\nConnection: close\r\n\r\n")
    req = proto.parse_request(b"GET http://example.org HTTP/1.0")
    assert req.forward_head == b"GET / HTTP/1.0\r\nHost: example.org\r\nConnection: close\r\n\r\n"


def test_import_and_start_stay_lean():
    # The exec path imports the proxy when host rules are in use and starts it before the
    # command: neither may pull in re, json (SPEC §5) or the socket/threading machinery
    # (the forked child loads those, in parallel with the sandbox's set-up).
    src = str(pathlib.Path(match.__file__).parents[2])
    code = (f"import sys; sys.path.insert(0, {src!r}); import sbxc.runtime.proxy as p; "
            "x = p.Proxy([('example.org', None, 't'), ('*.files.example.org', (443,), 't')]); x.start(); "
            "names = ('re', 'json', 'socket', 'threading', 'ipaddress', 'enum', 'encodings.idna', 'selectors'); "
            "print(sorted(m for m in names if m in sys.modules)); x.stop()")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
