"""Property: any bytes a person can put in a policy file end in diagnostics (exit 1) or a
plan, never in an exception, and in bounded time. Run in a child with a memory limit too."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree

import atexit
import shutil
import tempfile

ROOT = tempfile.mkdtemp(prefix="sbxc-fuzz-")
atexit.register(shutil.rmtree, ROOT, True)
make_tree(ROOT)
PROJ = os.path.join(ROOT, "proj")
HOME = os.path.join(ROOT, "home/user")
POLICY = os.path.join(PROJ, "sandbox.policy.yaml")


def check(data: bytes):
    from sbxc.commands import compile as compile_cmd
    from sbxc.compiler.api import compile_policy

    with open(POLICY, "wb") as f:
        f.write(data)
    started = time.monotonic()
    r = compile_policy(None, cwd=PROJ, environ=fake_environ(HOME), host=fake_host(home=HOME), overrides={},
                       paths=FakePaths(ROOT))
    # Generous: the machine may be busy; a hang or a blow-up is far beyond this.
    assert time.monotonic() - started < 10
    if r.plan is None:
        assert any(d.severity == "error" for d in r.diagnostics)
    for d in r.diagnostics:
        assert d.code.startswith("SBX") and d.message
    from sbxc.compiler.diagnostics import render_json, render_text

    render_text(r.diagnostics, r.lines, PROJ)
    render_json(r.diagnostics)
    out = io.StringIO()
    code = compile_cmd.run(["--check"], cwd=PROJ, environ=fake_environ(HOME), host=fake_host(home=HOME),
                           paths=FakePaths(ROOT), stdout=out, stderr=out)
    assert code in (0, 1)
    if r.plan is None:
        assert code == 1  # no plan: the check must fail


FRAGMENTS = [
    "sbxc: 1\n", "sbxc: 2\n", "extends: [builtin:default]\n", "extends: [./sandbox.policy.yaml]\n",
    "network: false\n", "network: [connect tcp 443]\n", "network: [bind tcp 1-65535, connect udp x]\n",
    "home: hidden\n", "home: [x]\n", "filesystem:\n", "  - read /\n", "  - write {project}\n", "  - mask ~/.ssh\n",
    "  - read? ${X:-/opt}\n", "  - wirte /x\n", "  - \"read \\\"/a b\\\"\"\n", "  - read {\n", "  - tmpfs ${\n",
    "cache: {tools: [pip], root: /var/tmp/x}\n", "env: {pass: [PATH], set: {A: b}}\n", "locked: [network, home]\n",
    "syscalls: {deny: [ptrace, nope]}\n", "landlock: {min_abi: 99}\n", "workspace: {max_sessions: -1}\n",
    "&a [*a]\n", "- x\n", "? [a]\n: b\n", "\t", "\x00", "'", "\"", "{", "}", "[", "]", ":", "- ", "*a\n", "&a ", "!!python/object:os.system x\n",
    "%YAML 1.1\n---\n", "...\n", "---\n", "\xe9", "\ufeff",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_random_bytes(data):
    check(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30))
def test_policy_shaped_text(parts):
    check("".join(parts).encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300), st.sampled_from(["filesystem", "network", "env.pass", "extends", "syscalls.deny", "project", "cache.root"]))
def test_any_string_in_any_slot(s, slot):
    import json

    value = json.dumps(s)  # a YAML double-quoted scalar holding any text
    if "." in slot:
        a, b = slot.split(".")
        text = f"sbxc: 1\n{a}:\n  {b}: [{value}]\n"
    elif slot in ("project",):
        text = f"sbxc: 1\n{slot}: {value}\n"
    else:
        text = f"sbxc: 1\n{slot}: [{value}]\n"
    check(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutations_of_a_valid_policy(data):
    base = open(os.path.join(os.path.dirname(__file__), "golden", "home_hidden_cache", "policy.yaml"), "rb").read()
    b = bytearray(base)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(b)))
        op = data.draw(st.sampled_from(["insert", "delete", "flip"]))
        if op == "insert":
            b[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and pos < len(b):
            del b[pos]
        elif pos < len(b):
            b[pos] ^= data.draw(st.integers(1, 255))
    check(bytes(b))


def test_bounded_memory_and_time_in_a_child():
    """The worst inputs we know, under a 1 GiB address-space limit and a wall-clock limit."""
    script = textwrap.dedent(f"""
        import resource, sys, os, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from compiler_fakes import FakePaths, fake_environ, fake_host
        from sbxc.compiler.api import compile_policy
        root, proj, home = {ROOT!r}, {PROJ!r}, {HOME!r}
        laughs = ["sbxc: 1", "a0: &a0 [" + ",".join(["x"] * 50) + "]"]
        for i in range(1, 12):
            laughs.append(f"a{{i}}: &a{{i}} [" + ",".join([f"*a{{i-1}}"] * 50) + "]")
        laughs.append("filesystem: *a11")
        inputs = [
            "\\n".join(laughs).encode(),
            b"sbxc: 1\\nfilesystem: " + b"[" * 200000 + b"]" * 200000,
            b"sbxc: 1\\n" + b"x" * (10 << 20),
            b"sbxc: 1\\nfilesystem:\\n" + b"  - read /usr\\n" * 60000,
            b"sbxc: 1\\nk: " + b"{{a: " * 50000 + b"}}" * 50000,
        ]
        for data in inputs:
            open(os.path.join(proj, "sandbox.policy.yaml"), "wb").write(data)
            t = time.monotonic()
            r = compile_policy(None, cwd=proj, environ=fake_environ(home), host=fake_host(home=home), overrides={{}},
                               paths=FakePaths(root))
            assert r.diagnostics or r.plan is not None
            assert time.monotonic() - t < 20, len(data)
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]
