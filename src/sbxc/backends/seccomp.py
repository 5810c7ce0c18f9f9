"""seccomp: the syscall policy compiled to BPF bytes at compile time.

``compile_filter`` uses libseccomp (through pyseccomp) and returns the raw BPF program;
the plan stores it hex-encoded, bwrap receives it with ``--seccomp FD`` and the Landlock
runtime loads it with seccomp(2) itself. Nothing at run time imports libseccomp.

Every refused call gets EPERM (never a kill), so a command sees an ordinary error it can
report. The exceptions are listed with their reason in ``_ERRNO_OVERRIDE``. The tables
(BUILTIN_DENY, BUILTIN_ARG_FILTERS, PROCESS_CALLS, HOST_IPC_DENY, SOCKET_FAMILIES) are
what docs/seccomp.md describes; a test keeps the two in step.
"""
from __future__ import annotations

import errno

from ..compiler.plan import NET_HOSTS, NET_OFF, NET_ON, NET_RULES, Network, SyscallPlan
from ..denylist import (  # noqa: F401  (the tables, data only; re-exported for the report and tests)
    ALLOWED_FAMILIES, BUILTIN_ARG_FILTERS, BUILTIN_DENY, HOST_IPC_DENY, LANDLOCK_SOCKET_GAPS, PROCESS_CALLS,
    ROOT_METADATA_DENY, SOCKET_FAMILIES, families_verdict_text, refused_families,
)


# Calls newer than some libseccomp this compiler may be built with (upstream 2.5.4 knows
# none after 451; Debian 12's point release knows up to 456, Ubuntu 22.04's 2.5.3 and
# RHEL 9's 2.5.2 fewer): a rule on a call libseccomp has no name for is written with its
# number from here, and a call in neither is an error, never a rule dropped in silence.
# Since Linux 5.1 new calls have one number on every architecture (asm-generic and
# x86_64 tables were aligned at 424).
NEW_SYSCALL_NUMBERS: dict[str, int] = {
    "clone3": 435,  # Linux 5.3: its flags are in memory, so it answers ENOSYS
    "openat2": 437,  # Linux 5.6: its mode is in memory, so it answers ENOSYS
    "fchmodat2": 452,  # Linux 6.6: its setuid/setgid rules, and as root on Landlock refused
    "setxattrat": 463,
    "removexattrat": 466,
    "file_setattr": 469,  # Linux 6.17
}


# How "the caller itself" is written, per "self" call: (argument of the target, the
# argument that picks what the target is, values of it that name a process or the
# caller's process group (never a whole user), its limit). The kernel reads these as
# int; the filter compares all 64 bits, so a high garbage bit is refused, never let by.
_PRIO_PROCESS, _PRIO_PGRP = 0, 1
_IOPRIO_WHO_PROCESS, _IOPRIO_WHO_PGRP = 1, 2
_SELF_ONLY: dict[str, tuple[int, tuple[int, tuple[int, ...], int] | None]] = {
    "prlimit64": (0, None),
    "setpriority": (1, (0, (_PRIO_PROCESS, _PRIO_PGRP), 3)),
    "sched_setaffinity": (0, None),
    "sched_setscheduler": (0, None),
    "sched_setparam": (0, None),
    "sched_setattr": (0, None),
    "ioprio_set": (1, (0, (_IOPRIO_WHO_PROCESS, _IOPRIO_WHO_PGRP), 4)),
    "migrate_pages": (0, None),
    "move_pages": (0, None),
    "get_robust_list": (0, None),
}
# prlimit64(pid, resource, new, old): reading another's limits (new == NULL) stays allowed.
_PRLIMIT_NEW_ARG = 2


# Denied with another errno than EPERM, and why.
_ERRNO_OVERRIDE = {
    # glibc (2.34+) tries clone3 first and falls back to clone only on ENOSYS; EPERM
    # would make every thread creation fail.
    "clone3": errno.ENOSYS,
    # Callers of openat2 (systemd, container tools) fall back to openat on ENOSYS only.
    "openat2": errno.ENOSYS,
}

