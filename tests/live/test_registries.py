"""The toolchain profiles against the package registries this host is configured to use
(SPEC §1): pip and npm reach their registries through the registries' own clients, with
only their profile's group allowed, and nothing else. Any "other host" here is a
``.invalid`` name or a loopback address, never a real external host."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock"]

PROBE = r'''
import os, sys, urllib.request
try:
    urllib.request.urlopen("https://other-host.example.invalid/simple/", timeout=10)
    print("REACHED")
except Exception as e:
    print("REFUSED", type(e).__name__)
'''


def gateway_rules(tool: str, home: str, project: str) -> str:
    """Address rules for registry hosts that this host's resolver maps to a non-public
    address (a gateway in front of the registries, as on a CI machine): the proxy connects
    to such an address only where a rule names it, exactly as a policy on this host would
    have to. Empty where the registries resolve to public addresses."""
    import socket

    from sbxc.compiler.hostgroups import Reader
    from sbxc.hostnames import is_public, parse_addr

    env = dict(os.environ, HOME=home)
    seen = set()
    for host, port, _src in Reader(env.get, home, project).read(tool):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            continue
        for info in infos:
            addr = parse_addr(info[4][0])
            if addr is not None and not is_public(*addr):
                text = info[4][0] if ":" not in info[4][0] else f"[{info[4][0]}]"
                seen.add(f"allow {text}:{port}")
    return "".join(f", {r}" for r in sorted(seen))


def policy(backend, profile, group, extra=""):
    from conftest import interpreter_rules

    return (f"sbxc: 1\nextends: [builtin:{profile}]\nbackend: {backend}\nnetwork: [allow @{group}{extra}]\n"
            + interpreter_rules())


@pytest.mark.parametrize("backend", BACKENDS)
def test_pip_install_through_its_group(sbxc, backend):
    target = os.path.join(sbxc.project, "site")
    extra = gateway_rules("pip", sbxc.home, sbxc.project)
    # Landlock as root refuses chmod of the command's own files (compile --check says so:
    # "use bwrap for root"), which pip install and download do to what they write; a dry
    # run resolves against the index through the proxy the same way and writes a report.
    install = not (backend == "landlock" and os.geteuid() == 0)
    report = os.path.join(sbxc.project, "report.json")
    verb = ["install", "--target", target] if install else ["install", "--dry-run", "--report", report]
    r = sbxc(policy(backend, "python", "python", extra), sys.executable, "-m", "pip", *verb, "--no-deps",
             "--no-cache-dir", "--disable-pip-version-check", "six==1.16.0", timeout=180)
    assert r.rc == 0, r
    if install:
        assert os.path.isfile(os.path.join(target, "six.py")), r
    else:
        import json

        items = json.load(open(report))["install"]
        assert [(i["metadata"]["name"], i["metadata"]["version"]) for i in items] == [("six", "1.16.0")], r
        assert items[0]["download_info"]["url"].startswith("https://"), r
    assert "sbxc: blocked" not in r.err, r
    # Anything else is refused, and named with the rule to add.
    with open(os.path.join(sbxc.project, "probe.py"), "w") as f:
        f.write(PROBE)
    r = sbxc(policy(backend, "python", "python", extra), sys.executable, "-I", "probe.py")
    assert "REFUSED" in r.out, r
    assert ('sbxc: blocked other-host.example.invalid:443 (not allowed by sandbox.policy.yaml:4); '
            'allow it with "allow other-host.example.invalid"') in r.err.splitlines(), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_npm_install_through_its_group(sbxc, backend):
    npm = shutil.which("npm", path="/usr/local/bin:/usr/bin:/bin")
    assert npm, "npm is installed by the set-up"
    with open(os.path.join(sbxc.project, "package.json"), "w") as f:
        f.write('{"name": "probe", "version": "1.0.0", "private": true}\n')
    extra = gateway_rules("npm", sbxc.home, sbxc.project)
    r = sbxc(policy(backend, "node", "node", extra), npm, "install", "--no-audit", "--no-fund", "--no-update-notifier",
             "is-number@7.0.0", timeout=240)
    assert r.rc == 0, r
    pkg = os.path.join(sbxc.project, "node_modules", "is-number", "package.json")
    assert os.path.isfile(pkg) and '"version": "7.0.0"' in open(pkg).read(), r
    # A registry the profile's group does not hold is refused with the hint.
    r = sbxc(policy(backend, "node", "node", extra), npm, "view", "--registry", "https://npm-other.example.invalid/",
             "is-number", "version", timeout=120)
    assert r.rc != 0
    assert 'sbxc: blocked npm-other.example.invalid:443 (not allowed by sandbox.policy.yaml:4); ' \
           'allow it with "allow npm-other.example.invalid"' in r.err.splitlines(), r
