"""seccomp: the syscall policy compiled to BPF bytes at compile time.

``compile_filter`` uses libseccomp (through pyseccomp) and returns the raw BPF program;
the plan stores it hex-encoded, bwrap receives it with ``--seccomp FD`` and the Landlock
runtime loads it with seccomp(2) itself. Nothing at run time imports libseccomp.

Every refused call gets EPERM (never a kill), so a command sees an ordinary error it can
report. The exceptions are listed with their reason in ``_ERRNO_OVERRIDE``.
"""
from __future__ import annotations

import errno

from ..compiler.plan import NET_OFF, NET_ON, NET_RULES, Network, SyscallPlan

# Syscalls refused outright, each with why. The frontend checks policy names against
# libseccomp and imports this table for ``compile --check`` and the docs.
BUILTIN_DENY: dict[str, str] = {
    # Reading or changing other processes.
    "ptrace": "reads and rewrites another process's memory and registers",
    "process_vm_readv": "reads another process's memory without ptrace-attaching",
    "process_vm_writev": "writes another process's memory without ptrace-attaching",
    "pidfd_getfd": "copies a file descriptor out of another process",
    "kcmp": "compares kernel objects of other processes (an address-layout oracle)",
    # Kernel keyrings hold credentials (Kerberos tickets, fscrypt and ecryptfs keys).
    "keyctl": "reads and changes kernel keyrings, where credentials live",
    "add_key": "adds keys to kernel keyrings shared with the caller",
    "request_key": "asks the kernel (and its upcall helpers) for keys",
    # Large kernel attack surfaces that a build or test run does not need.
    "bpf": "loads eBPF programs: a large kernel attack surface",
    "userfaultfd": "stalls kernel page-fault handling, a common exploit primitive",
    "perf_event_open": "exposes kernel and hardware counters; frequent source of kernel bugs",
    "io_uring_setup": "io_uring runs operations outside the syscall filter's view",
    "io_uring_enter": "io_uring runs operations outside the syscall filter's view",
    "io_uring_register": "io_uring runs operations outside the syscall filter's view",
    # Mounts change what paths mean, under any path-based sandbox.
    "mount": "changes what paths refer to",
    "umount2": "removes mounts the sandbox relies on",
    "pivot_root": "changes the root the sandbox was built on",
    "chroot": "changes the root the sandbox was built on",
    "fsopen": "new mount API: creates a filesystem context",
    "fsconfig": "new mount API: configures a filesystem context",
    "fsmount": "new mount API: makes a mount from a context",
    "fspick": "new mount API: reconfigures an existing mount",
    "move_mount": "new mount API: attaches or moves a mount",
    "open_tree": "new mount API: clones a mount tree",
    "mount_setattr": "changes mount flags such as read-only",
    # Namespaces: joining another one leaves the sandbox's view.
    "setns": "joins another process's namespaces",
    # Kernel code and boot.
    "kexec_load": "replaces the running kernel",
    "kexec_file_load": "replaces the running kernel",
    "init_module": "loads kernel code",
    "finit_module": "loads kernel code",
    "delete_module": "unloads kernel code",
    "reboot": "restarts or halts the machine",
    # Path-free file access: a file handle names a file without any path, so path-based
    # rules (Landlock) never see it.
    "open_by_handle_at": "opens files by handle, bypassing path-based rules",
    "name_to_handle_at": "makes file handles for open_by_handle_at; leaks inode identities",
    # Host administration.
    "swapon": "adds swap space to the host",
    "swapoff": "removes swap space from the host",
    "acct": "switches process accounting to a file of the caller's choice",
    "quotactl": "changes disk quotas",
    "quotactl_fd": "changes disk quotas",
    "lookup_dcookie": "resolves kernel directory cookies to paths (profiling interface)",
    "syslog": "reads the kernel log (addresses, other users' activity)",
    "vhangup": "hangs up the controlling terminal of other sessions",
    "iopl": "gives direct access to I/O ports",
    "ioperm": "gives direct access to I/O ports",
    "settimeofday": "changes the host clock",
    "clock_settime": "changes the host clock",
    "clock_adjtime": "changes the host clock",
    "adjtimex": "changes the host clock",
    "uselib": "obsolete loader interface with a history of kernel bugs",
    "_sysctl": "obsolete sysctl interface",
    "fanotify_init": "watches file access across the whole mount, other processes included",
    "nfsservctl": "obsolete NFS server control",
}