# Kernel constants (include/uapi/linux/sched.h, asm-generic/ioctls.h, personality.h,
# socket.h). Kept here because libseccomp takes numbers for argument filters.
CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
TIOCCONS = 0x541D
TIOCSETD = 0x5423
TIOCEXCL = 0x540C
ADDR_NO_RANDOMIZE = 0x0040000
READ_IMPLIES_EXEC = 0x0400000
MMAP_PAGE_ZERO = 0x0100000
S_ISUID = 0o4000
S_ISGID = 0o2000
O_CREAT = 0o100
O_TMPFILE_BIT = 0o20000000  # __O_TMPFILE; O_TMPFILE also sets O_DIRECTORY
# Where the mode is, per call: (index of the flags argument or None, index of the mode).
# The kernel reads mode_t as an unsigned int; testing one bit ignores the high half.
_CHMOD_MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}
_CREATE_MODE_ARG = {"open": (1, 2), "openat": (2, 3), "creat": (None, 1), "mknod": (None, 1), "mknodat": (None, 2)}
AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
SOCK_STREAM = 1
SOCK_SEQPACKET = 5
SOCK_PACKET = 10  # with AF_INET the kernel makes an AF_PACKET socket of it
IPPROTO_SMC = 256  # with AF_INET or AF_INET6 (Linux 6.11) the kernel makes an SMC socket
# linux/fs.h, linux/fsverity.h, linux/fscrypt.h (x86_64 and aarch64 alike): the ioctls that
# change an inode's flags, attributes, version or encryption, as chattr and file_setattr do.
FS_IOC_SETFLAGS = 0x40086602
FS_IOC32_SETFLAGS = 0x40046602
FS_IOC_SETVERSION = 0x40087602
FS_IOC32_SETVERSION = 0x40047602
FS_IOC_FSSETXATTR = 0x401C5820
FS_IOC_ENABLE_VERITY = 0x40806685
FS_IOC_SET_ENCRYPTION_POLICY = 0x800C6613
INODE_ATTR_IOCTLS = (FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_SETVERSION, FS_IOC32_SETVERSION, FS_IOC_FSSETXATTR,
                     FS_IOC_ENABLE_VERITY, FS_IOC_SET_ENCRYPTION_POLICY)
SOCK_TYPE_MASK = 0xF
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000
# Highest address family number the kernel knows is below this (AF_MAX is 46 in 6.x);
# a larger value is refused by the kernel itself, and by the filter too.
_AF_LIMIT = 64


# Other netlink protocols are refused: audit, uevents, connector, crypto and generic
# netlink (a hundred kernel subsystems) answer for the whole host or are large surfaces,
# and no build or test tool needs them.
NETLINK_ROUTE = 0


ARCHES = ("x86_64", "aarch64")


def _pyseccomp():
    # Imported here so that importing this module (e.g. for BUILTIN_DENY) stays cheap;
    # pyseccomp runs ldconfig through ctypes.util.find_library when first imported.
    from ..libseccomp import load

    return load()


def _native_arch(s, arch: str) -> int:
    table = {"x86_64": s.Arch.X86_64, "aarch64": s.Arch.AARCH64}
    if arch not in table:
        raise ValueError(f"seccomp: unsupported architecture {arch!r} (supported: {', '.join(ARCHES)})")
    return table[arch]


def _aligned_blocks(allowed: tuple[int, ...], limit: int) -> list[tuple[int, int]]:
    """The values in [0, limit) not in ``allowed``, as power-of-two aligned blocks
    (base, size): each block is one masked comparison instead of ``size`` of them."""
    out = []
    v = 0
    while v < limit:
        if v in allowed:
            v += 1
            continue
        size = 1
        while (v % (size * 2) == 0 and v + size * 2 <= limit
               and not any(a in allowed for a in range(v, v + size * 2))):
            size *= 2
        out.append((v, size))
        v += size
    return out


