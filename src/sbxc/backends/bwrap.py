"""bubblewrap backend: ``lower(plan, host) -> Lowered`` with bwrap's options and verdicts.

Pure: no disk, no environment, no clock. The options are in setup order (bwrap applies
them in the order given), mounts parents before children.

``Lowered.data``::

    {"bwrap": "/usr/bin/bwrap",      # the binary the plan was made for (host facts)
     "argv": [...],                  # options between "bwrap" and "--"; "@fd:empty" marks
                                     # a descriptor the runtime opens on /dev/null
     "seccomp": "<hex>",             # BPF for --seccomp FD (the runtime pipes it in)
     "network": "on" | "off" | "rules",
     "host_points": [path, ...]}     # only when there are any: rules mounted under a
                                     # ``write`` rule, whose mount point bwrap would make on
                                     # the host were it missing (their checks come first)

How each kind of rule is mounted, and why:

- ``read``  -> ``--ro-bind P P``; ``write`` -> ``--bind P P``; ``tmpfs`` -> ``--tmpfs P``.
- ``mask`` of a folder -> ``--tmpfs P`` now and ``--remount-ro P`` after every other
  mount: an empty folder that stays read-only even for root inside (EROFS does not look
  at capabilities). The remount comes last because bwrap must still be able to create
  mount points in it for deeper rules (the cache folder under its masked root).
- ``mask`` of a file, socket or device -> ``--ro-bind-data FD P`` with FD reading
  nothing: an empty *regular* file on a read-only mount. /dev/null would not do: the
  kernel lets anyone write to a device node even on a read-only mount. Connecting to a
  regular file fails (ECONNREFUSED), so a masked socket cannot be reached.
- ``mask`` of a missing path: nothing to hide. Under a writable parent the command could
  create it, and bwrap cannot put a mount on a path that does not exist without creating
  it on the host, so the verdict is ``partial``.
- A rule below a ``write`` rule: every folder between the two is bind-mounted onto itself.
  A mount point cannot be renamed or removed (EBUSY), so ``mv .git .git2`` followed by a
  fresh ``.git/hooks`` cannot step around a read-only ``.git/hooks``.
- A symlink on the way to a rule's path as written (``/bin`` -> ``usr/bin``) is made
  inside with the same target (``--symlink``) where no bind of the host's folder brings it.
- ``/proc`` and ``/dev`` are bwrap's own (a fresh procfs for the new PID namespace, with
  ``/proc/sys`` read-only; a minimal /dev). Policy rules there are narrowed; a ``mask`` is
  mounted over what is there inside (the kernel's files in /proc, ``DEV_FILES``), as
  anywhere else, and is already true for what is not.

Always: a new session (no TIOCSTI into the caller's terminal), the sandbox dies with its
parent, new user/PID/IPC/UTS (and cgroup where the kernel has it) namespaces, no further
user namespaces inside, all capabilities dropped when run as root (bwrap keeps them in the
new user namespace otherwise). The environment is not on bwrap's command line: the runtime
gives bwrap exactly the command's environment, so bwrap's own process (pid 1 inside) holds
nothing more than the command does.
"""
from __future__ import annotations

from ..compiler.plan import (
    BUILTIN_SPAN, KIND_DIR, KIND_MISSING, KIND_OTHER, MASK, NET_HOSTS, NET_OFF, NET_ON, NET_RULES,
    READ, TMPFS, WRITE, Plan, path_depth,
)
from ..layout import BWRAP_EMPTY_FD as EMPTY_FD  # noqa: F401 (the runtime's placeholder too)
from ..verdict import ENFORCED, HOST_MOUNTS, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED, verdict
from .lowered import Lowered
from .mountrules import folders_between as _between, host_network_verdicts, parent_rule as _parent_rule, settled
from .mountrules import rule_subject as _subject, session_verdicts

NAME = "bwrap"
DEV_FILES = ("null", "zero", "full", "random", "urandom", "tty", "console", "pts", "ptmx", "shm", "fd", "stdin",
             "stdout", "stderr")
"""What bwrap's own /dev (``--dev``) holds: a mask of one of these is mounted over it."""



def _version_at_least(version: str, want: tuple[int, ...]) -> bool:
    parts = []
    for p in version.split("."):
        digits = ""
        for ch in p:
            if not "0" <= ch <= "9":
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= want


