"""Live seccomp: the compiled BPF loaded into a real process. Every category of the builtin
deny list answers EPERM (not a crash), the same call without the filter answers something
else (the control), and calls from another ABI (i386 ``int 0x80``, x32) are refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from sbxc.backends import seccomp  # noqa: E402
from sbxc.compiler.plan import NET_OFF, NET_ON, Network, SyscallPlan  # noqa: E402

pytestmark = [pytest.mark.live]

if os.uname().machine != "x86_64":
    pytest.skip("the probes use x86_64 syscall numbers", allow_module_level=True)

EPERM = 1

# The probe runs in a fresh interpreter: load the filter (when given), then try each
# call with arguments that cannot do harm, and print {name: result or -errno}.
PROBE = textwrap.dedent(r'''
    import ctypes, json, mmap, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if len(sys.argv) > 1 and sys.argv[1]:
        bpf = bytes.fromhex(open(sys.argv[1]).read())
        class F(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        buf = ctypes.create_string_buffer(bpf, len(bpf))
        prog = F(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
        assert libc.prctl(38, 1, 0, 0, 0) == 0
        assert libc.syscall(317, 1, 0, ctypes.byref(prog)) == 0, ctypes.get_errno()
    L = ctypes.c_long
    def call(nr, *args):
        r = libc.syscall(L(nr), *[L(a) for a in args])
        return -ctypes.get_errno() if r == -1 else 0
    null = os.open("/dev/null", os.O_RDONLY)
    out = {
        "ptrace": call(101, 16, 999999, 0, 0),                  # PTRACE_ATTACH to no such pid
        "process_vm_readv": call(310, 999999, 0, 0, 0, 0, 0),
        "keyctl": call(250, 0, -3, 0),                          # KEYCTL_GET_KEYRING_ID @s
        "add_key": call(248, 0, 0, 0, 0, 0),
        "request_key": call(249, 0, 0, 0, 0),
        "bpf": call(321, 9999, 0, 0),
        "userfaultfd": call(323, -1),
        "perf_event_open": call(298, 0, 0, -1, -1, 0),
        "io_uring_setup": call(425, 0, 0),
        "mount": call(165, 0, 0, 0, 0, 0),
        "fsopen": call(430, 0, 0),
        "kexec_load": call(246, 0, 0, 0, -1),
        "init_module": call(175, 0, 0, 0),
        "open_by_handle_at": call(304, -1, 0, 0),
        "setns": call(308, -1, 0),
        "pidfd_getfd": call(438, -1, -1, 0),
        "swapon": call(167, 0, 0),
        "reboot": call(169, 0, 0, 0, 0),
        # CLONE_NEWUSER | CLONE_FS is invalid: the kernel says EINVAL without forking.
        "clone CLONE_NEWUSER": call(56, 0x10000000 | 0x200, 0, 0, 0, 0),
        "unshare CLONE_NEWUSER": call(272, 0x10000000 | 0x200),
        "ioctl TIOCSTI": call(16, null, 0x5412, 0),
        # the kernel reads the request as an unsigned int: high bits must not evade the filter
        "ioctl TIOCSTI high bits": call(16, null, 0x100005412, 0),
        "personality ADDR_NO_RANDOMIZE": call(135, 0x0040000),
        "x32 getpid": call(0x40000000 | 39),
    }
    # int 0x80 from a 64-bit process: the i386 entry point (AUDIT_ARCH_I386 to seccomp).
    code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])   # mov eax, 20 (getpid); int 0x80; ret
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    r = fn()
    out["i386 int 0x80 getpid"] = r if r < 0 else (0 if r == os.getpid() else r)
    # controls that must keep working under the filter
    out["control getpid"] = call(39)
    out["control personality query"] = 0 if libc.personality(ctypes.c_ulong(0xFFFFFFFF)) >= 0 else -1
    out["control unshare 0"] = call(272, 0)
    print(json.dumps(out))
''')

# Calls whose unfiltered answer is not EPERM for an unprivileged caller either (no
# capability check comes first), so the control holds in both CI runs.
NOT_EPERM_UNPRIVILEGED = {
    "ptrace", "process_vm_readv", "keyctl", "add_key", "request_key", "perf_event_open", "setns",
    "pidfd_getfd", "clone CLONE_NEWUSER", "unshare CLONE_NEWUSER", "ioctl TIOCSTI", "ioctl TIOCSTI high bits",
    "personality ADDR_NO_RANDOMIZE", "x32 getpid", "i386 int 0x80 getpid", "mount",
}


def _probe(tmp_path, bpf: bytes | None) -> dict:
    arg = ""
    if bpf is not None:
        arg = str(tmp_path / "f.hex")
        with open(arg, "w") as f:
            f.write(bpf.hex())
    p = subprocess.run([sys.executable, "-c", PROBE, arg], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _filter(purpose: str, network=NET_ON) -> bytes:
    return seccomp.compile_filter(SyscallPlan(tuple(sorted(seccomp.BUILTIN_DENY))), "x86_64",
                                  purpose=purpose, network=Network(network))


@pytest.mark.parametrize("purpose", ["bwrap", "landlock"])
def test_each_category_eperm_with_control(tmp_path, purpose):
    without = _probe(tmp_path, None)
    with_ = _probe(tmp_path, _filter(purpose))
    root = os.geteuid() == 0
    for name, val in with_.items():
        if name.startswith("control"):
            assert val == 0, (name, val)
            continue
        assert val == -EPERM, f"{name}: {val} under the filter"
        if root or name in NOT_EPERM_UNPRIVILEGED:
            assert without[name] != -EPERM, f"{name}: EPERM even without the filter, so this probe proves nothing"


def test_every_builtin_name_resolves():
    import pyseccomp

    for name in seccomp.BUILTIN_DENY:
        assert pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, name) != -1, name
        assert seccomp.BUILTIN_DENY[name] and "\n" not in seccomp.BUILTIN_DENY[name]


def test_denied_syscall_under_landlock_runtime(tmp_path):
    """The whole pipeline: the Landlock runner loads the plan's bytes; a denied call is EPERM."""
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() < 6:
        pytest.skip("Landlock ABI 6 needed")
    os.chmod(tmp_path, 0o755)
    root = str(tmp_path / "tree")
    os.makedirs(root)
    cases.build_tree(root)
    plan = cases.make_plan(cases.shared_rules(root), project=f"{root}/proj")
    script = "import ctypes\nl=ctypes.CDLL(None,use_errno=True)\nprint(l.syscall(101,16,1,0,0), ctypes.get_errno())\n"
    r = cases.run_plan(plan, "landlock", ["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, "-c", script], cwd=f"{root}/proj", tmp=str(tmp_path))
    assert r.out.split() == ["-1", "1"], r
