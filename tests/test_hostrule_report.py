"""The enforcement report of host rules the proxy can never use: every backend says
narrowed (everything they would allow is refused), never enforced; a usable neighbour
stays enforced."""
from __future__ import annotations

import os

import pytest

from compiler_fakes import fake_environ, fake_host
from sbxc import backends
from sbxc.compiler.api import compile_policy

BACKENDS = ("bwrap", "landlock", "sandbox-exec", "oci")


def report(tmp_path, rules, backend):
    (tmp_path / "sandbox.policy.yaml").write_text(
        "sbxc: 1\ncache: {tools: []}\nfilesystem: [read /]\nnetwork:\n" + "".join(f"  - {r}\n" for r in rules))
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    host = fake_host(home=home, **({"platform": "darwin"} if backend == "sandbox-exec" else {}))
    r = compile_policy(None, cwd=str(tmp_path), environ=fake_environ(home), host=host,
                       overrides={"backend": backend})
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    codes = [d.code for d in r.diagnostics]
    lowered = backends.lower(r.plan.backend, r.plan, host)
    return {v.subject: (v.status, v.why) for v in lowered.verdicts}, codes


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rule_the_proxy_never_uses_is_reported_narrowed(tmp_path, backend):
    rows, codes = report(tmp_path, ["allow localhost:8080", "allow build.invalid", "allow example.org"], backend)
    assert codes.count("SBX048") == 2
    status, why = rows["allow localhost:8080"]
    assert status == "narrowed" and "resolves to loopback" in why and "refuses every connection" in why
    status, why = rows["allow build.invalid"]
    assert status == "narrowed" and ".invalid never resolve" in why
    assert rows["allow example.org"][0] == "enforced"


@pytest.mark.parametrize("backend", BACKENDS)
def test_localhost_with_an_address_rule_for_its_port_is_enforced(tmp_path, backend):
    rows, codes = report(tmp_path, ["allow localhost:8080", "allow 127.0.0.1:8080"], backend)
    assert "SBX048" not in codes
    assert rows["allow localhost:8080"][0] == "enforced"


def test_landlock_host_rules_with_a_bind_rule_name_the_listen_hole(tmp_path):
    """seccomp cannot tell a bound socket from an unbound one at listen(): with a bind rule
    beside host rules an unbound socket listens on an ephemeral port, which the report
    must say (as it does for port rules alone); without one, listen() is refused."""
    rows, _ = report(tmp_path, ["allow example.org", "bind tcp 8095"], "landlock")
    status, why = rows["network: host rules"]
    assert status == "partial" and "never bound takes an ephemeral port" in why
    rows, _ = report(tmp_path, ["allow example.org"], "landlock")
    assert "ephemeral" not in rows["network: host rules"][1]


def _group_compile(tmp_path, index_url):
    (tmp_path / "sandbox.policy.yaml").write_text(
        "sbxc: 1\ncache: {tools: []}\nfilesystem: [read /]\nhost_groups: {idx: [from pip]}\nnetwork: [allow @idx]\n")
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    env = fake_environ(home, PIP_INDEX_URL=index_url, PIP_CONFIG_FILE=os.devnull)
    host = fake_host(home=home)
    r = compile_policy(None, cwd=str(tmp_path), environ=env, host=host, overrides={"backend": "bwrap"})
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    return r, backends.lower("bwrap", r.plan, host)


@pytest.mark.parametrize("url, why", [
    ("http://0.0.0.0:18082/simple/", "unspecified address"),
    ("http://*.example.org/simple/", "one host, not a pattern"),
    ("http://%6c%6f.example/simple/", "not a valid host name"),
    ("http://[::]:8080/simple/", "unspecified address"),
])
def test_a_group_host_no_rule_may_name_is_left_out(tmp_path, url, why):
    """A toolchain's configured URL gives a host only where an `allow` rule could name it:
    no wildcard, no unspecified address, no invalid name (the proxy would refuse to start,
    or a pattern would widen the list)."""
    r, lowered = _group_compile(tmp_path, url)
    assert not r.plan.network.hosts
    warned = [d for d in r.diagnostics if d.code == "SBX054"]
    assert len(warned) == 1 and why in warned[0].message, r.diagnostics
    # The control: a usable host from the same variable is kept.
    r, lowered = _group_compile(tmp_path, "https://Index.Example.ORG./simple/")
    assert [h.host for h in r.plan.network.hosts] == ["index.example.org"]
    assert not [d for d in r.diagnostics if d.code == "SBX054"]


def test_a_group_host_that_resolves_to_loopback_is_reported_narrowed(tmp_path):
    r, lowered = _group_compile(tmp_path, "http://localhost:18081/simple/")
    rows = {v.subject: v.status for v in lowered.verdicts}
    assert rows["allow localhost:18081 (@idx: pip index-url ($PIP_INDEX_URL))"] == "narrowed"
    assert any(d.code == "SBX048" and "localhost from pip index-url" in d.message for d in r.diagnostics)


def _locked_compile(tmp_path, child_groups):
    (tmp_path / "base.yaml").write_text(
        "sbxc: 1\ncache: {tools: []}\nfilesystem: [read /]\nnetwork: [allow @g]\n"
        "host_groups: {g: [\"127.0.0.1:1\", \"127.0.0.1:2\"]}\nlocked: [network]\n")
    (tmp_path / "sandbox.policy.yaml").write_text(f"sbxc: 1\nextends: [base.yaml]\nhost_groups: {child_groups}\n")
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    return compile_policy(None, cwd=str(tmp_path), environ=fake_environ(home), host=fake_host(home=home),
                          overrides={})


@pytest.mark.parametrize("groups", ['{g: ["127.0.0.1:18081"]}', '{g: ["127.0.0.1:1", "127.0.0.1:3"]}',
                                    '{h: ["127.0.0.1:9"]}'])
def test_a_locked_network_locks_the_groups_its_rules_name(tmp_path, groups):
    """Redefining a group would widen a locked network's rules without touching them."""
    r = _locked_compile(tmp_path, groups)
    assert r.plan is None
    d = [d for d in r.diagnostics if d.code == "SBX023"]
    assert len(d) == 1 and '"network" is locked' in d[0].message and " to @" in d[0].message, r.diagnostics


def test_a_locked_networks_group_may_lose_hosts(tmp_path):
    """The control: tightening a group under the lock is allowed, and takes effect."""
    r = _locked_compile(tmp_path, '{g: ["127.0.0.1:1"]}')
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    assert [(h.host, h.ports) for h in r.plan.network.hosts] == [("127.0.0.1", (1,))]