def _deny_values(s, f, action, syscall: str, argno: int, allowed: tuple[int, ...], limit: int, *, mask: int = 0, extra=()):
    """Refuse ``syscall`` unless argument ``argno`` is one of ``allowed``.

    libseccomp accepts one comparison per argument in a rule and has no "not in", so the
    complement is written out as aligned blocks (``arg & ~(size-1) == base``), plus
    everything at or above ``limit``: the full 64-bit register is compared, so a value
    with high bits set, which the kernel would truncate to an int, lands there too.
    With ``mask`` the comparison is on ``arg & mask`` (no upper-range rule then).
    ``extra`` are further conditions on other arguments that every rule carries.
    """
    full = mask or 0xFFFFFFFFFFFFFFFF
    for base, size in _aligned_blocks(allowed, limit):
        f.add_rule(action, syscall, s.Arg(argno, s.MASKED_EQ, full & ~(size - 1), base), *extra)
    if not mask:
        f.add_rule(action, syscall, s.Arg(argno, s.GE, limit), *extra)


def _family_rules(s, f, eperm, families: tuple[int, ...]) -> None:
    """Both backends: socket() only for ``families`` (AF_NETLINK for NETLINK_ROUTE only),
    socketpair() only for AF_UNIX (see SOCKET_FAMILIES)."""
    _deny_values(s, f, eperm, "socket", 0, families, _AF_LIMIT)
    if AF_NETLINK in families:
        # 64-bit compare: a protocol with high bits set is refused (the kernel takes an int).
        f.add_rule(eperm, "socket", s.Arg(0, s.EQ, AF_NETLINK), s.Arg(2, s.NE, NETLINK_ROUTE))
    # Other families reached through an allowed one: AF_INET with SOCK_PACKET is an
    # AF_PACKET socket (CAP_NET_RAW, dropped everywhere, is the kernel's own check), and
    # IPPROTO_SMC on AF_INET or AF_INET6 an AF_SMC one (no privilege needed).
    if AF_INET in families:
        f.add_rule(eperm, "socket", s.Arg(0, s.EQ, AF_INET), s.Arg(1, s.MASKED_EQ, SOCK_TYPE_MASK, SOCK_PACKET))
    for fam in (AF_INET, AF_INET6):
        if fam in families:
            f.add_rule(eperm, "socket", s.Arg(0, s.EQ, fam), s.Arg(2, s.MASKED_EQ, 0xFFFFFFFF, IPPROTO_SMC))
    _deny_values(s, f, eperm, "socketpair", 0, (AF_UNIX,), _AF_LIMIT)


def _socket_rules(s, f, eperm, syscalls: SyscallPlan, network: Network) -> None:
    """Landlock's gaps closed at socket creation (see LANDLOCK_SOCKET_GAPS)."""
    families = [AF_NETLINK]
    if syscalls.allow_unix_sockets:
        families.append(AF_UNIX)
    if network.mode in (NET_ON, NET_RULES, NET_HOSTS):
        families += [AF_INET, AF_INET6]
    _family_rules(s, f, eperm, tuple(sorted(families)))

    if network.mode in (NET_RULES, NET_HOSTS):
        # Host rules: the proxy's port is a TCP port rule added at run time.
        # Only plain TCP: SOCK_STREAM with protocol 0 or IPPROTO_TCP. MPTCP (262) and
        # SCTP are stream sockets too, but Landlock's TCP port rules do not see them.
        for fam in (AF_INET, AF_INET6):
            fam_is = s.Arg(0, s.EQ, fam)
            _deny_values(s, f, eperm, "socket", 1, (SOCK_STREAM,), SOCK_TYPE_MASK + 1, mask=SOCK_TYPE_MASK, extra=(fam_is,))
            # protocol: only 0 or IPPROTO_TCP (64-bit compare: any high bit is refused too).
            _deny_values(s, f, eperm, "socket", 2, (0, IPPROTO_TCP), IPPROTO_TCP + 1, extra=(fam_is,))
        if not any(r.op == "bind" for r in network.rules):
            # An unbound TCP socket that listens gets an ephemeral port without passing
            # the bind hook; with no bind rule nothing may listen at all.
            f.add_rule(eperm, "listen")

    if network.mode != NET_OFF:
        # TCP Fast Open connects inside sendto/sendmsg, not through connect(2), so the
        # Landlock connect check never runs for it (the kernel honours the flag only on
        # TCP sockets, so refusing it costs nothing else).
        fo = MSG_FASTOPEN
        f.add_rule(eperm, "sendto", s.Arg(3, s.MASKED_EQ, fo, fo))
        f.add_rule(eperm, "sendmsg", s.Arg(2, s.MASKED_EQ, fo, fo))
        f.add_rule(eperm, "sendmmsg", s.Arg(3, s.MASKED_EQ, fo, fo))

    # socketpair: stream and seqpacket only. A datagram socket (even one of a connected
    # pair) can sendto(2) any socket path, masked ones included.
    if not syscalls.allow_unix_sockets:
        _deny_values(s, f, eperm, "socketpair", 1, (SOCK_STREAM, SOCK_SEQPACKET), SOCK_TYPE_MASK + 1, mask=SOCK_TYPE_MASK)