def lower(plan: Plan, host) -> Lowered:
    verdicts = []
    ops: list[tuple[tuple[int, str, int], list[str]]] = []  # ((depth, path, seq), args)
    remounts: list[str] = []
    self_binds: set[str] = set()
    host_points: list[str] = []
    by_path = {r.path: r for r in plan.fs}
    rule_paths = by_path.keys()
    seq = 0

    def add(path: str, args: list[str]) -> None:
        nonlocal seq
        seq += 1
        ops.append(((path_depth(path), path, seq), args))

    add("/proc", ["--proc", "/proc"])
    # bwrap makes /proc/sys read-only only when it finds the folder writable, and for uid 0
    # in a user namespace the folder is not (0555) while files in it are (drop_caches has
    # no capability check, only the owner's write bit). So: cover it ourselves. The source
    # is the host's /proc/sys, which shows the same values: a sysctl file answers for the
    # namespaces of the process that opens it, not for the mount it was reached through.
    add("/proc/sys", ["--ro-bind", "/proc/sys", "/proc/sys"])
    add("/dev", ["--dev", "/dev"])

    for rule in plan.fs:
        subj = _subject(rule, plan)
        p = rule.path
        parent = _parent_rule(by_path, p)
        parent_access = parent.access if parent is not None else None
        cache_rule = rule.origin == "cache"  # made by the runtime before bwrap starts
        missing = rule.kind == KIND_MISSING and not cache_rule
        if rule.access == MASK and p == "/dev/core":
            # bwrap's /dev/core is a link to /proc/kcore: a mount there would land on the
            # kernel's file, which this kernel may not have (bwrap then fails every run).
            verdicts.append(verdict(NAME, subj, PARTIAL, rule.span,
                                    "bwrap's own /dev/core is a link to /proc/kcore, which only CAP_SYS_RAWIO can "
                                    "read (no sandbox has it); the link's name stays"))
            continue
        done = settled(NAME, rule, subj, parent_access, missing, DEV_FILES, plan.network.mode != NET_ON)
        if done is not None:
            verdicts.append(done)
            continue

        # A mask left here is mounted: under a private tmpfs the path is absent but could be
        # created, and mounting the mask there (in the tmpfs, not on the host) keeps it from
        # being made.
        if rule.access != MASK and missing:
            verdicts.append(verdict(NAME, subj, NOT_ENFORCEABLE, rule.span,
                                    "the path does not exist; bwrap cannot mount it"))
            continue

        if parent_access == WRITE and not cache_rule:
            # bwrap makes a missing mount point itself, through the writable bind: on the host.
            host_points.append(p)
        if parent_access == WRITE:
            for d in _between(parent.path, p):
                if d == "/proc" or d == "/dev" or d.startswith(("/proc/", "/dev/")):
                    break  # bwrap's own, never the host's (a mask over it, below)
                if d not in rule_paths and d not in self_binds:
                    self_binds.add(d)
                    add(d, ["--bind", d, d])

        kind = KIND_DIR if cache_rule else rule.kind
        if rule.access == MASK:
            if kind == KIND_DIR:
                add(p, ["--tmpfs", p])
                remounts.append(p)
            else:
                add(p, ["--ro-bind-data", EMPTY_FD, p])
            verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
        elif rule.access == TMPFS:
            if kind == KIND_DIR:
                add(p, ["--tmpfs", p])
                verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
            else:
                add(p, ["--ro-bind-data", EMPTY_FD, p])
                verdicts.append(verdict(NAME, subj, NARROWED, rule.span,
                                        f"a tmpfs needs a folder and this is a {kind}: it is shown empty and read-only"))
        elif rule.access in (READ, WRITE):
            add(p, ["--ro-bind" if rule.access == READ else "--bind", p, p])
            if kind == KIND_OTHER:
                verdicts.append(verdict(NAME, subj, NARROWED, rule.span,
                                        "bwrap mounts with nodev: a device node there cannot be opened"))
            else:
                verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
        else:
            raise ValueError(f"unknown access {rule.access!r}")

    for s in plan.skipped:
        verdicts.append(verdict(NAME, f"{s.access}? {s.path}", SKIPPED, s.span, s.reason))

    # The links on the way to a rule's spelling (merged-/usr /bin -> usr/bin): bwrap mounts
    # the real path, and the spelling leads there only if the link exists inside too. Under
    # a bind of the host's folder it does already; on bwrap's own root or in a tmpfs it is
    # made (--symlink, the same target text, so it resolves as on the host); in a masked
    # folder it is not (the folder stays empty).
    for link, target, span in plan.links:
        holder = _parent_rule(by_path, link)
        if holder is None or holder.access == TMPFS:
            add(link, ["--symlink", target, link])
        elif holder.access == MASK:
            verdicts.append(verdict(NAME, f"link {link}", NARROWED, span,
                                    f"{link} is a symlink (to {target}) on the host, inside a masked folder here, "
                                    "which stays empty: reach the rule's real path by that path"))

    argv = [
        "--new-session",      # setsid: the command has no controlling terminal (no TIOCSTI)
        "--die-with-parent",  # sbxc dies -> the sandbox dies (PR_SET_PDEATHSIG)
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    net = plan.network
    if net.mode in (NET_OFF, NET_RULES, NET_HOSTS):
        # Host rules too: the command's namespace has loopback only; the runtime puts the
        # proxy's listening socket into it (runtime/proxy_netns) before the command starts.
        argv.append("--unshare-net")
    if not host.bwrap_version or _version_at_least(host.bwrap_version, (0, 8)):
        # No new user namespaces inside (bwrap >= 0.8); the seccomp filter refuses them too.
        argv.append("--disable-userns")
    if host.uid == 0:
        # As root, bwrap keeps capabilities inside the user namespace unless told not to.
        argv += ["--cap-drop", "ALL"]
    for _key, args in sorted(ops, key=lambda o: o[0]):
        argv += args
    for p in remounts:
        argv += ["--remount-ro", p]
    if "/" not in rule_paths:
        # No rule for /: bwrap's own root is an empty tmpfs, writable by the command. What
        # no rule covers is not there (SPEC §2), so it must not be creatable either.
        argv += ["--remount-ro", "/"]

    verdicts += session_verdicts(NAME, plan)
    if net.mode == NET_ON:
        verdicts += host_network_verdicts(NAME, net, host.landlock_abi)
    elif net.mode == NET_OFF:
        verdicts.append(verdict(NAME, "network: false", ENFORCED, net.span))
    else:
        for h in net.hosts:
            status, why = host_status(h, "through sbxc's proxy: the command's network namespace has loopback "
                                         "only, and the proxy listens inside it, on 127.0.0.1:3128")
            verdicts.append(verdict(NAME, host_subject(h), status, h.span, why))
        for r in net.rules:
            ports = str(r.port_lo) if r.port_lo == r.port_hi else f"{r.port_lo}-{r.port_hi}"
            verdicts.append(verdict(NAME, f"{r.op} {r.proto} {ports}", NARROWED, r.span,
                                    "bwrap cannot allow single ports: the network is off (use --backend landlock for per-port rules)"))

    seccomp_hex = ""
    try:
        from . import seccomp

        seccomp_hex = seccomp.compile_filter(plan.syscalls, host.arch, purpose="bwrap", network=net).hex()
        verdicts.append(verdict(NAME, "syscalls", ENFORCED, plan.syscalls.span))
        verdicts.append(verdict(NAME, "socket families", NARROWED, BUILTIN_SPAN, seccomp.families_verdict_text()))
    except Exception as e:  # missing libseccomp, unknown syscall, unsupported arch
        verdicts.append(verdict(NAME, "syscalls", NOT_ENFORCEABLE, plan.syscalls.span,
                                f"the seccomp filter could not be built: {e}"))

    # --unshare-ipc: System V objects and POSIX message queues are the sandbox's own;
    # --unshare-pid: every pid the command can name is inside.
    verdicts.append(verdict(NAME, "ipc", ENFORCED, BUILTIN_SPAN))
    verdicts.append(verdict(NAME, "processes", ENFORCED, BUILTIN_SPAN))
    # bwrap makes every mount of its namespace a slave of the host's, and has no option for
    # private ones: the runner starts it inside a namespace whose mounts are private
    # (runtime.bwrap_scope.private_mounts_prefix), where this host allows it.
    if host.private_mounts:
        verdicts.append(verdict(NAME, HOST_MOUNTS, ENFORCED, BUILTIN_SPAN,
                                "where a mount of the host is shared, bwrap runs in a mount namespace whose mounts "
                                "are private (unshare --mount); where none is, bwrap's copies are private anyway: a "
                                "mount the host makes during the run does not appear inside"))
    else:
        verdicts.append(verdict(NAME, HOST_MOUNTS, PARTIAL, BUILTIN_SPAN,
                                "bwrap keeps the sandbox's mounts slaves of the host's, and this host gives it no "
                                "private mount namespace to run in (no unshare(1) in a system folder, or no user "
                                "namespace for sbxc): a mount the host makes while the command runs (an automount, "
                                "a USB stick, another container's overlay) appears inside with its own options "
                                "(writable, for one)"))
    low = {"bwrap": host.bwrap, "argv": argv, "seccomp": seccomp_hex, "network": net.mode}
    if host.private_mounts:
        low["private_mounts"] = True
    if host_points:
        low["host_points"] = sorted(host_points)
    verdicts.append(verdict(NAME, "env", ENFORCED, plan.env.span))
    return Lowered(NAME, low, tuple(verdicts))


def host_status(h, how: str) -> tuple[str, str]:
    """The report's verdict and reason for one host rule: ``how`` the backend enforces
    it, unless the proxy can never use it (``HostRule.unusable``): then it is narrowed,
    since everything it would allow is refused."""
    if h.unusable:
        return NARROWED, f"never used: {h.unusable}, so the proxy refuses every connection it would allow"
    return ENFORCED, how


def host_subject(h) -> str:
    """The report's subject for one host rule (a group's host names its group)."""
    ports = "" if h.ports == (80, 443) else ":" + ",".join(str(p) for p in h.ports)
    where = f" (@{h.group}: {h.source})" if h.group else ""
    return f"allow {h.host}{ports}{where}"


