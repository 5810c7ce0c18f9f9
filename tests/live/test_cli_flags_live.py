"""The flag grammar in real runs: ``sbxc exec --network WORD -- CMD`` runs CMD (never
WORD) with the network the word says, on bwrap and on Landlock."""
from __future__ import annotations

import os

import pytest

from conftest import SANDBOX_PYTHON, base_env, run, sbxc_argv

pytestmark = pytest.mark.live

# Reaches the test's own loopback server; writes a marker in the project so the test can
# tell that this command ran, not the flag's word.
_PROBE = """
import socket, sys
open("ran", "w").write("yes")
try:
    s = socket.socket(); s.settimeout(3)  # on Landlock, seccomp refuses the socket itself
    s.connect(("127.0.0.1", int(sys.argv[1]))); print("reached", s.recv(10))
except OSError as e:
    print("refused", e.errno)
"""


def _landlock_ok() -> str:
    from sbxc.runtime.probe import landlock_abi

    abi = landlock_abi()
    return "" if abi >= 6 else f"Landlock ABI {abi} here; the test needs 6"


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
@pytest.mark.parametrize("flags,reach", [
    (["--network", "true"], True), (["--network", "on"], True), (["--network=yes"], True), (["--network"], True),
    (["--network", "false"], False), (["--network=off"], False), (["--no-network"], False),
])
def test_network_word_is_the_flags_value_and_the_command_runs(bwrap_works, project, home, tmp_path, tcp_server,
                                                             backend, flags, reach):
    if backend == "landlock" and _landlock_ok():
        pytest.skip(_landlock_ok())
    os.chmod(tmp_path, 0o755)
    # The file says the opposite, so the flag must win for the probe to see its value.
    pol = os.path.join(project, "sandbox.policy.yaml")
    with open(pol, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: {'false' if reach else 'true'}\n")
    marker = os.path.join(project, "ran")
    r = run(sbxc_argv("exec", "--policy", pol, "--backend", backend, *flags, "--",
                      SANDBOX_PYTHON, "-c", _PROBE, str(tcp_server.port)), env=base_env(home), cwd=project)
    assert os.path.exists(marker), f"the command did not run: {r}"
    assert r.rc == 0, r
    assert ("reached" in r.out) is reach and ("refused" in r.out) is (not reach), r