# Calls refused only for some arguments (applied for every backend, alongside BUILTIN_DENY).
BUILTIN_ARG_FILTERS: dict[str, str] = {
    "ioctl TIOCSTI": "pushes characters into the terminal's input, i.e. types commands for the caller",
    "ioctl TIOCLINUX": "on a virtual console, selection paste also injects input",
    "clone CLONE_NEWUSER": "a new user namespace gives the command a full set of capabilities over new namespaces",
    "unshare CLONE_NEWUSER": "a new user namespace gives the command a full set of capabilities over new namespaces",
    "clone3": "its flags live in memory a filter cannot read; ENOSYS makes libc fall back to clone, which is filtered",
    "personality ADDR_NO_RANDOMIZE": "turns off address randomisation for programs the command starts",
    "personality READ_IMPLIES_EXEC": "makes readable memory executable in programs the command starts",
    "personality MMAP_PAGE_ZERO": "maps page zero, turning kernel NULL dereferences into exploits",
    # No Landlock ABI covers metadata, and bwrap's writable binds show the host's files: a
    # setuid/setgid bit set inside is a setuid program on the host (setuid root when the
    # caller is root). Other mode bits keep working (pip, make install: chmod +x).
    "chmod S_ISUID/S_ISGID": "a setuid or setgid bit set inside is a privileged program on the host",
    "fchmod S_ISUID/S_ISGID": "a setuid or setgid bit set inside is a privileged program on the host",
    "fchmodat S_ISUID/S_ISGID": "a setuid or setgid bit set inside is a privileged program on the host",
    "fchmodat2 S_ISUID/S_ISGID": "a setuid or setgid bit set inside is a privileged program on the host",
    "open O_CREAT|O_TMPFILE S_ISUID/S_ISGID": "creating a file with a setuid or setgid bit bypasses chmod's filter",
    "openat O_CREAT|O_TMPFILE S_ISUID/S_ISGID": "creating a file with a setuid or setgid bit bypasses chmod's filter",
    "creat S_ISUID/S_ISGID": "creating a file with a setuid or setgid bit bypasses chmod's filter",
    "mknod S_ISUID/S_ISGID": "mknod makes regular files too, with any mode bits",
    "mknodat S_ISUID/S_ISGID": "mknod makes regular files too, with any mode bits",
    "openat2": "its mode lives in memory a filter cannot read; ENOSYS (as before Linux 5.6) makes callers use openat, which is filtered",
}

# Refused outright for uid 0 on Landlock. No Landlock ABI covers metadata, and after the
# capabilities are dropped root still owns every root-owned file on the host: it could
# `chmod 666 /etc/shadow`, `chmod o+w /etc/cron.d`, or grant others access through a POSIX
# ACL (an xattr) through a read-only rule. Unlike a plain user's own files, that is the
# whole system, so these calls are refused everywhere (the report says `narrowed`: builds
# that chmod their own outputs fail as root). Times stay allowed: changing them exposes
# nothing and archive tools set them on every file they unpack.
ROOT_METADATA_DENY: dict[str, str] = {
    name: "as root on Landlock, metadata changes would reach every root-owned file on the host"
    for name in ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
                 "setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr",
                 "fremovexattr", "removexattrat")
}

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
SOCK_TYPE_MASK = 0xF
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000
# Highest address family number the kernel knows is below this (AF_MAX is 46 in 6.x);
# a larger value is refused by the kernel itself, and by the filter too.
_AF_LIMIT = 64

