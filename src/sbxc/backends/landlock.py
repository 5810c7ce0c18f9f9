"""Landlock + seccomp backend: the plan as (path, rights) rules, port rules, scopes and BPF.

Pure: plan + host facts in, ``Lowered`` out. The directory listings this lowering needs
(see below) are host facts (``HostFacts.listings``), gathered at compile time by
``sbxc.runtime.probe.dir_listings(landlock.listing_dirs(plan))``; nothing here reads the disk.

How SPEC §2 ("the deepest rule decides") becomes Landlock's "rights add up along the path":

A Landlock rule on a folder grants its rights to everything beneath it, and rules only
ever add. So a folder P whose rule grants rights r, but which holds a stricter rule D
somewhere beneath, cannot be given r itself. It gets only the rights every stricter rule
beneath it tolerates (``_tolerated``: a masked folder tolerates nothing, a read-only file
tolerates listing its parent ...), and the rest of r goes to P's entries one level down,
except the ones on the way to D, which are split the same way, recursively. The report
says what that costs: names created in P later get only P's reduced rights, and P itself
may lose its listing.
"""
from __future__ import annotations

from ..compiler.decide import decide
from ..hostfacts import listing_digest
from ..compiler.plan import (
    KIND_DIR, KIND_MISSING, MASK, NET_HOSTS, NET_OFF, NET_ON, NET_RULES, NONE, READ, TMPFS, WRITE,
    BUILTIN_SPAN, Plan, PathRule, below_range, is_within,
)
from ..verdict import ENFORCED, HOST_MOUNTS, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED, Verdict, verdict
from .. import landlock_abi as ll
from .lowered import Lowered

BACKEND = "landlock"

# Rights meaningful on a non-directory (the kernel refuses the others on a file's rule).
FILE_RIGHTS = ll.FS_EXECUTE | ll.FS_WRITE_FILE | ll.FS_READ_FILE | ll.FS_TRUNCATE | ll.FS_IOCTL_DEV
READ_RIGHTS = ll.FS_EXECUTE | ll.FS_READ_FILE | ll.FS_READ_DIR
ALL_FS = ll.ABI_RIGHTS[ll.ABI_MAX][0]
WRITE_RIGHTS = ALL_FS
# Rights checked on a file's parent folder that cannot touch an existing file: listing
# the folder, making new entries (a new entry cannot take an existing name without
# REMOVE_FILE), removing folders. Not MAKE_REG: where the folder cannot also give
# WRITE_FILE, open(O_CREAT|O_WRONLY) would create the file and then fail to open it,
# leaving an empty file behind on the host (a stale .git/index.lock, say).
_PARENT_SAFE_FOR_FILE = (
    ll.FS_READ_DIR | ll.FS_REMOVE_DIR | ll.FS_MAKE_CHAR | ll.FS_MAKE_DIR
    | ll.FS_MAKE_SOCK | ll.FS_MAKE_FIFO | ll.FS_MAKE_BLOCK | ll.FS_MAKE_SYM
)

_RIGHTS = {MASK: 0, TMPFS: 0, NONE: 0, READ: READ_RIGHTS, WRITE: WRITE_RIGHTS}

# Device files programs expect to use. Granted on top of the policy only where the
# policy shows the path at all (not masked, not absent).
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_DEVICE_RIGHTS = ll.FS_READ_FILE | ll.FS_WRITE_FILE | ll.FS_IOCTL_DEV | ll.FS_TRUNCATE
# The rest of the host's /dev is withheld even where a rule above it (`read /`) would
# show it: bwrap replaces /dev with its own minimal one (--dev), while under Landlock the
# command would see the host's. The caller's other terminals (/dev/pts/N, owned by the
# caller) could be read (keystrokes typed there) and written (escape sequences); as root
# with capabilities dropped, uid 0 still owns the consoles and block devices, whose raw
# bytes bypass every mask. /dev itself stays listable (names only, as `ls /dev` expects).
# A policy rule on /dev itself, or beneath it, is the policy's own decision and is kept.
DEV = "/dev"
DEV_ORIGIN = "devices"
_DEV_TOLERATED = ll.FS_READ_DIR

# The ABI each property needs (see runtime/landlock_sys.py for the table).
ABI_TRUNCATE = 3  # read-only files cannot be truncated
ABI_NET = 4  # TCP port rules
ABI_IOCTL = 5  # ioctl on device files follows the rules
ABI_SCOPES = 6  # signals and abstract Unix sockets stay inside the sandbox


