"""What the mount-based backends (bwrap, OCI) share: the verdicts they give alike before each
decides how to mount a rule (a rule under the sandbox's own /proc or /dev, a mask that needs
no mount), how they name a rule, find its parent rule and the folders between them, and
their rows for session workspaces."""
from __future__ import annotations

from typing import Optional

from ..compiler.plan import MASK, TMPFS, WRITE, is_within, parent_rule  # noqa: F401 (parent_rule: for the backends)
from ..verdict import ENFORCED, NARROWED, PARTIAL, Verdict, verdict

OWN_MOUNTS = ("/proc", "/dev")
"""Folders every sandbox gets its own of: no host rule reaches into them."""


_NET_PER_DEVICE = ("/proc/sys/net/ipv4/conf/", "/proc/sys/net/ipv6/conf/", "/proc/sys/net/ipv4/neigh/",
                   "/proc/sys/net/ipv6/neigh/", "/proc/sys/net/mpls/conf/")
"""Folders of /proc/sys/net with one entry per network device of the opener's namespace."""


def own_net_absent(path: str) -> bool:
    """Whether ``path`` is a per-device sysctl entry that a sandbox with its own network
    namespace (loopback only) does not have: any device but ``all``, ``default`` and
    ``lo``."""
    for top in _NET_PER_DEVICE:
        if path.startswith(top):
            return path[len(top):].split("/", 1)[0] not in ("all", "default", "lo")
    return False


def settled(backend: str, rule, subj: str, parent_access: Optional[str], missing: bool,
            dev_files: tuple, own_net: bool = False) -> Optional[Verdict]:
    """The verdict for ``rule`` when no mount of it is needed, else None. ``dev_files``
    names what the backend's own /dev holds (its first-level entries); ``own_net``: the
    sandbox has a network namespace of its own.

    A mask under the sandbox's own /proc or /dev still needs its mount where the path is
    there inside: the fresh procfs shows the same kernel-wide files as the host's
    (/proc/cpuinfo, /proc/sys/...), and the minimal /dev has its few entries (/dev/shm,
    /dev/null). A path that is not there inside has nothing to hide: a /dev entry the
    minimal /dev lacks, a /proc path this kernel does not have. (One process's entry,
    /proc/self or /proc/PID, is refused by the compiler: SBX056.)"""
    under_own = next((o for o in OWN_MOUNTS if is_within(rule.path, o)), None)
    if under_own is not None:
        if rule.access == MASK:
            if under_own == "/dev" and rule.path != "/dev":
                # The sandbox's /dev is its own: what the host has there says nothing of its
                # entries, and below one what is missing here is missing there too.
                entry, _, below = rule.path[5:].partition("/")
                if entry not in dev_files or (below and missing):
                    return verdict(backend, subj, ENFORCED, rule.span)
                return None  # mounted over the sandbox's own entry
            if missing or (own_net and own_net_absent(rule.path)):
                # Not in the sandbox's procfs: this kernel has no such file, or it is a
                # device of the host's network namespace, which the sandbox's has not.
                return verdict(backend, subj, ENFORCED, rule.span)
            return None  # mounted over the sandbox's own
        why = ("sbxc gives every sandbox its own /proc" if under_own == "/proc"
               else f"sbxc gives every sandbox a minimal /dev ({', '.join(dev_files)})")
        return verdict(backend, subj, NARROWED, rule.span, why)
    if rule.access != MASK:
        return None
    if missing:
        if parent_access == WRITE:
            return verdict(backend, subj, PARTIAL, rule.span,
                           "the path does not exist and its parent is writable: the command could create it")
        if parent_access == TMPFS:
            return verdict(backend, subj, PARTIAL, rule.span,
                           "the path does not exist and its parent is a private tmpfs: the command could create "
                           "it there (it never reaches the host)")
        return verdict(backend, subj, ENFORCED, rule.span)
    if parent_access in (MASK, None):
        # Nothing of the host shows there and nothing can be made there: a masked folder
        # and the sandbox's own root are read-only once the mounts are done.
        return verdict(backend, subj, ENFORCED, rule.span)
    return None


def rule_subject(rule, plan) -> str:
    """How the report names a filesystem rule (its origin, access and path as written)."""
    shown = rule.written or rule.path
    if rule.origin == "home":
        return f"home: {plan.home_mode} ({rule.access} {shown})"
    if rule.origin == "cache":
        return f"cache: {rule.access} {shown}"
    return f"{rule.access} {shown}"


def folders_between(parent: str, child: str) -> list:
    """Folders strictly between ``parent`` and ``child``, shallowest first."""
    rest = child[len(parent):].strip("/") if parent != "/" else child.strip("/")
    out = []
    cur = parent.rstrip("/")
    for p in rest.split("/")[:-1]:
        cur = f"{cur}/{p}"
        out.append(cur)
    return out


def host_network_verdicts(backend: str, net, landlock_abi: int) -> list:
    """``network: true`` where the command shares the host's network namespace, which holds
    the host's abstract Unix socket names: only a Landlock scope (ABI 6) keeps the command
    from connecting to them."""
    out = [verdict(backend, "network: true", ENFORCED, net.span)]
    if landlock_abi >= 6:
        out.append(verdict(backend, "abstract unix sockets", ENFORCED, net.span,
                           "the command shares the host's network namespace; a Landlock scope (ABI 6) "
                           "refuses connections to abstract sockets bound outside the sandbox"))
    else:
        out.append(verdict(backend, "abstract unix sockets", PARTIAL, net.span,
                           f"the command shares the host's network namespace and can connect to host "
                           f"processes' abstract Unix sockets (X11, D-Bus); Landlock ABI "
                           f"{landlock_abi} here has no scope for them (needs 6)"))
    return out


def session_verdicts(backend: str, plan) -> list:
    """Rows for a policy that sets ``workspace:``: both runners bind the workspace at the
    project's own path, under the same rules (runtime/session_mounts does the work)."""
    ws = dict(plan.workspace)
    span = ws.get("span")
    if span is None:
        return []
    out = [verdict(backend, "session workspaces", ENFORCED, span)]
    if "max_bytes" in ws:
        out.append(verdict(backend, "workspace.max_bytes", PARTIAL, span,
                           "sizes are checked between commands (after each command, at session apply and at "
                           "stop --snapshot), not enforced while a command writes"))
    return out