# What the Landlock runtime additionally closes with socket filters (reported by the
# Landlock backend; bwrap has namespaces for these).
LANDLOCK_SOCKET_GAPS: dict[str, str] = {
    "unix": "new AF_UNIX sockets are refused: Landlock before ABI 9 cannot stop connect(2) to a socket file under a masked path",
    "unix-dgram-pair": "socketpair(AF_UNIX) is kept for stream and seqpacket only: a datagram socket can sendto(2) any socket path",
    "inet-off": "with the network off no AF_INET/AF_INET6 socket can be created (UDP, raw and loopback included)",
    "inet-rules": "with per-port rules only plain TCP sockets can be created: UDP, raw, SCTP and MPTCP are refused because Landlock's port rules see TCP only",
    "fastopen": "MSG_FASTOPEN on sendto/sendmsg is refused: it connects without passing Landlock's connect check",
    "listen": "listen(2) is refused when no bind rule exists: listening on an unbound socket takes a port without Landlock's bind check",
    "other-families": "address families other than AF_UNIX, AF_NETLINK, AF_INET and AF_INET6 are refused (vsock, packet, bluetooth, ...), because Landlock does not govern them",
}

ARCHES = ("x86_64", "aarch64")


def _pyseccomp():
    # Imported here so that importing this module (e.g. for BUILTIN_DENY) stays cheap;
    # pyseccomp runs ldconfig through ctypes.util.find_library when first imported.
    import pyseccomp

    return pyseccomp


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


def _socket_rules(s, f, eperm, syscalls: SyscallPlan, network: Network) -> None:
    """Landlock's gaps closed at socket creation (see LANDLOCK_SOCKET_GAPS)."""
    families = [AF_NETLINK]
    if syscalls.allow_unix_sockets:
        families.append(AF_UNIX)
    if network.mode in (NET_ON, NET_RULES):
        families += [AF_INET, AF_INET6]
    _deny_values(s, f, eperm, "socket", 0, tuple(families), _AF_LIMIT)

    if network.mode == NET_RULES:
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

    # socketpair: AF_UNIX stream and seqpacket only. A datagram socket (even one of a
    # connected pair) can sendto(2) any socket path, masked ones included.
    _deny_values(s, f, eperm, "socketpair", 0, (AF_UNIX,), _AF_LIMIT)
    if not syscalls.allow_unix_sockets:
        _deny_values(s, f, eperm, "socketpair", 1, (SOCK_STREAM, SOCK_SEQPACKET), SOCK_TYPE_MASK + 1, mask=SOCK_TYPE_MASK)


