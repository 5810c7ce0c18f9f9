"""Before an OCI run sbxc looks at the command's file (126/127 as a shell gives them, and
whether it is a script: oci_run.program). That file may lie in the project, which another
sandboxed command of the same project can write while sbxc looks: it can swap the file for
a link to a FIFO or a device. sbxc runs outside the sandbox, perhaps as root, and must never
open such a thing: a device's driver would run its open on the host.

The swap is made here at the worst moment, deterministically: right after sbxc's check of
the path by its name (access(2)) or its first open of it (of any kind), before it reads the
file. The link points at
a FIFO whose writer, a thread of the test, blocks until something opens the FIFO for
reading. Before the change sbxc stat'ed the path and then opened it again by its name,
which met the link after the check: the writer woke (sbxc had opened the FIFO, as root). Now sbxc takes an
``O_PATH`` descriptor first and reads only through it. Control: the same probe, with sbxc's
open of the FIFO made on purpose, sees the open.
"""
from __future__ import annotations

import os
import threading

import pytest

from conftest import PYTHON, base_env, run

pytestmark = pytest.mark.live

SWAP = r"""
import os, sys
from sbxc.runtime import oci_run

prog, link, mode = os.environ["SBXC_TEST_PROG"], os.environ["SBXC_TEST_LINK"], os.environ["SBXC_TEST_MODE"]
real = oci_run.os
done = []

class Watched:
    # The runner's os, but the first check or open of the command's path swaps it for the link.
    def __getattr__(self, name):
        fn = getattr(real, name)
        if name not in ("open", "access"):
            return fn
        def look(path, *a, **k):
            out = fn(path, *a, **k)
            if isinstance(path, str) and os.path.normpath(path) == prog and not done:
                done.append(1)
                os.rename(link, prog)
                if mode == "control":
                    # What the code before did next: open the path by its name again.
                    real.close(real.open(prog, real.O_RDONLY | real.O_NONBLOCK))
            return out
        return look

oci_run.os = Watched()
from sbxc.runtime import safeopen  # the runner's O_PATH look and its reopen live there
safeopen.os = Watched()
from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("mode", ["swap", "control"])
def test_a_program_swapped_for_a_fifo_is_never_opened_by_sbxc(runc, sbxc, mode):
    project = sbxc.project
    prog = os.path.join(project, "x.sh")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(prog, 0o755)
    fifo = os.path.join(project, "trap.fifo")
    os.mkfifo(fifo, 0o600)
    link = os.path.join(project, "x.link")
    os.symlink(fifo, link)
    opened = []

    def writer():
        fd = os.open(fifo, os.O_WRONLY)  # returns once something opens the FIFO for reading
        opened.append(not released)
        os.close(fd)

    released = False
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    ppath = os.path.join(project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: false\n")
    env = base_env(sbxc.home, {"SBXC_TEST_PROG": prog, "SBXC_TEST_LINK": link, "SBXC_TEST_MODE": mode})
    try:
        r = run([PYTHON, "-c", SWAP, "exec", "--policy", ppath, "--", "./x.sh"], env=env, cwd=project)
    finally:
        released = True
        try:
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go, if it still waits
        except OSError:
            pass
        t.join(10)
    assert os.path.islink(prog), "the swap was not made: the probe saw nothing"
    if mode == "control":
        assert opened == [True], (opened, r)
        return
    assert opened == [False], (opened, r)  # only the test's own open above
    # The command named a FIFO by the time it ran: the container's exec refuses it (126).
    assert r.rc == 126, r
