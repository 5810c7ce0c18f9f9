"""Landlock through the real command line (``sbxc exec --backend landlock``): the builtin
profile, the plan cache, exit codes, the network flag and its hint."""
from __future__ import annotations

import os
import stat

import pytest

from conftest import SANDBOX_PYTHON, base_env, own_code_rules, run, sbxc_argv

pytestmark = pytest.mark.live


def _abi() -> int:
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi()


if _abi() < 6:
    pytest.skip(f"Landlock ABI {_abi()} here; these tests need 6", allow_module_level=True)


@pytest.fixture
def ll(project, home, tmp_path):
    os.chmod(tmp_path, 0o755)

    def go(policy, *cmd, args=(), env=None):
        flags = []
        if policy is not None:
            p = os.path.join(project, "sandbox.policy.yaml")
            with open(p, "w") as f:
                f.write(policy)
            flags = ["--policy", p]
        return run(sbxc_argv("exec", "--backend", "landlock", *flags, *args, "--", *cmd),
                   env=base_env(home, env), cwd=project)

    go.project, go.home = project, home
    return go


DEFAULT = "sbxc: 1\nextends: [builtin:default]\n"


def test_builtin_default_masks_credentials(ll):
    h = ll.home
    r = ll(None, "sh", "-c", f"cat {h}/.ssh/id_rsa {h}/.aws/credentials {h}/.netrc; cat {h}/.config/tool/settings;"
                             f"echo x > {h}/new && echo home-writable; echo y > {ll.project}/out && echo project-ok")
    assert "PRIVATE KEY" not in r.out and "SECRET" not in r.out, r
    assert "visible" in r.out and "project-ok" in r.out and "home-writable" not in r.out, r


def test_plan_cache_not_writable_inside(ll):
    from sbxc.runtime.planstore import plans_dir

    ll(DEFAULT, "true")
    d = plans_dir()
    assert os.path.isdir(d)
    # Control: a folder under /var/tmp that existed at compile time is writable. (New
    # names directly in /var/tmp are not: the cache root's mask splits /var/tmp's rule.)
    import shutil
    import tempfile

    ctl = tempfile.mkdtemp(prefix="sbxc-ll-ctl-", dir="/var/tmp")
    try:
        r = ll(DEFAULT + "filesystem:\n  - write /var/tmp\n" + own_code_rules(), "sh", "-c",
               f"ls -A {d} >/dev/null 2>&1 && echo listed; touch {d}/planted && echo planted;"
               f"echo ok > {ctl}/f && echo ctl")
    finally:
        shutil.rmtree(ctl)
    assert "planted" not in r.out and "listed" not in r.out, r
    assert "ctl" in r.out, r
    assert "planted" not in os.listdir(d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_command_not_found_and_not_executable(ll):
    assert ll(DEFAULT, "no-such-command-xyz").rc == 127
    f = os.path.join(ll.project, "noexec.sh")
    with open(f, "w") as fh:
        fh.write("#!/bin/sh\necho hi\n")
    assert ll(DEFAULT, f).rc == 126


def test_network_flag_both_directions(ll, tcp_server):
    client = [SANDBOX_PYTHON, "-c", f"import socket; s=socket.create_connection(('127.0.0.1',{tcp_server.port}),timeout=5); print(s.recv(10))"]
    on = "sbxc: 1\nextends: [builtin:default]\nnetwork: true\n"
    off = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
    assert "pong" in ll(on, *client).out
    assert "pong" not in ll(on, *client, args=("--network=false",)).out
    assert "pong" in ll(off, *client, args=("--network=true",)).out
    assert "pong" not in ll(off, *client).out


def test_dns_fails_and_hint_with_network_off(ll):
    off = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
    r = ll(off, SANDBOX_PYTHON, "-c", "import socket; socket.getaddrinfo('example.com', 443)")
    assert r.rc != 0
    r = ll(off, "sh", "-c", "echo 'curl: (6) Could not resolve host: example.com' >&2; exit 6")
    assert r.rc == 6 and "the network is off" in r.err, r


def test_root_cannot_write_proc_sys(ll):
    r = ll(DEFAULT, "sh", "-c", "cat /proc/sys/kernel/hostname >/dev/null && echo read-ok;"
                                "echo x > /proc/sys/kernel/hostname && echo wrote")
    assert "read-ok" in r.out and "wrote" not in r.out, r
