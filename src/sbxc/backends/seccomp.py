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
    "process_madvise": "changes how another process's memory is paged (see PROCESS_CALLS)",
    "process_mrelease": "reaps the memory of another process being killed (see PROCESS_CALLS)",
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

# Calls newer than the libseccomp this compiler may be built with (2.5.4 knows none of
# these): without their numbers a name in a table here would silently match nothing.
# Since Linux 5.1 new calls have one number on every architecture (asm-generic and
# x86_64 tables were aligned at 424).
NEW_SYSCALL_NUMBERS: dict[str, int] = {
    "setxattrat": 463,
    "removexattrat": 466,
}

# Every call that names another process: by pid, thread id, pidfd, process group or
# user. (rule, reason) with rule one of
#   "deny"  refused outright on both backends (those in BUILTIN_DENY say so there);
#   "self"  Landlock: refused unless the target is the caller itself (0); how 0 is
#           written depends on the call, see _SELF_ONLY;
#   "allow" left alone, with what already keeps it inside.
# Landlock has no PID namespace for a plain user: a pid the command names is a host
# process. Landlock's own ptrace check (every ABI) refuses calls that go through
# ptrace_may_access() against a process outside the domain; calls that only compare
# uids (prlimit, setpriority, sched_*, ioprio_set) pass it, so any process of the same
# user (any root process, as root) could be slowed down or killed through RLIMIT_CPU.
# bwrap's PID namespace makes every pid the command can name its own; "self" rules are
# not applied there, since they would only break threads that pin or renice themselves.
PROCESS_CALLS: dict[str, tuple[str, str]] = {
    "ptrace": ("deny", "BUILTIN_DENY: reads and rewrites another process"),
    "process_vm_readv": ("deny", "BUILTIN_DENY: reads another process's memory"),
    "process_vm_writev": ("deny", "BUILTIN_DENY: writes another process's memory"),
    "pidfd_getfd": ("deny", "BUILTIN_DENY: copies a descriptor out of another process"),
    "kcmp": ("deny", "BUILTIN_DENY: compares other processes' kernel objects"),
    "perf_event_open": ("deny", "BUILTIN_DENY: observes other processes and the kernel"),
    "process_madvise": ("deny", "BUILTIN_DENY: pages another process's memory (by pidfd, so no test for "
                                "'self' is possible); only memory managers use it"),
    "process_mrelease": ("deny", "BUILTIN_DENY: reaps a dying process's memory (by pidfd); only out-of-memory "
                                 "daemons use it"),
    "prlimit64": ("self", "setting another process's limits checks only its uids (no LSM hook Landlock uses): "
                          "RLIMIT_CPU=1 kills it; reading stays allowed (/proc/PID/limits shows the same to anyone)"),
    "setpriority": ("self", "renicing checks only uids; PRIO_USER (even with 0) reaches every process of the caller"),
    "sched_setaffinity": ("self", "pinning checks only uids: a process of the caller's could be pinned to one CPU"),
    "sched_setscheduler": ("self", "SCHED_IDLE needs no privilege: a process of the caller's could be starved"),
    "sched_setparam": ("self", "changes another process's scheduling priority after a uid check only"),
    "sched_setattr": ("self", "changes another process's scheduling policy after a uid check only"),
    "ioprio_set": ("self", "the idle I/O class needs no privilege; IOPRIO_WHO_USER reaches every process of the caller"),
    "migrate_pages": ("self", "moves another process's memory between NUMA nodes (Landlock's ptrace check refuses "
                              "it too)"),
    "move_pages": ("self", "moves or locates another process's pages (Landlock's ptrace check refuses it too)"),
    "get_robust_list": ("self", "reads another process's futex list head (Landlock's ptrace check refuses it too)"),
    "getpriority": ("allow", "reads only; every process's nice value is in /proc/PID/stat"),
    "sched_getaffinity": ("allow", "reads only (/proc/PID/status shows it); nproc and most runtimes ask with 0"),
    "sched_getscheduler": ("allow", "reads only (/proc/PID/stat shows it)"),
    "sched_getparam": ("allow", "reads only (/proc/PID/stat shows it)"),
    "sched_getattr": ("allow", "reads only (/proc/PID/sched shows it)"),
    "sched_rr_get_interval": ("allow", "reads a time slice length only"),
    "ioprio_get": ("allow", "reads only"),
    "kill": ("allow", "Landlock's signal scope (ABI 6) refuses signals to processes outside the sandbox; bwrap: "
                      "PID namespace"),
    "tkill": ("allow", "as kill: the signal scope checks every delivery"),
    "tgkill": ("allow", "as kill: the signal scope checks every delivery"),
    "rt_sigqueueinfo": ("allow", "as kill: the signal scope checks every delivery"),
    "rt_tgsigqueueinfo": ("allow", "as kill: the signal scope checks every delivery"),
    "pidfd_send_signal": ("allow", "as kill: the signal scope checks every delivery"),
    "fcntl F_SETOWN": ("allow", "SIGIO to a process outside is refused by the signal scope (file_send_sigiotask)"),
    "pidfd_open": ("allow", "a pidfd only names a process; each thing done with it is decided here (signals: scope; "
                            "getfd, setns: refused; madvise, mrelease: refused; namespace ioctls: ptrace check)"),
    "waitid": ("allow", "waits for the caller's own children only"),
    "wait4": ("allow", "waits for the caller's own children only"),
    "setpgid": ("allow", "the kernel allows it only on the caller and its children, within its session; the "
                         "command runs in a session of its own"),
    "getpgid": ("allow", "reads only (/proc/PID/stat shows it)"),
    "getsid": ("allow", "reads only (/proc/PID/stat shows it)"),
    "capget": ("allow", "reads only (/proc/PID/status shows it); the pid is in memory a filter cannot read"),
    "capset": ("allow", "the kernel accepts only the caller itself"),
    "setns": ("deny", "BUILTIN_DENY: joins another process's namespaces (through a pidfd too)"),
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

# Host IPC that no Landlock ABI governs: System V objects are found by key or id, POSIX
# message queues live in the IPC namespace's own mqueue mount (not a path Landlock
# sees). Refused when the command shares the host's IPC namespace (Landlock, not root;
# for uid 0 the Landlock runner unshares one, as bwrap always does).
HOST_IPC_DENY: dict[str, str] = {
    **{n: "System V shared memory of the host's IPC namespace" for n in ("shmget", "shmat", "shmctl", "shmdt")},
    **{n: "System V message queues of the host's IPC namespace" for n in ("msgget", "msgsnd", "msgrcv", "msgctl")},
    **{n: "System V semaphores of the host's IPC namespace" for n in ("semget", "semop", "semtimedop", "semctl")},
    **{n: "POSIX message queues of the host's IPC namespace (not path-checked by Landlock)"
       for n in ("mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr")},
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

# Every address family up to AF_MAX (46 in Linux 6.x), and whether a network namespace
# keeps it inside. Only the four families in ALLOWED_FAMILIES can be created, on both
# backends; the rest are refused by socket() and socketpair() (the family is a plain
# register argument), whatever the kernel has built in. "own netns" families would stay
# inside bwrap's namespace with the network off, but not with it on (the host's
# namespace), nor ever under Landlock; "not namespaced" ones reach outside any sandbox.
SOCKET_FAMILIES: dict[int, tuple[str, str]] = {
    0: ("AF_UNSPEC", "no sockets"),
    1: ("AF_UNIX", "paths: bwrap's mount namespace, Landlock's seccomp rules; abstract names: per netns"),
    2: ("AF_INET", "own netns"),
    3: ("AF_AX25", "not namespaced (amateur radio, initial netns only)"),
    4: ("AF_IPX", "removed from Linux"),
    5: ("AF_APPLETALK", "not namespaced (initial netns only)"),
    6: ("AF_NETROM", "not namespaced (initial netns only)"),
    7: ("AF_BRIDGE", "no sockets"),
    8: ("AF_ATMPVC", "not namespaced (ATM devices)"),
    9: ("AF_X25", "not namespaced (initial netns only)"),
    10: ("AF_INET6", "own netns"),
    11: ("AF_ROSE", "not namespaced (initial netns only)"),
    12: ("AF_DECnet", "removed from Linux"),
    13: ("AF_NETBEUI", "no sockets"),
    14: ("AF_SECURITY", "no sockets"),
    15: ("AF_KEY", "own netns; changes IPsec state (CAP_NET_ADMIN)"),
    16: ("AF_NETLINK", "own netns for most protocols; some (audit, uevents, crypto) are global"),
    17: ("AF_PACKET", "own netns, but with the network on it sees every frame of the host's interfaces (CAP_NET_RAW)"),
    18: ("AF_ASH", "no sockets"),
    19: ("AF_ECONET", "removed from Linux"),
    20: ("AF_ATMSVC", "not namespaced (ATM devices)"),
    21: ("AF_RDS", "partly namespaced (RDS over InfiniBand is not)"),
    22: ("AF_SNA", "no sockets"),
    23: ("AF_IRDA", "removed from Linux"),
    24: ("AF_PPPOX", "own netns (PPP over Ethernet, L2TP)"),
    25: ("AF_WANPIPE", "no sockets"),
    26: ("AF_LLC", "not namespaced (initial netns only)"),
    27: ("AF_IB", "no sockets (InfiniBand addresses)"),
    28: ("AF_MPLS", "no sockets (routing through netlink)"),
    29: ("AF_CAN", "own netns, but CAN buses are real hardware and raw CAN needs no privilege"),
    30: ("AF_TIPC", "own netns; a large, rarely used protocol stack"),
    31: ("AF_BLUETOOTH", "not namespaced: the host's Bluetooth adapters"),
    32: ("AF_IUCV", "not namespaced (s390 hypervisor communication)"),
    33: ("AF_RXRPC", "own netns (AFS)"),
    34: ("AF_ISDN", "removed from Linux"),
    35: ("AF_PHONET", "not namespaced (initial netns only)"),
    36: ("AF_IEEE802154", "not namespaced (initial netns only)"),
    37: ("AF_CAIF", "own netns (modems)"),
    38: ("AF_ALG", "not namespaced: the kernel crypto API, a large attack surface reachable without privilege"),
    39: ("AF_NFC", "not namespaced (initial netns only)"),
    40: ("AF_VSOCK", "not namespaced: reaches the hypervisor and other VMs on the host"),
    41: ("AF_KCM", "own netns (multiplexes TCP)"),
    42: ("AF_QIPCRTR", "not namespaced (Qualcomm IPC router to modems and DSPs)"),
    43: ("AF_SMC", "own netns, but RDMA/ISM devices underneath are shared"),
    44: ("AF_XDP", "own netns, but with the network on it reads the host's interfaces (CAP_NET_RAW)"),
    45: ("AF_MCTP", "own netns (management controllers on the host's buses)"),
}
# The families a command may create, and why each is needed and kept inside.
ALLOWED_FAMILIES: dict[int, str] = {
    1: "pipes between processes, local servers and test runners; socket files follow the file rules (bwrap) or "
       "are refused unless allowed (Landlock)",
    2: "the network, when the policy allows it; bwrap: own namespace when off; Landlock: refused when off, "
       "TCP-only under port rules",
    10: "as AF_INET",
    16: "NETLINK_ROUTE only: getaddrinfo(AI_ADDRCONFIG), getifaddrs and if_nameindex read interfaces through it; "
        "changing anything needs CAP_NET_ADMIN, which every backend drops",
}
# Other netlink protocols are refused: audit, uevents, connector, crypto and generic
# netlink (a hundred kernel subsystems) answer for the whole host or are large surfaces,
# and no build or test tool needs them.
NETLINK_ROUTE = 0

# What the Landlock runtime additionally closes with socket filters (reported by the
# Landlock backend; bwrap has namespaces for these).
LANDLOCK_SOCKET_GAPS: dict[str, str] = {
    "unix": "new AF_UNIX sockets are refused: Landlock before ABI 9 cannot stop connect(2) to a socket file under a masked path",
    "unix-dgram-pair": "socketpair(AF_UNIX) is kept for stream and seqpacket only: a datagram socket can sendto(2) any socket path",
    "inet-off": "with the network off no AF_INET/AF_INET6 socket can be created (UDP, raw and loopback included)",
    "inet-rules": "with per-port rules only plain TCP sockets can be created: UDP, raw, SCTP and MPTCP are refused because Landlock's port rules see TCP only",
    "fastopen": "MSG_FASTOPEN on sendto/sendmsg is refused: it connects without passing Landlock's connect check",
    "listen": "listen(2) is refused when no bind rule exists: listening on an unbound socket takes a port without Landlock's bind check",
}


def refused_families() -> list[str]:
    """Names of the families socket() refuses on every backend (for the report)."""
    return [name for nr, (name, why) in sorted(SOCKET_FAMILIES.items())
            if nr not in ALLOWED_FAMILIES and not why.startswith(("no sockets", "removed"))]


def families_verdict_text(extra: str = "") -> str:
    """The report's one sentence on socket families, the same for both backends."""
    return ("only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (NETLINK_ROUTE) sockets can be created" + extra
            + "; refused by socket() and socketpair(): " + ", ".join(refused_families())
            + " (and every other family); tools that need them fail (packet capture, Bluetooth, CAN, "
            "vsock, AF_ALG crypto offload, ss and other netlink clients)")


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


def _family_rules(s, f, eperm, families: tuple[int, ...]) -> None:
    """Both backends: socket() only for ``families`` (AF_NETLINK for NETLINK_ROUTE only),
    socketpair() only for AF_UNIX (see SOCKET_FAMILIES)."""
    _deny_values(s, f, eperm, "socket", 0, families, _AF_LIMIT)
    if AF_NETLINK in families:
        # 64-bit compare: a protocol with high bits set is refused (the kernel takes an int).
        f.add_rule(eperm, "socket", s.Arg(0, s.EQ, AF_NETLINK), s.Arg(2, s.NE, NETLINK_ROUTE))
    _deny_values(s, f, eperm, "socketpair", 0, (AF_UNIX,), _AF_LIMIT)


def _socket_rules(s, f, eperm, syscalls: SyscallPlan, network: Network) -> None:
    """Landlock's gaps closed at socket creation (see LANDLOCK_SOCKET_GAPS)."""
    families = [AF_NETLINK]
    if syscalls.allow_unix_sockets:
        families.append(AF_UNIX)
    if network.mode in (NET_ON, NET_RULES):
        families += [AF_INET, AF_INET6]
    _family_rules(s, f, eperm, tuple(sorted(families)))

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

    # socketpair: stream and seqpacket only. A datagram socket (even one of a connected
    # pair) can sendto(2) any socket path, masked ones included.
    if not syscalls.allow_unix_sockets:
        _deny_values(s, f, eperm, "socketpair", 1, (SOCK_STREAM, SOCK_SEQPACKET), SOCK_TYPE_MASK + 1, mask=SOCK_TYPE_MASK)


def _process_rules(s, f, eperm, native: int, denied: set) -> None:
    """Landlock: the "self" calls of PROCESS_CALLS refused unless they name the caller."""
    for name, (target, kind) in sorted(_SELF_ONLY.items()):
        if name in denied or not _exists(s, native, name):
            continue
        if name == "prlimit64":
            f.add_rule(eperm, name, s.Arg(target, s.NE, 0), s.Arg(_PRLIMIT_NEW_ARG, s.NE, 0))
        else:
            f.add_rule(eperm, name, s.Arg(target, s.NE, 0))
        if kind is not None:
            which_arg, allowed, limit = kind
            _deny_values(s, f, eperm, name, which_arg, allowed, limit)


def _deny_numbered(s, f, action, native: int, name: str) -> None:
    """Refuse ``name`` by name, or by its number where libseccomp does not know it."""
    if _exists(s, native, name):
        f.add_rule(action, name)
    elif name in NEW_SYSCALL_NUMBERS:
        f.add_rule(action, NEW_SYSCALL_NUMBERS[name])


def build_filter(syscalls: SyscallPlan, arch: str, *, purpose: str, network: Network, optimize: bool = True,
                 root_metadata: bool = False, host_ipc: bool = False, allow_only=None):
    """The libseccomp filter object (exposed for the benchmark and the tests).

    ``root_metadata``: also refuse every call in ``ROOT_METADATA_DENY`` (Landlock as uid 0).
    ``host_ipc``: the command shares the host's IPC namespace (Landlock, not root): also
    refuse every call in ``HOST_IPC_DENY``. ``allow_only`` (names; an experiment measured
    by bench/seccomp_allowlist.py, used by no backend): every other call answers ENOSYS.
    Not safe as it stands: libseccomp lets an unconditional ALLOW for a call override that
    call's conditional refusals (socket families, TIOCSTI, setuid bits ...), see
    docs/seccomp.md."""
    if purpose not in ("bwrap", "landlock"):
        raise ValueError(f"seccomp: unknown purpose {purpose!r}")
    s = _pyseccomp()
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
        nr = s.resolve_syscall(native, name)
        if nr == -1:
            raise ValueError(f"seccomp: unknown syscall {name!r}")
        if nr < 0:
            # A pseudo number: the call does not exist on this arch, nothing to refuse.
            continue
        f.add_rule(s.ERRNO(_ERRNO_OVERRIDE.get(name, errno.EPERM)), name)

    denied = set(syscalls.deny)
    outright = dict(ROOT_METADATA_DENY) if root_metadata else {}
    if host_ipc:
        outright.update(HOST_IPC_DENY)
    for name in sorted(outright):
        if name not in denied:
            _deny_numbered(s, f, eperm, native, name)
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
    # (With ``allow_only`` ENOSYS is the default: libseccomp refuses a rule that repeats it.)
    if "clone3" not in denied and allow_only is None:
        f.add_rule(s.ERRNO(errno.ENOSYS), "clone3")
    if "personality" not in denied:
        # 0xffffffff only queries the persona: bit 31 set keeps those queries allowed
        # (no real persona uses bit 31).
        for bit in (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO):
            f.add_rule(eperm, "personality", s.Arg(0, s.MASKED_EQ, 0x80000000 | bit, bit))

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


def _exists(s, native: int, name: str) -> bool:
    """Whether libseccomp knows ``name`` as a real call on this arch (fchmodat2 is recent;
    aarch64 has no chmod, open, creat or mknod, only the *at calls)."""
    try:
        return s.resolve_syscall(native, name) >= 0
    except (ValueError, RuntimeError, OSError):
        return False


def _setid_rules(s, f, eperm, native: int, denied: set, openat2_rule: bool = True) -> None:
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
    if openat2_rule and "openat2" not in denied and _exists(s, native, "openat2"):
        f.add_rule(s.ERRNO(errno.ENOSYS), "openat2")


def export(f) -> bytes:
    import tempfile

    with tempfile.TemporaryFile() as t:
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