def _is_file_kind(kind: str) -> bool:
    return kind not in (KIND_DIR, KIND_MISSING)


def _tolerated(rule: PathRule) -> int:
    """Rights an ancestor may grant without giving more than ``rule`` allows beneath it."""
    if rule.origin == DEV_ORIGIN:
        return _DEV_TOLERATED
    own = _RIGHTS[rule.access]
    if _is_file_kind(rule.kind):
        return own | _PARENT_SAFE_FOR_FILE
    return own


def _dropped_missing_masks(plan: Plan) -> set[str]:
    """Masks of paths missing at compile time that need no rule at all.

    Where the deciding rule of the parent grants no creation rights (read, mask, none),
    the command cannot create the path, so there is nothing to hide; the runtime re-checks
    that it is still missing and refuses the run otherwise.
    """
    out = set()
    for r in plan.fs:
        # The cache root is made at run time (runtime/cachedir.py): its mask must stay a
        # real rule, so the folder that appears gets nothing from the parent's grant.
        if r.access == MASK and r.kind == KIND_MISSING and r.origin != "cache":
            parent = r.path.rsplit("/", 1)[0] or "/"
            if decide(plan, parent).access in (READ, MASK, NONE):
                out.add(r.path)
    return out


def _dev_rule(plan: Plan) -> PathRule | None:
    """The implied rule that withholds the host's /dev (see DEV above): a mask that
    tolerates listing, present where a rule above /dev would grant it and the policy has
    no rule on /dev itself."""
    if any(r.path == DEV for r in plan.fs) or decide(plan, DEV).access not in (READ, WRITE):
        return None
    return PathRule(DEV, MASK, KIND_DIR, BUILTIN_SPAN, written=DEV, origin=DEV_ORIGIN)


def _effective_rules(plan: Plan) -> list[PathRule]:
    dropped = _dropped_missing_masks(plan)
    dev = _dev_rule(plan)
    return [r for r in plan.fs if r.path not in dropped] + ([dev] if dev else [])


class _RulesBelow:
    """The rules strictly beneath a path (``is_within`` and not the path itself), in path order.

    Asked for every granting folder and every listed entry on the way to a stricter rule,
    so scanning all rules for each made lowering quadratic in the policy's size. Paths
    that start with a given prefix are one contiguous run of the rules sorted by path, so
    an answer costs a binary search plus its own length.
    """

    def __init__(self, rules: list[PathRule]):
        self._rules = sorted(rules, key=lambda r: r.path)
        self._paths = [r.path for r in self._rules]

    def __call__(self, path: str) -> list[PathRule]:
        lo, hi = below_range(self._paths, path)
        return self._rules[lo:hi]


def listing_dirs(plan: Plan) -> tuple[str, ...]:
    """Folders whose entries the lowering needs: every granting rule's folder with a
    stricter rule beneath, and the folders on the way down to those rules."""
    rules = _effective_rules(plan)
    rules_below = _RulesBelow(rules)
    need = set()
    for r in rules:
        if _RIGHTS[r.access] == 0 or _is_file_kind(r.kind):
            continue
        below = rules_below(r.path)
        if not below:
            continue
        for d in below:
            if _tolerated(d) & _RIGHTS[r.access] == _RIGHTS[r.access]:
                continue
            # every folder from r.path down to d's parent
            p = d.path.rsplit("/", 1)[0] or "/"
            while is_within(p, r.path):
                need.add(p)
                if p == r.path:
                    break
                p = p.rsplit("/", 1)[0] or "/"
    return tuple(sorted(need))


METADATA_GAP = ("the mode bits (not setuid/setgid: seccomp refuses those), group, extended attributes, "
                "ACLs, inode flags (chattr) and times of files the caller owns can still change (no Landlock ABI "
                "covers metadata)")


