"""stdout and stderr as one stream (a caller's ``2>&1``, a program reading both through one
pipe) keep the order the command wrote them in, on every backend (docs/runtime.md, "stderr,
the terminal, and what sbxc says after a run").

sbxc reads the command's stderr (for a sandbox tool's own messages and the hints after a
run). Relayed on its own while stdout went straight to the same file, a burst of stderr
lines reached the stream after stdout lines written later: a traceback below the output
that followed it. When sbxc's stdout and stderr are one file, pipe or socket, the command
gets the relay as both. Each case writes 200 alternating lines in one burst; before the
change every case but the separate-streams control came out reordered.
"""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

from conftest import ROOT_LANDLOCK_WARNING, SANDBOX_PYTHON, base_env, runc_for, sbxc_argv
from sbxc.runtime.hint import NETWORK_HINT

pytestmark = pytest.mark.live

BACKENDS = ("bwrap", "landlock", "oci")
N = 200
BURST = f'i=0; while [ $i -lt {N} ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done'
IN_ORDER = "".join(f"out {i}\nerr {i}\n" for i in range(N))


@pytest.fixture(params=BACKENDS)
def backend(request, bwrap_works):
    runc_for(request)
    return request.param


def _write_policy(project: str, backend: str, network: str = "false") -> str:
    path = os.path.join(project, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: {network}\n")
    return path


def _argv(policy: str, *cmd) -> list:
    return sbxc_argv("exec", "--policy", policy, "--", *cmd)


def _own(text: str) -> str:
    """The command's lines: without the plan's warning that Landlock as root prints once."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith(ROOT_LANDLOCK_WARNING))


@pytest.mark.parametrize("kind", ["pipe", "file", "socket"])
def test_one_stream_keeps_the_commands_order(backend, project, home, tmp_path, kind):
    policy = _write_policy(project, backend)
    env = base_env(home)
    argv = _argv(policy, "sh", "-c", BURST)
    if kind == "pipe":
        p = subprocess.run(argv, env=env, cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        rc, got = p.returncode, p.stdout.decode()
    elif kind == "file":
        out = tmp_path / "log"
        with open(out, "wb") as f:
            rc = subprocess.run(argv, env=env, cwd=project, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                timeout=60).returncode
        got = out.read_text()
    else:
        a, b = socket.socketpair()
        with a, b:
            proc = subprocess.Popen(argv, env=env, cwd=project, stdin=subprocess.DEVNULL, stdout=b, stderr=b)
            b.close()
            chunks = []
            while True:
                data = a.recv(65536)
                if not data:
                    break
                chunks.append(data)
            rc = proc.wait(timeout=60)
        got = b"".join(chunks).decode()
    assert rc == 0, got[-2000:]
    assert _own(got) == IN_ORDER, got[:600]


def test_separate_streams_stay_separate(backend, project, home, tmp_path):
    """Control: stdout to a file of its own and stderr to a pipe are still two streams, and
    the command's stdout is the caller's file itself (only one stream is relayed whole; under
    `runc run` a pipe of runc's, as before: docs/kubernetes.md)."""
    policy = _write_policy(project, backend)
    out = tmp_path / "out"
    with open(out, "wb") as f:
        p = subprocess.run(_argv(policy, "sh", "-c", BURST + '; [ -f /dev/stdout ] || echo "stdout is no file" >&2'),
                           env=base_env(home), cwd=project, stdin=subprocess.DEVNULL, stdout=f,
                           stderr=subprocess.PIPE, timeout=60)
    err = _own(p.stderr.decode())
    assert p.returncode == 0, err[-2000:]
    assert out.read_text() == "".join(f"out {i}\n" for i in range(N))
    assert err == "".join(f"err {i}\n" for i in range(N)) + ("stdout is no file\n" if backend == "oci" else ""), \
        err[-600:]


def test_a_reader_that_goes_away_ends_the_command(backend, project, home):
    """`sbxc exec -- yes 2>&1 | head -1`: the relay closes its end once the stream's reader
    is gone, so `yes` ends as it would writing there itself (a shell's 141; under runc the
    command is pid 1 and gets EPIPE instead: `yes` says so and exits 1, docs/kubernetes.md),
    rather than running on into a relay that drops what it writes."""
    policy = _write_policy(project, backend)
    proc = subprocess.Popen(_argv(policy, "yes"), env=base_env(home), cwd=project, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        first = proc.stdout.read(4096)
        proc.stdout.close()
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"y\ny\n" in first
    assert rc == (1 if backend == "oci" else 141), rc


def test_the_hint_follows_the_commands_output_in_one_stream(backend, project, home):
    """What sbxc says after a run still comes after all of the command's output, which kept
    its order: a failed lookup with the network off, in a stream read through one pipe."""
    policy = _write_policy(project, backend)
    cmd = ("echo before; " + SANDBOX_PYTHON + " -c 'import socket; socket.getaddrinfo(\"feedback.invalid\", 80)'; "
           "rc=$?; echo after; exit $rc")
    p = subprocess.run(_argv(policy, "sh", "-c", cmd), env=base_env(home), cwd=project, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    got = _own(p.stdout.decode())
    assert p.returncode == 1, got
    lines = got.splitlines()
    assert lines[0] == "before", got
    assert any("gaierror" in ln for ln in lines), got
    at = lines.index("after")
    assert all(not ln.startswith("sbxc:") for ln in lines[:at]), got
    assert lines[at + 1:] == [NETWORK_HINT.rstrip("\n")], got
