"""The command cannot change the line discipline of the terminal it inherited.

TIOCSETD on the caller's terminal outlives the run: N_NULL (27) makes the terminal drop
all input and output once sbxc has exited, and with dev.tty.ldisc_autoload=1 the call
also loads kernel modules. The test makes its own pseudo-terminal, hands its slave end to
the command as stdin, and reads the discipline back afterwards (TIOCGETD).
"""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import textwrap

import pytest

from conftest import SANDBOX_PYTHON, runc_for

pytestmark = pytest.mark.live

TIOCSETD = 0x5423
TIOCGETD = 0x5424
TIOCCONS = 0x541D
TIOCEXCL = 0x540C
TIOCGEXCL = 0x80045440
N_TTY = 0
N_NULL = 27

_PROBE = textwrap.dedent(f"""
    import fcntl, struct
    for name, req, arg in (("setd", {TIOCSETD}, struct.pack("i", {N_NULL})), ("cons", {TIOCCONS}, 0),
                           ("excl", {TIOCEXCL}, 0)):
        try:
            fcntl.ioctl(0, req, arg)
            print(name, "ok")
        except OSError as e:
            print(name, "errno", e.errno)
""")


def _excl(fd) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, TIOCGEXCL, b"\0" * 4))[0]


def _ldisc(fd) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, TIOCGETD, b"\0" * 4))[0]


def _policy(backend):
    return f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n"


@pytest.mark.parametrize("backend", ("bwrap", "landlock", "oci"))
def test_tiocsetd_refused_on_inherited_terminal(sbxc, backend, request):
    runc_for(request)  # runc's container gets the caller's terminal as it is (no console socket)
    master, slave = pty.openpty()
    try:
        r = sbxc(_policy(backend), SANDBOX_PYTHON, "-c", _PROBE, stdin=slave)
        assert r.rc == 0, r
        assert "setd errno 1" in r.out, r  # EPERM from the filter
        assert "cons errno 1" in r.out, r
        assert "excl errno 1" in r.out, r  # exclusive mode would refuse every later open of it
        assert _ldisc(slave) == N_TTY  # the caller's terminal is untouched
        assert _excl(slave) == 0
    finally:
        os.close(master)
        os.close(slave)


def test_control_tiocsetd_works_outside():
    master, slave = pty.openpty()
    try:
        p = subprocess.run([SANDBOX_PYTHON, "-c", _PROBE], stdin=slave, capture_output=True, text=True, timeout=30)
        assert "setd ok" in p.stdout and "excl ok" in p.stdout, p
        assert _ldisc(slave) == N_NULL  # the escape the filter stops: it outlives the process
        assert _excl(slave) == 1
    finally:
        os.close(master)
        os.close(slave)