class _Lowering:
    def __init__(self, plan: Plan, host):
        self.plan = plan
        self.host = host
        self.host_is_root = getattr(host, "uid", 1) == 0
        self.listings = {d: entries for d, entries in (getattr(host, "listings", ()) or ())}
        self.rules = _effective_rules(plan)
        self.dev_rule = next((r for r in self.rules if r.origin == DEV_ORIGIN), None)
        self.rule_paths = {r.path for r in self.rules}
        self.rules_below = _RulesBelow(self.rules)
        self.grants: dict[str, list] = {}  # path -> [rights, kind]
        self.verdicts: list[Verdict] = []
        self.unlisted: set[str] = set()
        self.used: dict[str, tuple] = {}  # the listings the grants were built from

    def grant(self, path: str, rights: int, kind: str) -> None:
        if _is_file_kind(kind):
            rights &= FILE_RIGHTS
        if not rights:
            return
        g = self.grants.setdefault(path, [0, "file" if _is_file_kind(kind) else "dir"])
        g[0] |= rights

    def v(self, subject: str, status: str, span, why: str = "") -> None:
        self.verdicts.append(verdict(BACKEND, subject, status, span, why))

    def split(self, node: str, rem: int, costs: list) -> None:
        """Give ``rem`` to everything beneath ``node`` except the deeper rules' subtrees."""
        entries = self.listings.get(node)
        if entries is None:
            self.unlisted.add(node)
            costs.append(f"{node}: its entries were not listed at compile time, so none of them get these rights")
            return
        self.used[node] = entries
        for name, kind in entries:
            child = node.rstrip("/") + "/" + name
            if child in self.rule_paths:
                if child == DEV and self.dev_rule is not None:
                    # Listing /dev survives the split as it would under an unsplit parent.
                    self.grant(child, rem & _DEV_TOLERATED, KIND_DIR)
                continue  # its own rule decides
            if kind == "symlink":
                # Landlock checks the target's own path; a rule on the link inode grants
                # nothing useful. The target is reached through its real path's rules.
                continue
            below = self.rules_below(child)
            if not below:
                self.grant(child, rem, kind)
                continue
            g = rem
            for d in below:
                g &= _tolerated(d)
            self.grant(child, g, kind)
            if rem & ~g:
                lost = ll.fs_names(rem & ~g)
                costs.append(f"{child} itself lacks {', '.join(lost)}")
                self.split(child, rem & ~g, costs)

    def lower_rule(self, r: PathRule) -> None:
        subject = f"{r.access} {r.written or r.path}"
        rights = _RIGHTS[r.access]
        if r.access == MASK:
            parent = r.path.rsplit("/", 1)[0] or "/"
            shown = (f"; its name also shows when {parent} is listed" if _is_file_kind(r.kind)
                     and decide(self.plan, parent).access in (READ, WRITE) else "")
            self.v(subject, PARTIAL, r.span,
                   "Landlock cannot hide names: the path's name, type, size and times stay visible to stat()"
                   + shown + "; no read, write or execute is granted"
                   + (", and new Unix sockets are refused, so a socket under it cannot be reached"
                      if not self.plan.syscalls.allow_unix_sockets else
                      "; new Unix sockets are allowed by the policy, so a socket file under it stays reachable"))
            return
        if r.access == TMPFS:
            # The runner (runtime/landlock_run) makes the folder in the path where sbxc
            # may create one there, else in /tmp; TMPDIR names the /tmp rule's folder, or
            # the first tmpfs rule's when there is no /tmp rule.
            tmpfs = [x.path for x in self.plan.fs if x.access == TMPFS]
            tmpdir = r.path == ("/tmp" if "/tmp" in tmpfs else tmpfs[0])
            where = ("made inside /tmp" if r.path == "/tmp" else
                     f"made inside {r.path} where sbxc may create one, else in /tmp")
            self.v(subject, NARROWED, r.span,
                   f"a fresh per-run folder stands in for it, {where}"
                   + (" (TMPDIR points at it)" if tmpdir else "")
                   + f"; it is removed after the run; {r.path} itself and the host's files in it are not accessible")
            return
        if _is_file_kind(r.kind):
            self.grant(r.path, rights, r.kind)
            self._read_only_partial(r, subject, [])
            return
        below = self.rules_below(r.path)
        g = rights
        for d in below:
            g &= _tolerated(d)
        self.grant(r.path, g, r.kind)
        costs: list = []
        if rights & ~g:
            lost = ll.fs_names(rights & ~g)
            costs.append(f"{r.path} itself and names created in it later lack {', '.join(lost)}")
            if r.access == WRITE and rights & ~g & (ll.FS_MAKE_REG | ll.FS_REMOVE_FILE):
                # Said plainly, since the rights' names do not: the author may prefer to
                # drop the protecting rule than to lose this.
                costs.append(f"so no file can be created, removed or renamed directly in {r.path} "
                             "(tools that do so there fail: git commit, when it is the project or its .git, "
                             "editors' save-by-rename)")
            self.split(r.path, rights & ~g, costs)
            costs.append("entries created after compile time anywhere on the way to the stricter rules below get only the reduced rights")
        self._read_only_partial(r, subject, costs)

    def _read_only_partial(self, r: PathRule, subject: str, costs: list) -> None:
        # As root, seccomp refuses every metadata call (ROOT_METADATA_DENY): nothing to add.
        meta = "" if self.host_is_root else METADATA_GAP
        if costs:
            why = "stricter rules beneath it: " + "; ".join(costs)
            if r.access == READ and meta:
                self.v(subject, PARTIAL, r.span, why + "; " + meta)
            else:
                self.v(subject, NARROWED, r.span, why)
        elif r.access == READ and meta:
            self.v(subject, PARTIAL, r.span, meta)
        else:
            self.v(subject, ENFORCED, r.span)

    def devices(self) -> list[str]:
        out = []
        for path in DEVICE_FILES:
            d = decide(self.plan, path)
            if d.access in (MASK, NONE, TMPFS):
                continue
            if self.rules_below(path):
                continue
            self.grant(path, _DEVICE_RIGHTS, "other")
            out.append(path)
        return out

    def stdio_terminals(self) -> bool:
        """Whether the runner may grant the terminal the command's own stdin, stdout or
        stderr already is (so `echo >/dev/stderr` works on a terminal): where the policy
        shows /dev/pts at all. Reopening it gives nothing the open descriptor does not."""
        return decide(self.plan, "/dev/pts").access in (READ, WRITE)


