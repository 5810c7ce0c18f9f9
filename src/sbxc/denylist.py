"""The builtin syscall policy as data: each call sbxc refuses, and why (SPEC §1's "builtin
syscall deny list"). A leaf: the compiler checks policy names against it and lists it in
the report and docs; the seccomp backend (sbxc.backends.seccomp) compiles it to BPF.
"""
from __future__ import annotations

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
    "vhangup": "hangs up the caller's terminal for every process that has it open",
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
    "ioctl TIOCSETD": ("changes the terminal's line discipline, which outlives the run (N_NULL leaves the "
                       "caller's terminal dead) and can load kernel modules"),
    "ioctl TIOCCONS": "redirects the host's console output to the command's terminal",
    "ioctl TIOCEXCL": ("puts the caller's terminal in exclusive mode, which outlives the run: every later open of "
                       "it but root's fails, so sudo, ssh and pinentry cannot ask for a password there"),
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
                 "fremovexattr", "removexattrat", "file_setattr")
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
