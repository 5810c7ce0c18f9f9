"""The masks the OCI runner reads before it forwards a signal to a pid-1 command
(runtime/oci_run.signal_masks): never the Go runtime's of a runc init that is still inside
its exec of the command. Live runs of the forwarding: tests/live/test_feedback.py,
tests/live/test_oci_host_rules.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from sbxc.runtime import oci_run


def _masks_of_self():
    caught = ignored = 0
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                caught = int(line.split()[1], 16)
            elif line.startswith("SigIgn:"):
                ignored = int(line.split()[1], 16)
    return caught, ignored


def test_a_process_inside_its_exec_is_waited_for(monkeypatch):
    """While the program's code is not mapped yet, the masks are not read: the runner waits
    (here two looks), then reads them."""
    looks = []

    def mid_exec(pid):
        looks.append(pid)
        return len(looks) < 3

    monkeypatch.setattr(oci_run, "_mid_exec", mid_exec)
    monkeypatch.setattr(oci_run, "_is_runc_init", lambda pid, runc: False)
    assert oci_run.signal_masks(os.getpid(), "/usr/sbin/runc") == _masks_of_self()
    assert looks == [os.getpid()] * 3


def test_a_process_that_stays_inside_its_exec_is_read_after_the_deadline(monkeypatch):
    monkeypatch.setattr(oci_run, "_mid_exec", lambda pid: True)
    monkeypatch.setattr(oci_run, "_is_runc_init", lambda pid, runc: False)
    assert oci_run.signal_masks(os.getpid(), "/usr/sbin/runc") == _masks_of_self()


def test_mid_exec_reads_the_kernels_startcode():
    """A running program has its code mapped; a zombie has no memory (not mid-exec either);
    a process that is gone is not."""
    assert oci_run._mid_exec(os.getpid()) is False
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    while True:
        try:
            with open(f"/proc/{p.pid}/stat", "rb") as f:
                if f.read().rpartition(b") ")[2][:1] == b"Z":
                    break
        except OSError:
            break
    assert oci_run._mid_exec(p.pid) is False  # a zombie
    p.wait()
    assert oci_run._mid_exec(p.pid) is False  # gone
    # The control: field 26 of a live process is its code's start, not 0.
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        assert int(f.read().rpartition(b") ")[2].split()[23]) > 1


def test_the_go_runtime_of_runc_init_is_never_read(monkeypatch):
    monkeypatch.setattr(oci_run, "_is_runc_init", lambda pid, runc: True)
    assert oci_run.signal_masks(os.getpid(), "/usr/sbin/runc") == (0, 0)
    assert oci_run.signal_masks(os.getpid(), "") == _masks_of_self()  # without runc: as they are