def _net(plan: Plan) -> tuple[int, list, list]:
    """(handled_net, [[lo, hi, rights], ...], verdicts' text) for the plan's network."""
    n = plan.network
    if n.mode == NET_ON:
        return 0, [], []
    handled = ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    ports = []
    for r in n.rules:
        right = ll.NET_BIND_TCP if r.op == "bind" else ll.NET_CONNECT_TCP
        ports.append([r.port_lo, r.port_hi, right])
    ports.sort()
    return handled, ports, []


def lower(plan: Plan, host) -> Lowered:
    from . import seccomp

    L = _Lowering(plan, host)
    for r in plan.fs:
        if r.path not in L.rule_paths:
            L.v(f"mask {r.written or r.path}", ENFORCED, r.span)  # missing, nothing to hide
            continue
        L.lower_rule(r)
    for s in plan.skipped:
        L.v(f"{s.access}? {s.path}", SKIPPED, s.span, s.reason)
    devices = L.devices()
    if L.dev_rule is not None:
        L.v("devices", NARROWED, BUILTIN_SPAN,
            "of the host's /dev only " + (", ".join(devices) or "nothing") + " can be opened (and /dev listed); "
            "the caller's terminals (/dev/pts/*, /dev/tty, consoles) and other device files are refused, "
            "except the terminal the command's own stdin, stdout or stderr already is; "
            "new pseudo-terminals cannot be opened (/dev/ptmx would need all of /dev/pts), "
            "where bwrap gives a private /dev/pts")
    elif devices:
        L.v("devices", ENFORCED, BUILTIN_SPAN)

    handled_net, ports, _ = _net(plan)
    net = plan.network
    if net.mode == NET_OFF:
        L.v("network: false", NARROWED, net.span,
            "TCP connect and bind are refused by Landlock (ABI 4) and seccomp refuses every AF_INET/AF_INET6 socket, "
            "so loopback inside the command is unavailable too (Landlock cannot tell the command's own loopback from the host's)")
    elif net.mode == NET_RULES:
        rules = ", ".join(f"{r.op} tcp {r.port_lo}" + (f"-{r.port_hi}" if r.port_hi != r.port_lo else "") for r in net.rules)
        why = ("only plain TCP sockets can be created (UDP, raw, SCTP and MPTCP are refused, DNS over UDP included); "
               "ports are checked on every address, loopback and the host's included; MSG_FASTOPEN is refused")
        status = NARROWED
        if not any(r.op == "bind" for r in net.rules):
            why += "; listen() is refused (an unbound socket would take a port without the bind check)"
        else:
            # seccomp cannot tell a bound socket from an unbound one at listen().
            status = PARTIAL
            why += ("; listen() on a TCP socket that was never bound takes an ephemeral port without "
                    "Landlock's bind check, so the command can accept connections on a port no rule names")
        L.v(f"network: [{rules}]", status, net.span, why)
    elif net.mode == NET_HOSTS:
        from .bwrap import host_status, host_subject

        for h in net.hosts:
            status, why = host_status(h, "through sbxc's proxy, the only TCP port the command may connect to")
            L.v(host_subject(h), status, h.span, why)
        L.v("network: host rules", PARTIAL, net.span,
            "TCP connect is allowed to the proxy's port only, but on any address: a service listening on that "
            "port number elsewhere (the host's loopback included) is reachable too; every other socket is refused "
            "as with network: false (UDP and DNS included: names are resolved by the proxy)"
            + ("; the listed ports stay open as port rules: " + ", ".join(
                f"{r.op} tcp {r.port_lo}" + (f"-{r.port_hi}" if r.port_hi != r.port_lo else "") for r in net.rules)
               if net.rules else "")
            # As with port rules alone: seccomp cannot tell a bound socket from an unbound one at listen().
            + ("; listen() on a TCP socket that was never bound takes an ephemeral port without Landlock's bind "
               "check, so the command can accept connections on a port no rule names"
               if any(r.op == "bind" for r in net.rules) else ""))
    else:
        L.v("network: true", ENFORCED, net.span)
    L.v("socket families", NARROWED, BUILTIN_SPAN, seccomp.families_verdict_text())

    if plan.syscalls.allow_unix_sockets:
        masked = [r.path for r in plan.fs if r.access == MASK and r.kind == "socket"]
        L.v("unix sockets", PARTIAL, BUILTIN_SPAN,
            "new AF_UNIX sockets are allowed: connect(2) to a socket file is not checked by Landlock before ABI 9, "
            "so sockets under masked paths stay reachable" + (f" ({', '.join(masked)})" if masked else ""))
    else:
        L.v("unix sockets", NARROWED, BUILTIN_SPAN,
            "new AF_UNIX sockets are refused (socketpair for stream and seqpacket is kept), because Landlock before "
            "ABI 9 cannot stop connect(2) to a socket file under a masked path")
    L.v("processes", PARTIAL, BUILTIN_SPAN,
        "signals and abstract Unix sockets stay inside the sandbox (ABI 6 scopes); other processes' memory is out "
        "of reach (Landlock's ptrace check); resource limits, nice value, CPU affinity, scheduling policy and I/O "
        "priority can be set only for the caller itself (pid 0): seccomp refuses any other pid, the command's own "
        "children and threads included (renice -p, taskset -p, pthread_setaffinity_np, pthread_setschedparam fail); "
        "other processes stay visible in /proc (command lines, not memory or environment)"
        + ("; as root the command also runs in a PID namespace of its own (the run refuses without one), so no "
           "outside process can be named by pid, but /proc is still the host's: its pids are host pids, not the "
           "command's" if L.host_is_root else
           "; without root there is no PID namespace (it would need a user namespace): pids the command names "
           "are host pids"))
    L.v(HOST_MOUNTS, ENFORCED, BUILTIN_SPAN,
        "Landlock's rules are on the paths: a mount the host makes during the run, under a rule, is under that rule")
    if L.host_is_root:
        L.v("ipc", ENFORCED, BUILTIN_SPAN)  # the runner unshares an IPC namespace for uid 0
    else:
        L.v("ipc", NARROWED, BUILTIN_SPAN,
            "the command shares the host's IPC namespace (the runner makes a new one only for root): System V "
            "shared memory, message queues and semaphores (shmget, msgget, semget ...) and POSIX message queues "
            "(mq_open ...) would be the host's, so seccomp refuses them all: programs that need them fail "
            "(fakeroot in its default SysV mode, and so dpkg-buildpackage; a PostgreSQL server; X11 "
            "shared-memory images fall back to slower transfers); "
            "POSIX shared memory and semaphores in /dev/shm follow the file rules; use bwrap for these")

    abi_needed = max(ABI_TRUNCATE, ABI_IOCTL, ABI_SCOPES, ABI_NET if net.mode != NET_ON else 0, plan.landlock.min_abi)
    host_abi = getattr(host, "landlock_abi", 0)
    if host_abi < plan.landlock.min_abi:
        L.v("landlock.min_abi", NOT_ENFORCEABLE, plan.landlock.span,
            f"this kernel has Landlock ABI {host_abi}, the policy asks for at least {plan.landlock.min_abi}")
    elif host_abi < abi_needed:
        fs, netr, scopes, _ = ll.rights_for_abi(host_abi)
        lost = ll.fs_names(ALL_FS & ~fs) + ll.net_names(handled_net & ~netr) + ll.scope_names(
            (ll.SCOPE_ABSTRACT_UNIX_SOCKET | ll.SCOPE_SIGNAL) & ~scopes)
        if plan.landlock.best_effort:
            L.v("landlock.best_effort", PARTIAL, plan.landlock.span,
                f"this kernel has Landlock ABI {host_abi} (the plan uses {abi_needed}); not enforced: {', '.join(lost)}")
        else:
            L.v("landlock", NOT_ENFORCEABLE, plan.landlock.span,
                f"this kernel has Landlock ABI {host_abi}, the plan needs {abi_needed} for {', '.join(lost)}; "
                "set landlock.best_effort: true to run without them")
    if L.unlisted:
        L.v("landlock listings", NARROWED, BUILTIN_SPAN,
            "the entries of " + ", ".join(sorted(L.unlisted)) + " were not gathered at compile time; they get no rights")

    try:
        bpf = seccomp.compile_filter(plan.syscalls, getattr(host, "arch", "x86_64"), purpose="landlock", network=net,
                                     root_metadata=L.host_is_root, host_ipc=not L.host_is_root)
        L.v("syscalls", ENFORCED, plan.syscalls.span)
        if L.host_is_root:
            L.v("metadata (root)", NARROWED, BUILTIN_SPAN,
                "as root, chmod, chown, extended attributes (ACLs) and inode flags (chattr) are refused "
                "everywhere: no Landlock ABI "
                "covers metadata, and root owns every root-owned file on the host (chmod of the command's own "
                "outputs fails too; times can still change); use bwrap for root")
    except (ValueError, OSError, ImportError) as e:  # unknown name, unsupported arch, no libseccomp
        bpf = b""  # the runner refuses a plan without a filter
        L.v("syscalls", NOT_ENFORCEABLE, plan.syscalls.span, f"the seccomp filter could not be built: {e}")
    data = {
        "min_abi": plan.landlock.min_abi,
        "best_effort": plan.landlock.best_effort,
        "abi_needed": abi_needed,
        "handled_fs": ALL_FS,
        "handled_net": handled_net,
        "scoped": ll.SCOPE_ABSTRACT_UNIX_SOCKET | ll.SCOPE_SIGNAL,
        "fs_rules": [[p, g[0], g[1]] for p, g in sorted(L.grants.items())],
        "net_rules": ports,
        "network": net.mode,
        "tmpfs": [r.path for r in plan.fs if r.access == TMPFS],
        "stdio_ttys": L.stdio_terminals(),
        "absent": sorted(_dropped_missing_masks(plan)),
        # Fingerprints of the listings the grants were built from: a cached plan whose
        # folders gained or lost entries since is compiled again (runtime/plancache).
        "listed": [[d, listing_digest(e)] for d, e in sorted(L.used.items())],
        "seccomp": bpf.hex(),
    }
    if net.mode == NET_HOSTS:
        # The proxy's port is known only once it listens: the runtime adds its connect rule.
        data["proxy_port"] = True
    return Lowered(BACKEND, data, tuple(L.verdicts) + tuple(_session_verdicts(plan)))


def _session_verdicts(plan) -> list:
    """Rows for a policy that sets ``workspace:`` (runtime/session_mounts does the work)."""
    ws = dict(plan.workspace)
    span = ws.get("span")
    if span is None:
        return []
    out = [verdict(BACKEND, "session workspaces", PARTIAL, span,
                   "no mount namespace: a session's command starts in its workspace, which lies in sbxc's "
                   "sessions folder, not at the project's path; absolute paths into the project reach the host's "
                   "copy, read-only")]
    if "max_bytes" in ws:
        out.append(verdict(BACKEND, "workspace.max_bytes", PARTIAL, span,
                           "sizes are checked between commands (after each command, at session apply and at "
                           "stop --snapshot), not enforced while a command writes"))
    return out
