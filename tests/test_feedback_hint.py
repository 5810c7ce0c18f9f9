"""The stderr scan and the lines printed after a failed run (sbxc.runtime.hint), the
current-folder warning (sbxc.runtime.runwarn) and the plan's network-off settings
(sbxc.planfile): fixed text, selected by the output, never written by it."""
from __future__ import annotations

from sbxc.planfile import OFFLINE_ENV, offline_env
from sbxc.runtime.hint import NETWORK_HINT, NETWORK_PATTERNS, StderrScan, denial_line
from sbxc.runtime.spec import Feedback
from sbxc.runtime.runwarn import cwd_warning

CHECKS = [
    ["/", "dir", "read", "builtin:default:12:10", "/"],
    ["/tmp", "dir", "tmpfs", "builtin:default:14:11", "/tmp"],
    ["/p", "dir", "write", "builtin:default:13:11", "{project}"],
    ["/p/secret", "dir", "mask", "/p/sandbox.policy.yaml:6:10", "{project}/secret"],
    ["/p/evil\x1b", "dir", "read", "/p/sandbox.policy.yaml:7:10", "{project}/evil\x1b"],
]


def scan_of(*chunks, network_off=True, landlock=False):
    s = StderrScan(network_off, landlock)
    for c in chunks:
        s.feed(c)
    s.finish()
    return s


def test_patterns_are_lower_case_and_the_hint_one_line():
    assert all(p == p.lower() for p in NETWORK_PATTERNS)
    assert NETWORK_HINT.endswith("\n") and NETWORK_HINT.count("\n") == 1


def test_network_text_split_over_chunks_is_found():
    assert scan_of(b"npm error getaddrinfo EAI_", b"AGAIN registry.invalid\n").network_hint()
    assert scan_of(b"Name or Service not KNOWN").network_hint()  # no final newline, any case
    assert not scan_of(b"Could not resolve host: x\n", network_off=False).network_hint()


def test_landlock_permission_needs_a_socket_word():
    perm = b"PermissionError: [Errno 1] Operation not permitted\n"
    assert not scan_of(perm, landlock=True).network_hint()
    assert scan_of(b'  File "/usr/lib/python3.11/socket.py", line 232\n', perm, landlock=True).network_hint()
    assert not scan_of(b'  File "/usr/lib/python3.11/socket.py"\n', perm, landlock=False).network_hint()


def test_denial_picks_the_nearest_rule_and_prints_only_plan_text():
    s = scan_of(b"/usr/bin/sh: 1: cannot create /p/secret/f\x1b[31mEVIL: Permission denied\n", landlock=True)
    line = denial_line(s, CHECKS, landlock=True)
    assert line.startswith("sbxc: hint: the sandbox refused that path: `mask {project}/secret` (/p/sandbox.policy.yaml:6:10)")
    assert "EVIL" not in line and "\x1b" not in line and line.count("\n") == 1


def test_denial_kinds_per_backend():
    ro = scan_of(b"touch: cannot touch '/etc/x': Read-only file system\n")
    assert "`read /`" in denial_line(ro, CHECKS, landlock=False)
    acc = scan_of(b"touch: cannot touch '/etc/x': Permission denied\n")
    assert denial_line(acc, CHECKS, landlock=False) == ""  # bwrap: the host's own permissions
    assert "`read /`" in denial_line(acc, CHECKS, landlock=True)
    tmp = scan_of(b"touch: cannot touch '/tmp/x': Permission denied\n")
    assert "`tmpfs /tmp`" in denial_line(tmp, CHECKS, landlock=True)
    writable = scan_of(b"/usr/bin/sh: cannot create /p/f: Permission denied\n")
    assert denial_line(writable, CHECKS, landlock=True) == ""


def test_the_programs_own_path_is_never_blamed():
    """"/usr/bin/sh: 1: cannot create later.key: ..." names a relative path: the shell's
    own path at the start is covered by `read /`, which did not refuse anything. No hint
    then, rather than a wrong one. The control: an absolute path after the program's is
    still judged, and a line that starts with the denied path itself (no program) too."""
    rel = scan_of(b"/usr/bin/sh: 1: cannot create later.key: Permission denied\n", landlock=True)
    assert denial_line(rel, CHECKS, landlock=True) == ""
    after = scan_of(b"/usr/bin/sh: 1: cannot create /etc/x: Permission denied\n", landlock=True)
    assert "`read /`" in denial_line(after, CHECKS, landlock=True)
    alone = scan_of(b"/etc/x: Permission denied\n", landlock=True)
    assert "`read /`" in denial_line(alone, CHECKS, landlock=True)


def test_plan_text_is_made_printable():
    s = scan_of(b"x: /p/evil\x1b/f: Read-only file system\n")
    line = denial_line(s, CHECKS, landlock=False)
    assert "\x1b" not in line and "`read {project}/evil?`" in line


def test_feedback_on_success_and_failure():
    fb = Feedback(True, False, CHECKS)
    s = scan_of(b"curl: (6) Could not resolve host: x.invalid\n", b"touch: /etc/x: Read-only file system\n")
    out = fb(6, s)
    assert out.startswith(NETWORK_HINT) and out.count("\n") == 2


def test_scan_memory_is_bounded():
    s = StderrScan(True, True)
    for _ in range(1000):
        s.feed(b"x" * 100000)
        s.feed(b"/a: Permission denied\n")
    assert len(s.partial) <= 4096 and len(s.denials) <= 16


def test_cwd_warning():
    assert "discarded" in cwd_warning(CHECKS, "/tmp", "bwrap")
    assert "cannot use it" in cwd_warning(CHECKS, "/tmp/a/b", "landlock")
    assert cwd_warning(CHECKS, "/p", "bwrap") == "" and cwd_warning(CHECKS, "/p/x", "landlock") == ""
    assert cwd_warning(CHECKS, "/tmp", "sandbox-exec") == ""


def test_offline_env_only_without_network():
    assert offline_env("off", "landlock") == [list(kv) for kv in OFFLINE_ENV]
    assert offline_env("rules", "bwrap") and not offline_env("rules", "landlock")
    assert not offline_env("on", "bwrap")
    # Host rules go through the proxy on every backend, OCI included: no offline settings.
    assert not offline_env("hosts", "bwrap") and not offline_env("hosts", "oci")
    names = dict(OFFLINE_ENV)
    assert names["npm_config_fetch_retries"] == "0" and names["PIP_RETRIES"] == "1"
