"""Signals that reach sbxc as a run starts are not lost.

A timeout's SIGTERM or a Ctrl-C can come in the moment after sbxc installed its
forwarding handlers and before the sandbox's first process exists. Handled, the signal no
longer ends sbxc by its own action; dropped, the command would run to its end and sbxc
exit 0. It is kept and passed on as soon as the child exists. The window is hit
deterministically here: sbxc sends itself the signal right after installing the handlers.

On OCI a second window: runc's init, released, has not yet replaced itself by the
command. Its signal masks are the Go runtime's (it catches everything), so a signal sent
as it is would stay pending across the exec and be dropped there (the command is pid 1 of
its namespace, with no handler yet); such a target gets the signal's default action.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import PYTHON, base_env, runc_for  # noqa: E402

pytestmark = pytest.mark.live

EARLY = r"""
import os, signal, sys
from sbxc.runtime import supervise

main_pid = os.getpid()
sig = getattr(signal, os.environ["SBXC_TEST_SIGNAL"])
real = supervise.forward_signals
if os.environ["SBXC_TEST_WINDOW"] == "core":
    def forward_signals(handler):
        old = real(handler)
        if os.getpid() == main_pid:  # not in Landlock's reaper, which installs its own
            os.kill(main_pid, sig)  # the handler runs now
        return old
    supervise.forward_signals = forward_signals
else:
    # Landlock's reaper, once its handler is in place and before it forks the command: as
    # if sbxc had forwarded the signal to it then.
    from sbxc.runtime import landlock_reaper

    def reaper_handlers(handler):
        old = real(handler)
        os.kill(os.getpid(), sig)
        return old
    landlock_reaper.forward_signals = reaper_handlers

from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""

POLICY = "sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("backend,window,network", [
    ("bwrap", "core", "false"), ("landlock", "core", "false"), ("landlock", "reaper", "false"),
    ("oci", "core", "false"), ("oci", "core", "[allow 127.0.0.1:9]")])
def test_a_signal_before_the_child_exists_reaches_the_run(sbxc, backend, window, network, sig, request):
    runc_for(request)
    ppath = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(ppath, "w") as f:
        f.write(POLICY.format(backend=backend).replace("network: false", f"network: {network}"))
    marker = os.path.join(sbxc.project, "finished")
    script = f"sleep 5; touch {marker}; echo finished-normally"
    argv = ["exec", "--policy", ppath, "--", "/bin/sh", "-c", script]
    env = base_env(sbxc.home)
    # The control: the same command, not signalled, runs to its end.
    quick = subprocess.run([PYTHON, "-m", "sbxc", *argv[:-1], script.replace("sleep 5", "sleep 0")], env=env,
                           cwd=sbxc.project, capture_output=True, text=True, timeout=60)
    assert quick.returncode == 0 and "finished-normally" in quick.stdout, quick.stderr
    os.unlink(marker)
    start = time.monotonic()
    p = subprocess.run([PYTHON, "-c", EARLY, *argv], env=dict(env, SBXC_TEST_SIGNAL=sig, SBXC_TEST_WINDOW=window),
                       cwd=sbxc.project,
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert "finished-normally" not in p.stdout and not os.path.exists(marker), "the signal was lost: " + p.stderr
    assert p.returncode == 128 + getattr(signal, sig), (p.returncode, p.stderr)
    assert took < 4.5, took
    assert "Traceback" not in p.stderr, p.stderr


def test_runc_init_is_taken_for_a_process_without_handlers(tmp_path):
    """``signal_masks`` with runc's path reports no handler for a process that is still
    runc's init (its argv ``RUNC init``), whatever it catches; the control: the same
    process's real masks show the handler it set."""
    from sbxc.runtime.oci_run import signal_masks

    (tmp_path / "init").write_text("trap 'exit 3' TERM\nwhile :; do sleep 0.05; done\n")
    p = subprocess.Popen(["bash", "-c", "exec -a /usr/sbin/runc sh init"], cwd=tmp_path)
    try:
        bit = 1 << (signal.SIGTERM - 1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not signal_masks(p.pid)[0] & bit:
            time.sleep(0.02)
        assert signal_masks(p.pid)[0] & bit  # the control: it catches SIGTERM
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[:2] == [b"/usr/sbin/runc", b"init"]
        assert signal_masks(p.pid, "/usr/sbin/runc") == (0, 0)
        assert signal_masks(p.pid, "/usr/bin/other")[0] & bit  # another program's name: its masks
    finally:
        p.kill()
        p.wait()
