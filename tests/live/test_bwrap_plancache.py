"""The plan cache: a cached ``sbxc exec`` imports no compiler; entries follow the policy
files, the environment expansion read, and the flags."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from conftest import SRC, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

HEAVY = ("yaml", "lark", "pyseccomp", "re", "json", "argparse", "subprocess", "dataclasses", "fnmatch",
         "sbxc.compiler", "sbxc.backends")

_PROBE = r"""
import sys
from sbxc.commands.exec import exec_main
rc = exec_main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY_TOP} or m in {HEAVY})
sys.stdout.write("RC=%d HEAVY=%s\n" % (rc, ",".join(heavy)))
"""


def probe(argv, env, cwd):
    code = _PROBE.replace("{HEAVY_TOP}", repr({h for h in HEAVY if "." not in h})).replace("{HEAVY}", repr(set(HEAVY)))
    p = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    last = p.stdout.strip().split("\n")[-1]
    return p, last


def test_cached_exec_imports_no_compiler(sbxc):
    pol = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nnetwork: false\n"
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(pol)
    env = base_env(sbxc.home)
    # first run: a miss, the compiler is imported (the probe must be able to see that)
    p, last = probe(["--", "true"], env, sbxc.project)
    assert last.startswith("RC=0 "), p
    assert "yaml" in last and "lark" in last, p
    # second run: a hit
    p, last = probe(["--", "true"], env, sbxc.project)
    assert last == "RC=0 HEAVY=", p
    # --plan: json once, marshal afterwards
    plan = os.path.join(os.path.dirname(sbxc.project), "plan.json")  # outside the writable project
    assert run(sbxc_argv("compile", "-o", plan), env=env, cwd=sbxc.project).rc == 0
    probe(["--plan", plan, "--", "true"], env, sbxc.project)
    p, last = probe(["--plan", plan, "--", "true"], env, sbxc.project)
    assert last == "RC=0 HEAVY=", p


def test_cached_landlock_exec_imports_no_compiler_and_no_dataclasses(sbxc):
    """The Landlock hit re-checks folder listings (a fingerprint per folder): the function
    must come from a leaf without dataclasses (which pulls in re, inspect and enum)."""
    pol = "sbxc: 1\nextends: [builtin:default]\nbackend: landlock\nnetwork: false\n"
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(pol)
    env = base_env(sbxc.home)
    p, last = probe(["--", "true"], env, sbxc.project)
    assert last.startswith("RC=0 ") and "yaml" in last, p  # a miss: the probe sees the compiler
    # A hit. A folder whose listing the plan holds may gain an entry from another process
    # meanwhile (a miss, compiled again): a few tries until one is a hit.
    for _ in range(5):
        p, last = probe(["--", "true"], env, sbxc.project)
        if "yaml" not in last:
            break
    assert last == "RC=0 HEAVY=", p


def test_cache_follows_policy_env_and_flags(sbxc, tcp_server):
    reach = ["python3", "-c",
             f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {tcp_server.port}), timeout=3); print('reached')\n"
             "except OSError: print('blocked')"]
    on = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nnetwork: true\n"
    off = on.replace("network: true", "network: false")
    assert "reached" in sbxc(on, *reach).out
    assert "blocked" in sbxc(off, *reach).out  # same path, new content: a miss
    assert "reached" in sbxc(off, *reach, args=("--network=true",)).out  # flags are in the key
    assert "blocked" in sbxc(off, *reach).out
    # an extended file changing is seen too
    base = os.path.join(sbxc.project, "base.yaml")
    with open(base, "w") as f:
        f.write("sbxc: 1\nnetwork: true\n")
    child = "sbxc: 1\nextends: [builtin:default, base.yaml]\nbackend: bwrap\n"
    assert "reached" in sbxc(child, *reach).out
    with open(base, "w") as f:
        f.write("sbxc: 1\nnetwork: false\n")
    assert "blocked" in sbxc(child, *reach).out
    # an environment variable read by expansion is part of the entry
    os.mkdir(os.path.join(sbxc.project, "one"))
    os.mkdir(os.path.join(sbxc.project, "two"))
    envpol = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nfilesystem:\n  - mask {project}/${WHICH}\n"
    r = sbxc(envpol, "sh", "-c", "touch one/f && echo one-ok; touch two/f && echo two-ok", env={"WHICH": "one"})
    assert "one-ok" not in r.out and "two-ok" in r.out, r
    r = sbxc(envpol, "sh", "-c", "touch one/f && echo one-ok; touch two/f && echo two-ok", env={"WHICH": "two"})
    assert "one-ok" in r.out and "two-ok" not in r.out, r


def test_plans_folder_is_private(sbxc):
    from sbxc.runtime.planstore import plans_dir

    sbxc("sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\n", "true")
    d = plans_dir()
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    for name in os.listdir(d):
        try:
            est = os.lstat(os.path.join(d, name))
        except FileNotFoundError:
            continue  # another run's record or temporary file (the folder is per uid, not per test)
        assert est.st_uid == os.getuid(), name
        # The OCI runner's own, once any OCI run used this folder: its runs folder (private),
        # the empty rootfs and the empty file that masks bind (empty, read-only to all).
        if name == "runs":
            assert stat.S_ISDIR(est.st_mode) and stat.S_IMODE(est.st_mode) == 0o700, name
        elif name == "oci-rootfs":
            assert stat.S_ISDIR(est.st_mode) and stat.S_IMODE(est.st_mode) == 0o755, name
            assert os.listdir(os.path.join(d, name)) == [], name
        elif name == "oci-empty":
            assert stat.S_ISREG(est.st_mode) and stat.S_IMODE(est.st_mode) == 0o444 and est.st_size == 0, name
        else:
            assert stat.S_ISREG(est.st_mode) and stat.S_IMODE(est.st_mode) == 0o600, name
