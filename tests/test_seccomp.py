"""The seccomp compiler without loading anything: the table, determinism, errors."""
from __future__ import annotations

import pytest

from sbxc.backends import seccomp
from sbxc.compiler.plan import BUILTIN_SPAN, NET_OFF, NET_ON, NET_RULES, Network, NetRule, SyscallPlan


def _plan(extra=()):
    return SyscallPlan(tuple(sorted(set(seccomp.BUILTIN_DENY) | set(extra))))


def test_builtin_table_covers_the_issue_list():
    must = {"ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key", "bpf",
            "userfaultfd", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register", "mount",
            "umount2", "pivot_root", "fsopen", "fsmount", "move_mount", "open_tree", "kexec_load",
            "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at"}
    assert must <= set(seccomp.BUILTIN_DENY)
    for name, why in {**seccomp.BUILTIN_DENY, **seccomp.BUILTIN_ARG_FILTERS}.items():
        assert why and "\n" not in why, name
    for key in ("ioctl TIOCSTI", "ioctl TIOCLINUX", "clone CLONE_NEWUSER", "unshare CLONE_NEWUSER"):
        assert key in seccomp.BUILTIN_ARG_FILTERS


@pytest.mark.parametrize("purpose", ["bwrap", "landlock"])
@pytest.mark.parametrize("mode", [NET_ON, NET_OFF, NET_RULES])
def test_deterministic_bytes(purpose, mode):
    net = Network(mode, (NetRule("connect", "tcp", 443, 443, BUILTIN_SPAN),) if mode == NET_RULES else ())
    a = seccomp.compile_filter(_plan(), "x86_64", purpose=purpose, network=net)
    b = seccomp.compile_filter(_plan(), "x86_64", purpose=purpose, network=net)
    assert a == b and len(a) % 8 == 0 and len(a) > 8


def test_socket_rules_only_for_landlock():
    off = Network(NET_OFF)
    bw = seccomp.compile_filter(_plan(), "x86_64", purpose="bwrap", network=off)
    ll = seccomp.compile_filter(_plan(), "x86_64", purpose="landlock", network=off)
    assert len(ll) > len(bw)


def test_policy_names_add_rules():
    base = seccomp.compile_filter(_plan(), "x86_64", purpose="bwrap", network=Network(NET_ON))
    more = seccomp.compile_filter(_plan(["chmod", "fchmodat"]), "x86_64", purpose="bwrap", network=Network(NET_ON))
    assert more != base


def test_unknown_name_and_arch_are_errors():
    with pytest.raises(ValueError, match="unknown syscall"):
        seccomp.compile_filter(_plan(["nosuchcall"]), "x86_64", purpose="bwrap", network=Network(NET_ON))
    with pytest.raises(ValueError, match="unsupported architecture"):
        seccomp.compile_filter(_plan(), "mips", purpose="bwrap", network=Network(NET_ON))
    with pytest.raises(ValueError, match="purpose"):
        seccomp.compile_filter(_plan(), "x86_64", purpose="other", network=Network(NET_ON))


def test_aarch64_filter_compiles():
    b = seccomp.compile_filter(_plan(), "aarch64", purpose="landlock", network=Network(NET_OFF))
    assert len(b) % 8 == 0


def test_optimised_filter_has_shorter_worst_path():
    import sys, os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    from seccomp import worst_path  # bench/seccomp.py

    f_opt = seccomp.export(seccomp.build_filter(_plan(), "x86_64", purpose="bwrap", network=Network(NET_ON)))
    f_def = seccomp.export(seccomp.build_filter(_plan(), "x86_64", purpose="bwrap", network=Network(NET_ON), optimize=False))
    assert worst_path(f_opt) < worst_path(f_def)


def test_setid_filters_cover_every_mode_setting_call():
    for call in ("chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat", "mknod", "mknodat"):
        assert any(k.split()[0] == call for k in seccomp.BUILTIN_ARG_FILTERS), call
    assert seccomp._ERRNO_OVERRIDE["openat2"] == __import__("errno").ENOSYS
    # the mode is the third argument of the *at calls, the second of the others
    assert seccomp._CHMOD_MODE_ARG == {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}
    assert seccomp._CREATE_MODE_ARG["openat"] == (2, 3) and seccomp._CREATE_MODE_ARG["mknodat"] == (None, 2)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_setid_filters_compile_with_the_calls_denied_outright(arch):
    # A policy denying chmod or open entirely replaces the argument filter, it does not clash.
    b = seccomp.compile_filter(_plan(["chmod", "fchmodat", "openat2", "open"]), arch, purpose="bwrap",
                               network=Network(NET_ON))
    assert len(b) % 8 == 0


def test_a_rule_on_a_call_libseccomp_cannot_name_fails_the_build():
    """A call that a rule names, unknown to libseccomp and without a number in
    NEW_SYSCALL_NUMBERS, stops the build instead of leaving the rule out; one with a
    number there is written with it. (Live: tests/live/test_seccomp_escapes.py.)"""
    from sbxc.compiler.plan import NET_ON, Network, SyscallPlan

    real = seccomp._pyseccomp()

    class Older:
        def __init__(self, unknown):
            self.unknown = unknown

        def __getattr__(self, name):
            return getattr(real, name)

        def resolve_syscall(self, arch, name):
            return -1 if name in self.unknown else real.resolve_syscall(arch, name)

    plan = SyscallPlan(tuple(sorted(seccomp.BUILTIN_DENY)))
    with pytest.raises(ValueError, match="no name for 'fchmod'"):
        seccomp.build_filter(plan, "x86_64", purpose="landlock", network=Network(NET_ON), lib=Older({"fchmod"}))
    f = seccomp.build_filter(plan, "x86_64", purpose="landlock", network=Network(NET_ON), lib=Older({"fchmodat2"}))
    assert seccomp.export(f)
    assert seccomp.NEW_SYSCALL_NUMBERS["fchmodat2"] == 452
