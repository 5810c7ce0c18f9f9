"""Abstract Unix sockets under bwrap with the host's network.

With the network on, bwrap's command shares the host's network namespace, and abstract
Unix socket names (X11, D-Bus, container shims) belong to the network namespace, not to
the filesystem, so no mount hides them. Landlock's abstract-socket scope (ABI 6) does:
a process in a domain with that scope cannot connect to an abstract socket bound outside
its domain. The domain made here handles no file and no network access, so bwrap's own
set-up (namespaces, mounts, pivot_root: Landlock refuses mounts only to a domain that
handles file access) works as before; signals are not scoped (bwrap's PID namespace
already keeps them inside, and bwrap must still signal its child). Landlock's ptrace rule
applies to every domain, but nothing outside bwrap's PID namespace is visible to trace.

The domain is made in the forked child just before it execs bwrap, so bwrap and the
command inherit it and sbxc's own process stays outside.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from .errors import Refusal

ABI_SCOPES = 6
_PR_SET_NO_NEW_PRIVS = 38


def child_setup(host_abi: int):
    """The ``child_setup`` callable for the bwrap runner, or None when the plan's host
    has no abstract-socket scope (the report says ``partial`` there)."""
    if host_abi < ABI_SCOPES:
        return None
    from .landlock_sys import SCOPE_ABSTRACT_UNIX_SOCKET, Landlock

    ll = Landlock()  # ctypes is loaded here, in sbxc's process, not in the child
    fix = "recompile the plan on this host (sbxc compile -o PLAN), or run with --network=false"

    def setup():
        # landlock_restrict_self needs no_new_privs without CAP_SYS_ADMIN. bwrap sets it
        # itself before it execs the command (--seccomp needs it), so this changes nothing
        # for the command; a setuid bwrap would lose its privilege, but then it falls back
        # to user namespaces as an unprivileged bwrap does.
        if ll.libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise Refusal("could not set no_new_privs before bwrap", fix)
        try:
            fd = ll.create_ruleset(0, 0, SCOPE_ABSTRACT_UNIX_SOCKET)
            try:
                ll.restrict_self(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise Refusal(f"could not scope abstract Unix sockets with Landlock ({e.strerror}); the plan "
                          f"assumed Landlock ABI {host_abi}", fix) from None

    return setup


def private_mounts_prefix(unshare: str, euid: int) -> list:
    """The command line that runs bwrap in a mount namespace of its own whose mounts are
    private (util-linux ``unshare --mount`` makes them so, recursively, before it execs
    bwrap in the same process): a mount the host adds during the run does not reach it,
    where bwrap alone makes its mounts slaves of the host's. Root makes the namespace
    directly; another user in a user namespace of its own that maps the caller to itself
    (bwrap then makes its own, nested, as it always does)."""
    flags = ["--mount"] if euid == 0 else ["--user", "--map-current-user", "--mount"]
    return [unshare, *flags, "--"]