def _process_rules(s, f, eperm, native: int, denied: set) -> None:
    """Landlock: the "self" calls of PROCESS_CALLS refused unless they name the caller."""
    for name, (target, kind) in sorted(_SELF_ONLY.items()):
        ref = None if name in denied else _ref(s, native, name)
        if ref is None:
            continue
        if name == "prlimit64":
            f.add_rule(eperm, ref, s.Arg(target, s.NE, 0), s.Arg(_PRLIMIT_NEW_ARG, s.NE, 0))
        else:
            f.add_rule(eperm, ref, s.Arg(target, s.NE, 0))
        if kind is not None:
            which_arg, allowed, limit = kind
            _deny_values(s, f, eperm, ref, which_arg, allowed, limit)


def _ref(s, native: int, name: str):
    """What a rule names ``name`` by: its name where libseccomp knows it, its number where
    libseccomp is older than the call (NEW_SYSCALL_NUMBERS), None where the call does not
    exist on this arch (aarch64 has no chmod, open, creat or mknod). A name known to
    neither raises: a rule meant to refuse a call must not vanish."""
    try:
        nr = s.resolve_syscall(native, name)
    except (ValueError, RuntimeError, OSError):
        nr = -1
    if nr >= 0:
        return name
    if name in NEW_SYSCALL_NUMBERS:
        return NEW_SYSCALL_NUMBERS[name]
    if nr == -1:
        raise ValueError(f"seccomp: this libseccomp has no name for {name!r}, and sbxc has no number for it")
    return None  # a pseudo number: not a call on this arch


