"""Landlock's three system calls, through ctypes. The rights and ABI versions are in
sbxc.landlock_abi (a leaf the compiler uses too); this module is on the run path and
imports only ctypes, when a ruleset is made.
"""
from ..landlock_abi import (  # noqa: F401  (the runner and its tests use these names from here)
    SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF,
    LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_RULE_NET_PORT, FS_EXECUTE,
    FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR, FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR,
    FS_MAKE_DIR, FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM, FS_REFER,
    FS_TRUNCATE, FS_IOCTL_DEV, NET_BIND_TCP, NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL, RESTRICT_SELF_LOG_SAME_EXEC_OFF, RESTRICT_SELF_LOG_NEW_EXEC_ON,
    RESTRICT_SELF_LOG_SUBDOMAINS_OFF, FS_NAMES, NET_NAMES, SCOPE_NAMES, ABI_RIGHTS, ABI_MAX,
    rights_for_abi, fs_names, net_names, scope_names,
)


def _ctypes():
    import ctypes

    class RulesetAttr(ctypes.Structure):
        # struct landlock_ruleset_attr: handled_access_net since ABI 4, scoped since ABI 6.
        # A kernel that knows fewer fields accepts the larger size when the extra
        # fields are zero (copy_struct_from_user), so one layout serves every ABI.
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        # __attribute__((packed)) in the uapi header: 12 bytes, not 16.
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    class NetPortAttr(ctypes.Structure):
        _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]

    return ctypes, RulesetAttr, PathBeneathAttr, NetPortAttr


class Landlock:
    """Thin wrappers over the three system calls; errors come back as OSError."""

    def __init__(self, libc=None):
        ctypes, self.RulesetAttr, self.PathBeneathAttr, self.NetPortAttr = _ctypes()
        self._ct = ctypes
        self.libc = libc or ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    def _check(self, r: int, what: str) -> int:
        if r < 0:
            e = self._ct.get_errno()
            raise OSError(e, f"{what}: {__import__('os').strerror(e)}")
        return r

    def abi(self) -> int:
        ct = self._ct
        r = self.libc.syscall(ct.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ct.c_size_t(0),
                              ct.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
        return r if r > 0 else 0

    def create_ruleset(self, fs: int, net: int, scoped: int) -> int:
        ct = self._ct
        attr = self.RulesetAttr(fs, net, scoped)
        # The smallest size that carries the request: valid on every kernel version.
        size = 24 if scoped else (16 if net else 8)
        return self._check(self.libc.syscall(ct.c_long(SYS_LANDLOCK_CREATE_RULESET), ct.byref(attr),
                                              ct.c_size_t(size), ct.c_uint32(0)), "landlock_create_ruleset")

    def add_path(self, ruleset_fd: int, parent_fd: int, access: int) -> None:
        ct = self._ct
        attr = self.PathBeneathAttr(access, parent_fd)
        self._check(self.libc.syscall(ct.c_long(SYS_LANDLOCK_ADD_RULE), ct.c_int(ruleset_fd),
                                      ct.c_int(LANDLOCK_RULE_PATH_BENEATH), ct.byref(attr), ct.c_uint32(0)),
                    "landlock_add_rule")

    def add_port(self, ruleset_fd: int, port: int, access: int) -> None:
        ct = self._ct
        attr = self.NetPortAttr(access, port)
        self._check(self.libc.syscall(ct.c_long(SYS_LANDLOCK_ADD_RULE), ct.c_int(ruleset_fd),
                                      ct.c_int(LANDLOCK_RULE_NET_PORT), ct.byref(attr), ct.c_uint32(0)),
                    "landlock_add_rule(port)")

    def restrict_self(self, ruleset_fd: int, flags: int = 0) -> None:
        ct = self._ct
        self._check(self.libc.syscall(ct.c_long(SYS_LANDLOCK_RESTRICT_SELF), ct.c_int(ruleset_fd),
                                      ct.c_uint32(flags)), "landlock_restrict_self")
