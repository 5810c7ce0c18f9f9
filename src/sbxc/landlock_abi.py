"""Landlock's access rights and ABI versions, as include/uapi/linux/landlock.h defines them
(defined here because distribution headers lag behind). A leaf: the Landlock backend
uses the numbers to lower a plan, the runtime (sbxc.runtime.landlock_sys) to apply it.

Rights by the ABI version that introduced them (``landlock_create_ruleset(NULL, 0,
LANDLOCK_CREATE_RULESET_VERSION)`` returns it):

  ABI 1 (Linux 5.13)  file system rights EXECUTE .. MAKE_SYM
  ABI 2 (5.19)        REFER: link/rename across folders (denied always before ABI 2)
  ABI 3 (6.2)         TRUNCATE
  ABI 4 (6.7)         TCP bind/connect by port (handled_access_net, LANDLOCK_RULE_NET_PORT)
  ABI 5 (6.10)        IOCTL_DEV: ioctl on device files
  ABI 6 (6.12)        scopes: abstract Unix sockets and signals leaving the domain
  ABI 7 (6.15)        audit logging flags for landlock_restrict_self (no new rights)
"""
# System call numbers: Landlock came after the syscall table unification, so the
# numbers are the same on every architecture.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2

# File system rights.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

# Network rights (ABI 4).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1

# Scopes (ABI 6).
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# landlock_restrict_self flags (ABI 7): audit logging only, no access rights.
RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1 << 0
RESTRICT_SELF_LOG_NEW_EXEC_ON = 1 << 1
RESTRICT_SELF_LOG_SUBDOMAINS_OFF = 1 << 2

FS_NAMES = {
    FS_EXECUTE: "execute", FS_WRITE_FILE: "write_file", FS_READ_FILE: "read_file",
    FS_READ_DIR: "read_dir", FS_REMOVE_DIR: "remove_dir", FS_REMOVE_FILE: "remove_file",
    FS_MAKE_CHAR: "make_char", FS_MAKE_DIR: "make_dir", FS_MAKE_REG: "make_reg",
    FS_MAKE_SOCK: "make_sock", FS_MAKE_FIFO: "make_fifo", FS_MAKE_BLOCK: "make_block",
    FS_MAKE_SYM: "make_sym", FS_REFER: "refer", FS_TRUNCATE: "truncate", FS_IOCTL_DEV: "ioctl_dev",
}
NET_NAMES = {NET_BIND_TCP: "bind_tcp", NET_CONNECT_TCP: "connect_tcp"}
SCOPE_NAMES = {SCOPE_ABSTRACT_UNIX_SOCKET: "abstract_unix_socket", SCOPE_SIGNAL: "signal"}

_FS_ABI1 = (1 << 13) - 1
# Per ABI: (file system rights, network rights, scopes, restrict_self flags) it knows.
ABI_RIGHTS = {
    1: (_FS_ABI1, 0, 0, 0),
    2: (_FS_ABI1 | FS_REFER, 0, 0, 0),
    3: (_FS_ABI1 | FS_REFER | FS_TRUNCATE, 0, 0, 0),
    4: (_FS_ABI1 | FS_REFER | FS_TRUNCATE, NET_BIND_TCP | NET_CONNECT_TCP, 0, 0),
    5: (_FS_ABI1 | FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV, NET_BIND_TCP | NET_CONNECT_TCP, 0, 0),
    6: (_FS_ABI1 | FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV, NET_BIND_TCP | NET_CONNECT_TCP,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL, 0),
    7: (_FS_ABI1 | FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV, NET_BIND_TCP | NET_CONNECT_TCP,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL,
        RESTRICT_SELF_LOG_SAME_EXEC_OFF | RESTRICT_SELF_LOG_NEW_EXEC_ON | RESTRICT_SELF_LOG_SUBDOMAINS_OFF),
}
ABI_MAX = 7


def rights_for_abi(abi: int) -> tuple[int, int, int, int]:
    """What a kernel of ``abi`` understands; a newer kernel understands at least ABI_MAX's."""
    if abi <= 0:
        return (0, 0, 0, 0)
    return ABI_RIGHTS[min(abi, ABI_MAX)]


def fs_names(mask: int) -> list[str]:
    return [n for bit, n in FS_NAMES.items() if mask & bit]


def net_names(mask: int) -> list[str]:
    return [n for bit, n in NET_NAMES.items() if mask & bit]


def scope_names(mask: int) -> list[str]:
    return [n for bit, n in SCOPE_NAMES.items() if mask & bit]


def listing_digest(entries) -> str:
    """A fingerprint of one folder's entries as ``dir_listings`` gives them. A plan built on
    a listing (Landlock grants a folder's entries one by one) is stale once it changes."""
    try:  # the builtin module: hashlib's OpenSSL bindings cost milliseconds of imports
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256
    text = "\0".join(f"{name}\1{kind}" for name, kind in sorted(entries))
    return sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]
