"""Policy sources a sandboxed command can steer: an ``extends`` target it relinks to a
secret, an old policy's folder it moves to where the person runs next, and a candidate name
it links to a FIFO or device. Each is carried out by a real sandboxed command; the next
``sbxc exec`` must refuse it (or, for the FIFO, never open it)."""
import os
import re
import subprocess

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock"]
SECRET = "SECRET-XYZ"


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _exec(home, cwd, *cmd, args=()):
    return run(sbxc_argv("exec", *args, "--", *cmd), env=base_env(home), cwd=cwd)


def test_candidate_linked_to_a_fifo_is_never_opened(sbxc, tmp_path):
    """The command links ``sub/sandbox.policy.yaml`` to a FIFO (standing in for a device:
    opening one runs its driver). Neither the planting run's post-run watch nor the next
    run from sub/ may open it for reading (O_PATH, which runs no driver, is allowed).
    Control: a plain ``cat`` opening the link shows in the same trace."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), "sbxc: 1\nextends: [builtin:default]\n")
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    link = os.path.join(project, "sub", "sandbox.policy.yaml")
    os.makedirs(os.path.dirname(link))
    trace = str(tmp_path / "trace")

    def traced(cwd, *argv):
        return run(["strace", "-f", "-qq", "-e", "trace=openat,open", "-o", trace, *argv], env=base_env(home), cwd=cwd)

    def opened_for_reading():
        names = (link, "sandbox.policy.yaml", fifo)
        out = []
        for line in open(trace):
            m = re.search(r'open(?:at)?\([^"]*"([^"]*)", ([A-Z_|]+)', line)
            if m and "O_PATH" not in m.group(2) and (m.group(1) in names or m.group(1).endswith("sub/sandbox.policy.yaml")):
                out.append(line.strip())
        return out

    r = traced(project, *sbxc_argv("exec", "--", "ln", "-s", fifo, link))
    assert r.rc == 0 and os.path.islink(link), r
    assert opened_for_reading() == [], open(trace).read()[-3000:]
    r = traced(os.path.dirname(link), *sbxc_argv("exec", "--", "true"))
    assert opened_for_reading() == [], open(trace).read()[-3000:]
    # Control: the trace does see a read open of the link.
    r = traced(os.path.dirname(link), "timeout", "2", "cat", link)
    assert opened_for_reading(), open(trace).read()[-3000:]