def build_filter(syscalls: SyscallPlan, arch: str, *, purpose: str, network: Network, optimize: bool = True,
                 root_metadata: bool = False, host_ipc: bool = False, allow_only=None, lib=None):
    """The libseccomp filter object (exposed for the benchmark and the tests).

    ``root_metadata``: also refuse every call in ``ROOT_METADATA_DENY`` (Landlock as uid 0).
    ``host_ipc``: the command shares the host's IPC namespace (Landlock, not root): also
    refuse every call in ``HOST_IPC_DENY``. ``allow_only`` (names; an experiment measured
    by bench/seccomp_allowlist.py, used by no backend): every other call answers ENOSYS.
    Not safe as it stands: libseccomp lets an unconditional ALLOW for a call override that
    call's conditional refusals (socket families, TIOCSTI, setuid bits ...), see
    docs/seccomp.md. ``lib``: an object with pyseccomp's interface in its place (the OCI
    backend records the rules to write them as runtime-spec JSON instead of BPF)."""
    if purpose not in ("bwrap", "landlock"):
        raise ValueError(f"seccomp: unknown purpose {purpose!r}")
    s = _pyseccomp() if lib is None else lib
    eperm = s.ERRNO(errno.EPERM)
    f = s.SyscallFilter(s.ALLOW if allow_only is None else s.ERRNO(errno.ENOSYS))
    native = _native_arch(s, arch)
    if s.system_arch() != native:
        # The filter is for the target arch only; libseccomp starts with the native one.
        f.add_arch(native)
        f.remove_arch(s.system_arch())
    # Calls from any other ABI (i386 through int 0x80, x32 on x86_64, AArch32 on arm64)
    # fail: the deny list is written in native numbers and would not match theirs.
    f.set_attr(s.Attr.ACT_BADARCH, eperm)
    if optimize:
        # Binary-tree dispatch (libseccomp >= 2.5): the worst path grows with log(n).
        f.set_attr(s.Attr.CTL_OPTIMIZE, 2)

    for name in sorted(set(syscalls.deny) | set(BUILTIN_DENY)):
        try:
            ref = _ref(s, native, name)
        except ValueError:
            raise ValueError(f"seccomp: unknown syscall {name!r}") from None
        if ref is None:
            # A pseudo number: the call does not exist on this arch, nothing to refuse.
            continue
        f.add_rule(s.ERRNO(_ERRNO_OVERRIDE.get(name, errno.EPERM)), ref)

    denied = set(syscalls.deny)
    outright = dict(ROOT_METADATA_DENY) if root_metadata else {}
    if host_ipc:
        outright.update(HOST_IPC_DENY)
    for name in sorted(outright):
        if name not in denied:
            ref = _ref(s, native, name)
            if ref is not None:
                f.add_rule(eperm, ref)
            denied.add(name)  # no argument filters below for a call refused outright
    # The kernel reads ioctl's request as an unsigned int: compare the low 32 bits only,
    # so high garbage bits in the register cannot slip past.
    if "ioctl" not in denied:
        # TIOCSETD on the caller's terminal outlives the run (N_NULL silences it for good)
        # and, with dev.tty.ldisc_autoload=1, loads line-discipline modules. TIOCCONS needs
        # CAP_SYS_ADMIN, which both runners drop; refused here as well, so redirecting the
        # host's console never rests on the capability drop alone. TIOCEXCL outlives the run
        # too: the terminal then refuses every new open (EBUSY) to anyone but root, so sudo,
        # ssh and pinentry can no longer ask for a password in it.
        # With root_metadata: what file_setattr does (refused with ROOT_METADATA_DENY),
        # chattr does with INODE_ATTR_IOCTLS: as root, ownership is all they ask of a
        # root-owned host file, and an fd opened for reading is enough. Landlock's ioctl
        # right covers devices only.
        for req in (TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS, TIOCEXCL) + (INODE_ATTR_IOCTLS if root_metadata else ()):
            f.add_rule(eperm, "ioctl", s.Arg(1, s.MASKED_EQ, 0xFFFFFFFF, req))
    if "clone" not in denied:
        f.add_rule(eperm, "clone", s.Arg(0, s.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    if "unshare" not in denied:
        f.add_rule(eperm, "unshare", s.Arg(0, s.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    # (With ``allow_only`` ENOSYS is the default: libseccomp refuses a rule that repeats it.)
    if "clone3" not in denied and allow_only is None:
        f.add_rule(s.ERRNO(errno.ENOSYS), _ref(s, native, "clone3"))
    if "personality" not in denied:
        _persona_rules(s, f, eperm)

    _setid_rules(s, f, eperm, native, denied, openat2_rule=allow_only is None)

    if purpose == "landlock":
        _socket_rules(s, f, eperm, syscalls, network)
        _process_rules(s, f, eperm, native, denied)
    else:
        # bwrap's network namespace (with the network off) and its mount namespace keep
        # the four allowed families inside; the others are refused as on Landlock.
        _family_rules(s, f, eperm, tuple(sorted(ALLOWED_FAMILIES)))
    if allow_only is not None:
        for name in sorted(set(allow_only) - denied - set(BUILTIN_DENY) - set(_ERRNO_OVERRIDE)):
            if _exists(s, native, name):
                f.add_rule(s.ALLOW, name)
    return f


def _persona_rules(s, f, eperm) -> None:
    """personality(): refused when it would set ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC or
    MMAP_PAGE_ZERO, which the programs the command starts inherit. The kernel takes the
    argument as an unsigned int and treats exactly 0xffffffff as a query; every other
    value is stored, bit 31 included. So: each flag with bit 31 clear is refused, and so
    is every value with bit 31 set but for the query (some other bit clear), which no
    real persona uses. Only the low half of the register is compared, as the kernel
    reads it."""
    for bit in (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO):
        f.add_rule(eperm, "personality", s.Arg(0, s.MASKED_EQ, 0x80000000 | bit, bit))
    for j in range(31):
        f.add_rule(eperm, "personality", s.Arg(0, s.MASKED_EQ, 0x80000000 | (1 << j), 0x80000000))


def _exists(s, native: int, name: str) -> bool:
    """Whether libseccomp knows ``name`` as a real call on this arch: for ``allow_only``,
    where a call it does not know is simply not allowed (a refusing rule uses ``_ref``,
    which never drops one)."""
    try:
        return s.resolve_syscall(native, name) >= 0
    except (ValueError, RuntimeError, OSError):
        return False


def _setid_rules(s, f, eperm, native: int, denied: set, openat2_rule: bool = True) -> None:
    """No setuid or setgid bit on any file (see BUILTIN_ARG_FILTERS): refused where a mode
    is set (the chmod family) and where a file is created with one (open with O_CREAT or
    O_TMPFILE, creat, mknod). openat2 carries its mode in memory, so it answers ENOSYS."""
    for name, argno in sorted(_CHMOD_MODE_ARG.items()):
        ref = None if name in denied else _ref(s, native, name)
        if ref is None:
            continue
        for bit in (S_ISUID, S_ISGID):
            f.add_rule(eperm, ref, s.Arg(argno, s.MASKED_EQ, bit, bit))
    for name, (flags_arg, mode_arg) in sorted(_CREATE_MODE_ARG.items()):
        ref = None if name in denied else _ref(s, native, name)
        if ref is None:
            continue
        for bit in (S_ISUID, S_ISGID):
            if flags_arg is None:
                f.add_rule(eperm, ref, s.Arg(mode_arg, s.MASKED_EQ, bit, bit))
                continue
            # The mode counts only with O_CREAT or O_TMPFILE; without them it may be garbage.
            for flag in (O_CREAT, O_TMPFILE_BIT):
                f.add_rule(eperm, ref, s.Arg(flags_arg, s.MASKED_EQ, flag, flag), s.Arg(mode_arg, s.MASKED_EQ, bit, bit))
    ref = None if not openat2_rule or "openat2" in denied else _ref(s, native, "openat2")
    if ref is not None:
        f.add_rule(s.ERRNO(errno.ENOSYS), ref)


def export(f) -> bytes:
    """The filter's BPF bytes. libseccomp writes them to a file descriptor; an anonymous
    memory file takes them, so lowering touches no disk (backends are pure)."""
    import os

    fd = os.memfd_create("sbxc-seccomp", os.MFD_CLOEXEC)
    with open(fd, "w+b", buffering=0) as t:
        f.export_bpf(t)
        t.seek(0)
        return t.read()


def compile_filter(syscalls: SyscallPlan, arch: str, *, purpose: str, network: Network,
                   root_metadata: bool = False, host_ipc: bool = False) -> bytes:
    """BPF bytes (struct sock_filter[], host byte order) for ``seccomp(SECCOMP_SET_MODE_FILTER)``.

    ``purpose="bwrap"``: the deny list, argument filters and socket families; bwrap's
    namespaces do the rest. ``purpose="landlock"``: also the socket rules that close
    Landlock's gaps and the "self" rules of PROCESS_CALLS.
    """
    return export(build_filter(syscalls, arch, purpose=purpose, network=network, root_metadata=root_metadata,
                               host_ipc=host_ipc))


def instruction_count(bpf: bytes) -> int:
    return len(bpf) // 8