def build_filter(syscalls: SyscallPlan, arch: str, *, purpose: str, network: Network, optimize: bool = True,
                 root_metadata: bool = False):
    """The libseccomp filter object (exposed for the benchmark and the tests).

    ``root_metadata``: also refuse every call in ``ROOT_METADATA_DENY`` (Landlock as uid 0)."""
    if purpose not in ("bwrap", "landlock"):
        raise ValueError(f"seccomp: unknown purpose {purpose!r}")
    s = _pyseccomp()
    eperm = s.ERRNO(errno.EPERM)
    f = s.SyscallFilter(s.ALLOW)
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
        nr = s.resolve_syscall(native, name)
        if nr == -1:
            raise ValueError(f"seccomp: unknown syscall {name!r}")
        if nr < 0:
            # A pseudo number: the call does not exist on this arch, nothing to refuse.
            continue
        f.add_rule(s.ERRNO(_ERRNO_OVERRIDE.get(name, errno.EPERM)), name)

    denied = set(syscalls.deny)
    if root_metadata:
        for name in sorted(ROOT_METADATA_DENY):
            if name not in denied and _exists(s, native, name):
                f.add_rule(eperm, name)
                denied.add(name)  # no argument filters below for a call refused outright
    # The kernel reads ioctl's request as an unsigned int: compare the low 32 bits only,
    # so high garbage bits in the register cannot slip past.
    if "ioctl" not in denied:
        for req in (TIOCSTI, TIOCLINUX):
            f.add_rule(eperm, "ioctl", s.Arg(1, s.MASKED_EQ, 0xFFFFFFFF, req))
    if "clone" not in denied:
        f.add_rule(eperm, "clone", s.Arg(0, s.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    if "unshare" not in denied:
        f.add_rule(eperm, "unshare", s.Arg(0, s.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    if "clone3" not in denied:
        f.add_rule(s.ERRNO(errno.ENOSYS), "clone3")
    if "personality" not in denied:
        # 0xffffffff only queries the persona: bit 31 set keeps those queries allowed
        # (no real persona uses bit 31).
        for bit in (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO):
            f.add_rule(eperm, "personality", s.Arg(0, s.MASKED_EQ, 0x80000000 | bit, bit))

    _setid_rules(s, f, eperm, native, denied)

    if purpose == "landlock":
        _socket_rules(s, f, eperm, syscalls, network)
    return f


def _exists(s, native: int, name: str) -> bool:
    """Whether libseccomp knows ``name`` as a real call on this arch (fchmodat2 is recent;
    aarch64 has no chmod, open, creat or mknod, only the *at calls)."""
    try:
        return s.resolve_syscall(native, name) >= 0
    except (ValueError, RuntimeError, OSError):
        return False


def _setid_rules(s, f, eperm, native: int, denied: set) -> None:
    """No setuid or setgid bit on any file (see BUILTIN_ARG_FILTERS): refused where a mode
    is set (the chmod family) and where a file is created with one (open with O_CREAT or
    O_TMPFILE, creat, mknod). openat2 carries its mode in memory, so it answers ENOSYS."""
    for name, argno in sorted(_CHMOD_MODE_ARG.items()):
        if name in denied or not _exists(s, native, name):
            continue
        for bit in (S_ISUID, S_ISGID):
            f.add_rule(eperm, name, s.Arg(argno, s.MASKED_EQ, bit, bit))
    for name, (flags_arg, mode_arg) in sorted(_CREATE_MODE_ARG.items()):
        if name in denied or not _exists(s, native, name):
            continue
        for bit in (S_ISUID, S_ISGID):
            if flags_arg is None:
                f.add_rule(eperm, name, s.Arg(mode_arg, s.MASKED_EQ, bit, bit))
                continue
            # The mode counts only with O_CREAT or O_TMPFILE; without them it may be garbage.
            for flag in (O_CREAT, O_TMPFILE_BIT):
                f.add_rule(eperm, name, s.Arg(flags_arg, s.MASKED_EQ, flag, flag), s.Arg(mode_arg, s.MASKED_EQ, bit, bit))
    if "openat2" not in denied and _exists(s, native, "openat2"):
        f.add_rule(s.ERRNO(errno.ENOSYS), "openat2")


def export(f) -> bytes:
    import tempfile

    with tempfile.TemporaryFile() as t:
        f.export_bpf(t)
        t.seek(0)
        return t.read()


def compile_filter(syscalls: SyscallPlan, arch: str, *, purpose: str, network: Network,
                   root_metadata: bool = False) -> bytes:
    """BPF bytes (struct sock_filter[], host byte order) for ``seccomp(SECCOMP_SET_MODE_FILTER)``.

    ``purpose="bwrap"``: the deny list and argument filters; bwrap's namespaces do the
    rest. ``purpose="landlock"``: also the socket rules that close Landlock's gaps.
    """
    return export(build_filter(syscalls, arch, purpose=purpose, network=network, root_metadata=root_metadata))


def instruction_count(bpf: bytes) -> int:
    return len(bpf) // 8
