"""docs/seccomp.md and the tables in sbxc.backends.seccomp say the same."""
import os

from sbxc.backends import seccomp

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "seccomp.md")


def _doc() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def test_every_process_call_is_documented_with_its_rule():
    text = _doc()
    for name, (rule, why) in seccomp.PROCESS_CALLS.items():
        assert f"| `{name}` | {rule} | {why} |" in text, name


def test_every_family_is_documented():
    text = _doc()
    for nr, (name, why) in seccomp.SOCKET_FAMILIES.items():
        assert f"| {nr} | `{name}` | {why} |" in text, name
    assert set(seccomp.SOCKET_FAMILIES) == set(range(46))  # every family up to AF_MAX (46)


def test_every_host_ipc_call_is_documented():
    text = _doc()
    for name in seccomp.HOST_IPC_DENY:
        assert name in text, name


def test_process_table_decisions_are_applied():
    for name, (rule, _why) in seccomp.PROCESS_CALLS.items():
        assert rule in ("deny", "self", "allow"), name
        if rule == "deny":
            assert name in seccomp.BUILTIN_DENY, name
        assert (rule == "self") == (name in seccomp._SELF_ONLY), name
