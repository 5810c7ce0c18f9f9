"""A command that rewrites its own policy file (which usually lies in the writable project)
could loosen the next run. sbxc names the change as soon as the command ends."""
import pytest

pytestmark = pytest.mark.live

POLICY = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_rewritten_policy_is_named_after_the_run(sbxc, backend):
    r = sbxc(POLICY, "sh", "-c", "echo 'network: true' >> sandbox.policy.yaml", args=("--backend", backend))
    assert r.rc == 0, r
    assert "sandbox.policy.yaml changed while the command ran" in r.err
    assert r.err.count("sbxc: warning: the policy file") == 1


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_untouched_policy_gives_no_warning(sbxc, backend):
    r = sbxc(POLICY, "sh", "-c", "echo hello > out.txt", args=("--backend", backend))
    assert r.rc == 0, r
    assert "changed while the command ran" not in r.err
