"""As root on Landlock, setxattrat(2) and removexattrat(2) (Linux 6.13) are refused like
setxattr: the libseccomp the compiler uses may not know their names, so the filter
names them by number (seccomp.NEW_SYSCALL_NUMBERS)."""
import os
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import landlock_abi, make_plan  # noqa: E402
from conftest import SANDBOX_PYTHON  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.root_only]  # what uid 0 can change on host files

if os.uname().machine != "x86_64":
    pytest.skip("the probe uses x86_64 syscall numbers", allow_module_level=True)

# setxattrat(AT_FDCWD, path, 0, "user.sbxc", &{value, size, flags}, sizeof): 463
PROBE = textwrap.dedent(r'''
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    class Args(ctypes.Structure):
        _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]
    val = ctypes.create_string_buffer(b"planted")
    a = Args(ctypes.addressof(val), 7, 0)
    r = libc.syscall(ctypes.c_long(463), ctypes.c_long(-100), sys.argv[1].encode(), ctypes.c_long(0),
                     b"user.sbxc", ctypes.byref(a), ctypes.c_long(ctypes.sizeof(a)))
    print(0 if r == 0 else -ctypes.get_errno())
''')


def test_setxattrat_refused_on_host_files(tree, tmp_path):
    if landlock_abi() < 6:
        pytest.skip("Landlock ABI 6 needed")
    target = f"{tree}/outside/o.txt"  # read-only to the sandbox, owned by root
    try:
        os.getxattr(target, "user.sbxc")
        pytest.fail("the attribute exists before the test")
    except OSError:
        pass
    plan = make_plan(cases.shared_rules(tree), project=f"{tree}/proj")
    r = cases.run_plan(plan, "landlock", [SANDBOX_PYTHON, "-c", PROBE, target], cwd=f"{tree}/proj", tmp=str(tmp_path))
    assert r.rc == 0 and r.out.strip() == "-1", r  # EPERM
    with pytest.raises(OSError):
        os.getxattr(target, "user.sbxc")
    # control: the same call outside the sandbox sets it (so the kernel has setxattrat)
    import subprocess

    p = subprocess.run([SANDBOX_PYTHON, "-c", PROBE, target], capture_output=True, text=True, timeout=60)
    if p.stdout.strip() == "-38":
        pytest.skip("this kernel has no setxattrat (Linux 6.13+)")
    assert p.stdout.strip() == "0", p
    assert os.getxattr(target, "user.sbxc") == b"planted"


# file_setattr(AT_FDCWD, path, &struct file_attr, sizeof, 0): 469 (Linux 6.17). It sets an
# inode's flags (chattr): FS_XFLAG_NODUMP (0x80) needs ownership only, which root has.
FLAGS_PROBE = textwrap.dedent(r'''
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    class Attr(ctypes.Structure):
        _fields_ = [("xflags", ctypes.c_uint64), ("extsize", ctypes.c_uint32), ("nextents", ctypes.c_uint32),
                    ("projid", ctypes.c_uint32), ("cowextsize", ctypes.c_uint32)]
    a = Attr(0x80, 0, 0, 0, 0)
    r = libc.syscall(ctypes.c_long(469), ctypes.c_long(-100), sys.argv[1].encode(), ctypes.byref(a),
                     ctypes.c_long(ctypes.sizeof(a)), ctypes.c_long(0))
    print(0 if r == 0 else -ctypes.get_errno())
''')


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_NODUMP_FL = 0x80086601, 0x40086602, 0x40  # linux/fs.h, x86_64


def _flags(path: str, clear: int = 0) -> int:
    """The inode flags of ``path`` (what lsattr shows), read by ioctl; ``clear``: bits to
    take off afterwards (what chattr -d does)."""
    import fcntl
    import struct

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, b"\0" * 8))[0]
        if clear:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("l", flags & ~clear))
        return flags
    finally:
        os.close(fd)


def _nodump(path: str) -> bool:
    return bool(_flags(path) & _FS_NODUMP_FL)


def _nodump_probe(tree, tmp_path, probe: str):
    """``probe`` (which tries to set nodump on a root-owned host file under a read-only
    rule) as root on Landlock, then outside the sandbox: (the run inside, the run outside,
    whether the flag was set inside). The flag is cleared again afterwards."""
    import subprocess

    if landlock_abi() < 6:
        pytest.skip("Landlock ABI 6 needed")
    target = f"{tree}/outside/o.txt"
    assert not _nodump(target)
    plan = make_plan(cases.shared_rules(tree), project=f"{tree}/proj")
    inside = cases.run_plan(plan, "landlock", [SANDBOX_PYTHON, "-c", probe, target], cwd=f"{tree}/proj",
                            tmp=str(tmp_path))
    set_inside = _nodump(target)
    outside = subprocess.run([SANDBOX_PYTHON, "-c", probe, target], capture_output=True, text=True, timeout=60)
    set_outside = _nodump(target)
    if set_outside:
        _flags(target, clear=_FS_NODUMP_FL)
        assert not _nodump(target)
    return inside, outside, set_inside, set_outside


def test_file_setattr_refused_on_host_files(tree, tmp_path):
    """file_setattr (Linux 6.17) changes a file's flags as chattr does; as root on Landlock
    it reached root-owned host files through a read-only rule, like the metadata calls
    ROOT_METADATA_DENY refuses. Named by number there too."""
    r, p, set_inside, set_outside = _nodump_probe(tree, tmp_path, FLAGS_PROBE)
    assert r.rc == 0 and r.out.strip() == "-1", r  # EPERM
    assert not set_inside
    # control: the same call outside the sandbox sets the flag (so the kernel and the file
    # system have it)
    if p.stdout.strip() in ("-38", "-95", "-25"):
        pytest.skip(f"no file_setattr for this file here (errno {p.stdout.strip()})")
    assert p.stdout.strip() == "0", p
    assert set_outside


IOCTL_PROBE = textwrap.dedent(r'''
    import fcntl, os, struct, sys
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)  # a read is all the ioctl needs
    flags = struct.unpack("l", fcntl.ioctl(fd, 0x80086601, b"\0" * 8))[0]  # FS_IOC_GETFLAGS
    out = []
    for req in (0x40086602, 0x40046602):  # FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS
        try:
            fcntl.ioctl(fd, req, struct.pack("l", flags | 0x40))  # FS_NODUMP_FL
            out.append(0)
        except OSError as e:
            out.append(-e.errno)
    print(*out)
''')


def test_inode_flag_ioctls_refused_on_host_files(tree, tmp_path):
    """chattr's ioctls do what file_setattr does, on any root-owned host file through a
    read-only rule (an fd opened for reading is enough; Landlock's ioctl right covers
    devices only): refused as root on Landlock like the metadata calls. The control: the
    same ioctls outside the sandbox set the flag."""
    r, p, set_inside, set_outside = _nodump_probe(tree, tmp_path, IOCTL_PROBE)
    assert r.rc == 0 and r.out.split() == ["-1", "-1"], r  # EPERM, both forms
    assert not set_inside
    assert p.returncode == 0 and p.stdout.split()[0] == "0", p
    assert set_outside
