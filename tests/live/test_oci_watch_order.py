"""The OCI run's watcher deletes a `runc run` container only once runc has made it.

Once runc has its config it goes on after sbxc is gone: it makes the container, starts
the command and writes its pid file last. A watcher that ran `runc delete --force` as soon
as sbxc died could come while runc was still making the container: the delete found none
(the command then ran on, unsupervised) or removed runc's state of half of one, leaving
runc and its waiting init behind with their cgroups. So the watcher waits for the run's pid
file, or for that runc's end (a zombie counts as ended: nothing may reap it), before the
delete.

These tests run the watcher's real script with the system's sh, with stand-ins for runc
(a process that writes the pid file late, or ends without one) and for the delete (a
script that records whether the pid file was there when it ran). sbxc's death is the
watcher's pipe closing with nothing said, as when sbxc is killed.
"""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from sbxc.runtime.oci_watch import Watcher

pytestmark = pytest.mark.live

SH = "/bin/sh"


def _wait_for(path: str, limit: float) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    return ""


def _delete(pid_file: str, log: str) -> list:
    return [SH, "-c", f'if [ -e "{pid_file}" ]; then echo after > "{log}"; else echo before > "{log}"; fi']


def _sbxc_dies(w: Watcher) -> None:
    os.close(w._w)  # what SIGKILL does to sbxc's end of the pipe: closed, nothing said
    w._w = -1


def test_the_delete_waits_for_the_pid_file(tmp_path):
    pid_file, log = str(tmp_path / "pid"), str(tmp_path / "log")
    runc = subprocess.Popen([SH, "-c", f'sleep 1.5; echo 123 > "{pid_file}"; sleep 10'])
    w = Watcher()
    try:
        w.start(SH, _delete(pid_file, log), made_when=(pid_file, runc.pid))
        _sbxc_dies(w)
        assert _wait_for(log, 15) == "after\n"
    finally:
        runc.kill()
        runc.wait()
        if w.pid:
            os.waitpid(w.pid, 0)


def test_the_delete_comes_at_once_when_runc_ended_without_a_pid_file(tmp_path):
    """The control for the order: a runc that ended (read end of file for its config, made
    nothing) is not waited for, also while it is a zombie nobody has reaped yet."""
    pid_file, log = str(tmp_path / "pid"), str(tmp_path / "log")
    runc = subprocess.Popen([SH, "-c", "exit 1"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{runc.pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                break  # ended, not reaped: a zombie
        time.sleep(0.01)
    w = Watcher()
    try:
        t0 = time.monotonic()
        w.start(SH, _delete(pid_file, log), made_when=(pid_file, runc.pid))
        _sbxc_dies(w)
        assert _wait_for(log, 15) == "before\n"
        assert time.monotonic() - t0 < 5
    finally:
        runc.wait()
        if w.pid:
            os.waitpid(w.pid, 0)


def test_a_watcher_told_done_deletes_nothing(tmp_path):
    """sbxc ending its run as meant stands the watcher down, whatever runc does."""
    pid_file, log = str(tmp_path / "pid"), str(tmp_path / "log")
    runc = subprocess.Popen([SH, "-c", "sleep 10"])
    w = Watcher()
    try:
        w.start(SH, _delete(pid_file, log), made_when=(pid_file, runc.pid))
        w.finish(stand_down=True)
        time.sleep(0.5)
        assert not os.path.exists(log)
    finally:
        runc.kill()
        runc.wait()
