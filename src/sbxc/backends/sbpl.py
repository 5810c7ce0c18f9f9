"""macOS backend: the plan as a Seatbelt (SBPL) profile for ``sandbox-exec -f PROFILE``.

Pure: plan + host facts in, profile text, parameters and verdicts out.

How SPEC §2 ("the deepest rule decides") survives SBPL's "the last matching rule wins":

* Every filesystem rule is emitted as a *complete* statement about its subtree: it allows
  what its access grants **and denies what it does not** (a ``read`` under a ``write``
  parent says ``deny file-write*``; a ``mask`` denies every file operation and Unix-socket
  connects). So whichever rule matches last decides every operation on its own.
* Rules are emitted in the plan's order, (depth, path): a rule's ancestors all come before
  it, so for any path the last matching policy rule is the deepest one that contains it.
  Two rules of the same depth never contain the same path.
* What the command needs to start (system libraries when the policy does not grant them,
  metadata of the folders above a granted path) is emitted *before* the policy rules, so a
  ``mask`` always overrides it. The few device nodes every program expects (``/dev/null``
  …) are emitted after, but only where the policy does not mask them.

Paths go into the profile as SBPL strings with ``\\`` and ``"`` escaped, and only when
every character is printable; any other path (newline, tab, other control or invisible
characters) is passed as a ``sandbox-exec -D NAME=VALUE`` parameter and referenced with
``(param "NAME")``, so its bytes never reach the profile's text. A path that neither form
can carry (not valid UTF-8, a NUL, longer than macOS's MAXPATHLEN) is dropped only when
that grants less; otherwise it is ``not enforceable`` and the plan refuses to run.
"""
from __future__ import annotations

from typing import Iterable, Optional

from ..compiler.decide import OPS, Decision, decide
from ..compiler.plan import (
    KIND_MISSING, MASK, NET_OFF, NET_ON, NONE, READ, TMPFS, WRITE,
    BUILTIN_SPAN, Plan, PathRule, below_range, fs_sort_key,
)
from ..verdict import ENFORCED, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED, Verdict, verdict
from .lowered import Lowered

BACKEND = "sandbox-exec"

# macOS MAXPATHLEN is 1024 including the terminating NUL; the kernel cannot name a longer
# path, so Seatbelt could never match a rule on one.
MAX_PATH_BYTES = 1023

# A port range wider than this is not spelled out port by port (SBPL filters name one
# port or "*"); such a rule is dropped and reported as narrowed.
MAX_PORTS_PER_RULE = 1024

PARAM_CACHE = "SBXC_CACHE_DIR"
PARAM_RUN_TMP = "SBXC_RUN_TMP"

# Operation groups. ``file-map-executable`` is checked when dyld maps code (macOS 10.15+)
# and ``process-exec`` when a file is executed: both are "exec" in the decision model, so
# they travel with ``file-read*``. ``network-outbound`` with a path filter is a connect to
# a Unix socket at that path ("connect" in the decision model); it never matches TCP/UDP.
OPS_READ = ("file-read*", "file-map-executable", "process-exec*")
OPS_WRITE = ("file-write*",)
OPS_CONNECT = ("network-outbound",)

# Folders every macOS process reads while starting (dyld, libSystem, the shared cache in
# its pre-13 and cryptex locations, Rosetta's runtime, the time zone database). Granted
# read-only, before the policy's rules, and only where no policy rule decides the path.
SYSTEM_READ = (
    "/usr/lib",
    "/System/Library",
    "/System/Volumes/Preboot/Cryptexes/OS",
    "/System/Cryptexes/OS",
    "/private/var/db/dyld",
    "/private/var/db/timezone",
    "/Library/Apple/usr/libexec/oah",
)

# Device nodes a program expects to open whatever the policy says (bwrap's --dev gives the
# same on Linux). (path, subtree?, writable?)
DEVICES = (
    ("/dev/null", False, True),
    ("/dev/zero", False, True),
    ("/dev/random", False, False),
    ("/dev/urandom", False, False),
    ("/dev/tty", False, True),
    # fdesc: reopening a descriptor the process already holds; reaches nothing new.
    ("/dev/fd", True, True),
)

# Mach services libSystem asks for in ordinary command-line programs: logging, user and
# group lookups (getpwuid), notifications, the per-user temporary folder. Deliberately not
# cfprefsd (it would serve ~/Library/Preferences past the file rules) nor launchservices.
MACH_BASE = (
    "com.apple.bsd.dirhelper",
    "com.apple.logd",
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
)
# Name resolution and TLS trust evaluation, only when the network is fully on.
MACH_NET = (
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.trustd.agent",
)
MDNS_SOCKET = "/private/var/run/mDNSResponder"

# file-ioctl on terminals the command inherited (tcsetattr, window size). ioctl needs an
# open descriptor and opening one is governed by the file rules, so this reaches only the
# caller's own terminal, never another one.
TTY_IOCTL_REGEX = "^/dev/ttys[0-9]+$"


class Unrepresentable(ValueError):
    """A path that neither an SBPL string nor a sandbox-exec parameter can carry."""


def sbpl_string(text: str) -> str:
    """``text`` as an SBPL (Scheme) string literal.

    Only printable text is accepted: inside a string literal ``;``, ``#|``, ``(`` are
    plain characters to a Scheme reader, and the two characters the reader treats
    specially (``\\`` and ``"``) are escaped. Anything else must go as a parameter.
    """
    if not text.isprintable():
        raise Unrepresentable("not printable")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def path_problem(path: str) -> str:
    """Why ``path`` cannot appear in a profile at all (empty when it can)."""
    if "\x00" in path:
        return "the path holds a NUL byte"
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        return "the path is not valid UTF-8 (sandbox profiles hold text)"
    if len(encoded) > MAX_PATH_BYTES:
        return f"the path is longer than macOS's {MAX_PATH_BYTES}-byte limit"
    return ""


class _Params:
    """Paths passed as ``-D NAME=VALUE``: names are assigned in emission order (deterministic)."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self._by_value: dict[str, str] = {}

    def fixed(self, value: str) -> str:
        name = self._by_value.get(value)
        if name is None:
            name = f"SBXC_P{len(self._by_value)}"
            self._by_value[value] = name
            self.entries.append({"name": name, "value": value})
        return name

    def runtime(self, name: str, source: str, default: str) -> str:
        if not any(e["name"] == name for e in self.entries):
            self.entries.append({"name": name, "source": source, "default": default})
        return name


def _path_expr(path: str, params: _Params) -> str:
    problem = path_problem(path)
    if problem:
        raise Unrepresentable(problem)
    if path.isprintable():
        return sbpl_string(path)
    return f'(param {sbpl_string(params.fixed(path))})'


def _rule(action: str, ops: Iterable[str], filters: Iterable[str] = ()) -> str:
    ops = " ".join(ops)
    filters = list(filters)
    if not filters:
        return f"({action} {ops})"
    if len(filters) == 1:
        return f"({action} {ops} {filters[0]})"
    return f"({action} {ops}\n  " + "\n  ".join(filters) + ")"


def _filter(path_expr: str, subtree: bool) -> str:
    return f"({'subpath' if subtree else 'literal'} {path_expr})"


def _subject(rule: PathRule, home_mode: str = "") -> str:
    written = rule.written or rule.path
    if rule.origin == "home":
        return f"home: {home_mode} ({rule.access} {written})" if home_mode else f"home: {rule.access} {written}"
    if rule.origin == "cache":
        return f"cache: {rule.access} {written}"
    return f"{rule.access} {written}"


def _without(plan: Plan, rule: PathRule) -> str:
    """The access ``rule.path`` would get if ``rule`` were dropped."""
    rest = tuple(r for r in plan.fs if r is not rule)
    return decide(_replace_fs(plan, rest), rule.path).access


def _replace_fs(plan: Plan, fs) -> Plan:
    from dataclasses import replace

    return replace(plan, fs=fs)


def _grants_no_more(weaker: str, access: str) -> bool:
    """Every operation ``weaker`` allows, ``access`` allows too."""
    w, a = Decision(weaker, None, ""), Decision(access, None, "")
    return all(a.allows(op) for op in OPS if w.allows(op))


def _parent_lists(plan: Plan, path: str) -> bool:
    if path == "/":
        return False
    parent = path.rsplit("/", 1)[0] or "/"
    return decide(plan, parent).allows("list")


def _rule_statements(rule: PathRule, expr: str) -> list[str]:
    """SBPL statements that decide every emitted operation for ``rule``'s subtree."""
    # Always a subtree, files too: the decision model gives a rule everything beneath its
    # path, and a file replaced by a folder during the run must not escape the rule.
    flt = [_filter(expr, True)]
    if rule.access == WRITE:
        return [_rule("allow", OPS_READ + OPS_WRITE + OPS_CONNECT, flt)]
    if rule.access == READ:
        return [_rule("allow", OPS_READ + OPS_CONNECT, flt), _rule("deny", OPS_WRITE, flt)]
    # mask, and tmpfs narrowed to "nothing of the host here" (see _tmpfs_verdict)
    return [_rule("deny", OPS_READ + OPS_WRITE + OPS_CONNECT, flt)]


def _ancestors(path: str) -> list[str]:
    out = ["/"]
    parts = [p for p in path.split("/") if p]
    for i in range(1, len(parts)):
        out.append("/" + "/".join(parts[:i]))
    return out if path != "/" else []


def _ports(lo: int, hi: int) -> Optional[list[str]]:
    if lo <= 1 and hi >= 65535:
        return ["*"]
    if hi - lo + 1 > MAX_PORTS_PER_RULE:
        return None
    return [str(p) for p in range(lo, hi + 1)]


def lower(plan: Plan, host) -> Lowered:
    # The IR promises (depth, path) order; the profile's meaning depends on it, so make
    # sure rather than trust it.
    plan = _replace_fs(plan, tuple(sorted(plan.fs, key=fs_sort_key)))
    params = _Params()
    verdicts: list[Verdict] = []
    refuse: list[str] = []
    out: list[str] = [
        "(version 1)",
        "(deny default)",
        "",
        "; Process basics. None of these names a file; the policy's rules below decide files.",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow ipc-posix-sem)",
        _rule("allow", ("mach-lookup",), [f"(global-name {sbpl_string(n)})" for n in MACH_BASE]),
        _rule("allow", ("file-ioctl",), ['(literal "/dev/tty")', f'(regex #{sbpl_string(TTY_IOCTL_REGEX)})']),
    ]

    # Which policy rules can be written, and how.
    exprs: dict[int, str] = {}
    for i, rule in enumerate(plan.fs):
        if rule.origin == "cache" and rule.access == WRITE and rule.path == plan.cache.dir:
            # The runtime may swap in a fresh throwaway folder when the cache folder fails
            # its checks (SPEC §6); a parameter lets the same profile grant whichever folder
            # it chose. The folder is either this very path or new and empty, so keeping
            # this rule's place in the order still lets deeper rules override it.
            problem = path_problem(rule.path)
            if not problem:
                exprs[i] = f'(param {sbpl_string(params.runtime(PARAM_CACHE, "cache", rule.path))})'
                continue
        try:
            exprs[i] = _path_expr(rule.path, params)
        except Unrepresentable as e:
            weaker = _without(plan, rule)
            if _grants_no_more(weaker, rule.access):
                verdicts.append(verdict(BACKEND, _subject(rule, plan.home_mode), NARROWED, rule.span,
                                        f"{e}; left out, so the path gets {weaker if weaker != NONE else 'no access'} instead"))
            else:
                why = f"{e}, and leaving the rule out would give the path {weaker} access"
                verdicts.append(verdict(BACKEND, _subject(rule, plan.home_mode), NOT_ENFORCEABLE, rule.span, why))
                refuse.append(f"{_subject(rule, plan.home_mode)}: {why}")

    # Metadata of the folders above each granted path: realpath(), getcwd() and dyld stat
    # every component. Emitted before the policy rules so that a mask still wins.
    granted = [r.path for i, r in enumerate(plan.fs) if i in exprs and r.access in (READ, WRITE)]
    anc = sorted({a for p in granted for a in _ancestors(p)} | {"/", "/dev"})
    anc_exprs = []
    for a in anc:
        try:
            anc_exprs.append(_filter(_path_expr(a, params), False))
        except Unrepresentable:
            pass  # only costs the command a failing stat()
    out += ["", "; Folders above granted paths: metadata only (no listing, no content).",
            _rule("allow", ("file-read-metadata",), anc_exprs)]

    # System libraries the policy leaves uncovered.
    system = [p for p in SYSTEM_READ if decide(plan, p).access == NONE]
    if system:
        out += ["", "; System libraries every macOS process loads; the policy does not cover them.",
                _rule("allow", OPS_READ, [_filter(sbpl_string(p), True) for p in system])]
        verdicts.append(verdict(BACKEND, "macOS start-up", PARTIAL, BUILTIN_SPAN,
                                "the command can also read " + ", ".join(system)
                                + " (system libraries every macOS process needs to start)"))

    out += ["", "; Network."] + _network(plan, verdicts, params)

    guarded = _protected_ancestors(plan, exprs)
    protect = {a for ancestors in guarded.values() for a in ancestors}
    granted_paths = sorted(r.path for r in plan.fs if r.access in (READ, WRITE))
    out += ["", "; The policy's filesystem rules, parents before children: the last matching",
            "; rule is the deepest one containing the path, and each rule decides every operation."]
    for i, rule in enumerate(plan.fs):
        if i not in exprs:
            continue
        out.append(f"; {rule.origin} rule {i}: {rule.access}")
        out += _rule_statements(rule, exprs[i])
        verdicts.append(_rule_verdict(plan, rule, guarded.get(i, []), _paths_below(granted_paths, rule.path)))

    # A folder above a granted path that a mask (or tmpfs) covers: the mask's deny came
    # after the metadata grant above and took it back, so realpath() and friends would
    # fail on the way to the granted path (bwrap shows such a folder as an empty mount
    # point). Give back its metadata only: no listing, no content.
    hidden_anc = [a for a in anc if decide(plan, a).access in (MASK, TMPFS)]
    if hidden_anc:
        exprs_h = []
        for a in hidden_anc:
            try:
                exprs_h.append(_filter(_path_expr(a, params), False))
            except Unrepresentable:
                pass
        out += ["", "; Masked folders with granted paths beneath: metadata only, so paths resolve."]
        if exprs_h:
            out.append(_rule("allow", ("file-read-metadata",), exprs_h))

    if protect:
        prot = []
        for a in sorted(protect):
            try:
                prot.append(_filter(_path_expr(a, params), False))
            except Unrepresentable:
                refuse.append(f"{a}: a writable folder above a denying rule cannot be written into the profile")
        out += ["", "; Writable folders above a denying rule: no rename or delete (see docs/macos.md)."]
        if prot:
            out.append(_rule("deny", ("file-write-unlink",), prot))

    if any(r.access == TMPFS for r in plan.fs):
        name = params.runtime(PARAM_RUN_TMP, "run-tmp", "")
        out += ["", "; The private per-run folder standing in for tmpfs (made empty by the runner,",
                "; deleted after the run; TMPDIR points at it).",
                _rule("allow", OPS_READ + OPS_WRITE, [f'(subpath (param {sbpl_string(name)}))'])]

    no_dns = plan.network.mode != NET_ON
    if no_dns:
        # mDNSResponder resolves names over the network on the command's behalf: with the
        # network off (or limited to ports) a `read /` must not make its socket a way out.
        out += ["", "; Name resolution goes to the network through mDNSResponder: not with the network off.",
                _rule("deny", ("network-outbound",), [f"(literal {sbpl_string(MDNS_SOCKET)})"])]

    dev = []
    for path, subtree, writable in DEVICES:
        if decide(plan, path).access in (MASK, TMPFS):
            continue
        ops = ("file-read*",) + (("file-write-data",) if writable else ())
        dev.append(_rule("allow", ops, [_filter(sbpl_string(path), subtree)]))
    if dev:
        out += ["", "; Device nodes every program expects, unless the policy masks them."] + dev

    for s in plan.skipped:
        verdicts.append(verdict(BACKEND, f"{s.access}? {s.path}", SKIPPED, s.span, s.reason))

    if plan.syscalls.deny:
        verdicts.append(verdict(
            BACKEND, "syscalls.deny", PARTIAL, BUILTIN_SPAN,
            "Seatbelt has no system-call filter, so the list is not applied; the calls in it are "
            "Linux calls, and (deny default) already refuses debugging other processes"))

    data = {
        "profile": "\n".join(out) + "\n",
        "params": params.entries,
        "refuse": refuse,
        # Granted whatever the policy says; the evaluator test treats these as declared.
        "baseline": {
            "read": system,
            "devices": [[p, s, w] for p, s, w in DEVICES if decide(plan, p).access not in (MASK, TMPFS)],
            "metadata": anc,
            # Network on includes name lookups, whatever the file rules say of the socket.
            "connect": [MDNS_SOCKET] if not no_dns else [],
        },
        # Unix sockets whose connect is denied although the policy's rules allow it.
        "deny_connect": [MDNS_SOCKET] if no_dns else [],
        # Folders whose rename/delete is denied although the policy makes them writable.
        "protect": sorted(protect),
    }
    return Lowered(BACKEND, data, tuple(verdicts))


def _protected_ancestors(plan: Plan, exprs: dict) -> dict[int, list[str]]:
    """For each rule that denies something (by index in ``plan.fs``), the writable folders
    above it, sorted.

    Seatbelt matches paths at access time. If the command could rename a writable folder
    above a mask (``mv proj/sub proj/sub2``), the masked file would move to a path the
    mask no longer names; a read-only folder under a writable one would become writable
    the same way. Denying unlink (which rename needs on its source) of those folders
    closes that; creating, changing and deleting files inside them stays allowed.
    """
    found: dict[int, list[str]] = {}
    for i, rule in enumerate(plan.fs):
        if i not in exprs or rule.access == WRITE:
            continue
        writable = [a for a in _ancestors(rule.path)[1:] if decide(plan, a).allows("delete")]
        if writable:
            found[i] = sorted(writable)
    return found


def _paths_below(sorted_paths: list[str], path: str) -> list[str]:
    """The paths strictly beneath ``path`` (``is_within`` and not ``path``), in order.

    A scan of every rule for every rule made lowering quadratic in the policy's size;
    the paths starting with a prefix are one contiguous run of the sorted list instead.
    """
    lo, hi = below_range(sorted_paths, path)
    return sorted_paths[lo:hi]


def _rule_verdict(plan: Plan, rule: PathRule, guarded: list[str], beneath: list[str]) -> Verdict:
    """``guarded``: the writable folders above ``rule`` that cannot be renamed;
    ``beneath``: the granted (read or write) paths under it, sorted."""
    notes = []
    status = ENFORCED
    if rule.access == TMPFS:
        status = NARROWED
        notes.append(_TMPFS_WHY)
    if guarded:
        status = NARROWED if status == ENFORCED else status
        notes.append("the writable folders above it (" + ", ".join(guarded) + ") cannot be renamed or "
                     "deleted, since a rename would move it away from the path Seatbelt checks")
    if rule.access in (MASK, TMPFS) and beneath:
        status = PARTIAL
        notes.append("its metadata (not its listing) stays visible, since " + beneath[0]
                     + (" and other paths" if len(beneath) > 1 else "") + " beneath it is granted")
    if rule.access == MASK and rule.kind != KIND_MISSING and _parent_lists(plan, rule.path):
        # partial outranks narrowed: it says what the command can still learn.
        status = PARTIAL
        notes.insert(0, "every access is denied, but the name (and whether it is a file or a folder) "
                        "stays visible in a listing of the parent folder")
    return verdict(BACKEND, _subject(rule, plan.home_mode), status, rule.span, "; ".join(notes))


_TMPFS_WHY = ("Seatbelt cannot mount a private folder: the path is denied (nothing of the host "
              "shows, nothing is written there) and the command gets an empty per-run folder "
              "in TMPDIR instead, deleted after the run")


PARAM_PROXY = "SBXC_PROXY"
"""The proxy's ``localhost:PORT``, known once it listens (runtime/sbpl_run)."""


def _network(plan: Plan, verdicts: list, params: "_Params | None" = None) -> list[str]:
    net = plan.network
    if net.mode == NET_ON:
        verdicts.append(verdict(BACKEND, "network: true", ENFORCED, net.span))
        return [
            "(allow network-outbound (remote ip))",
            "(allow network-inbound (local ip))",
            "(allow network-bind (local ip))",
            "(allow system-socket)",
            # Name resolution goes through mDNSResponder's Unix socket; masks below still win.
            _rule("allow", ("network-outbound",), [f"(literal {sbpl_string(MDNS_SOCKET)})"]),
            _rule("allow", ("mach-lookup",), [f"(global-name {sbpl_string(n)})" for n in MACH_NET]),
        ]
    if net.mode == NET_OFF:
        # The mDNSResponder socket is denied after the filesystem rules (see lower).
        verdicts.append(verdict(BACKEND, "network: false", NARROWED, net.span,
                                "every IP socket operation is refused, so loopback inside the command is "
                                "unavailable too (Seatbelt cannot tell the command's own loopback from the "
                                "host's); name lookups through mDNSResponder's socket are refused as well"))
        return ["; Off: (deny default) refuses every IP socket operation; Unix-socket connects",
                "; follow the filesystem rules below."]
    lines = []
    if net.hosts and params is not None:
        from .bwrap import host_status, host_subject

        name = params.runtime(PARAM_PROXY, "proxy", "")
        lines += ["; Host rules: the proxy's local port only; it connects where the rules allow.",
                  _rule("allow", ("network-outbound",), [f"(remote tcp (param {sbpl_string(name)}))"])]
        for h in net.hosts:
            status, why = host_status(h, "through sbxc's proxy")
            verdicts.append(verdict(BACKEND, host_subject(h), status, h.span, why))
        verdicts.append(verdict(BACKEND, "network: host rules", PARTIAL, net.span,
                                "TCP connect is allowed to the proxy's port on localhost only; Seatbelt's "
                                "localhost filter covers every loopback address, so a local service on that "
                                "port number would be reachable too; name lookups (mDNSResponder) and UDP are "
                                "refused: names are resolved by the proxy"))
    for r in net.rules:
        subject = f"{r.op} {r.proto} {r.port_lo}" + (f"-{r.port_hi}" if r.port_hi != r.port_lo else "")
        ports = _ports(r.port_lo, r.port_hi)
        if ports is None:
            verdicts.append(verdict(BACKEND, subject, NARROWED, r.span,
                                    f"SBPL names one port per filter and the range is wider than "
                                    f"{MAX_PORTS_PER_RULE} ports; the rule is left out (no access)"))
            continue
        if r.op == "connect":
            lines.append(_rule("allow", ("network-outbound",),
                               [f'(remote tcp "*:{p}")' for p in ports]))
        else:
            lines.append(_rule("allow", ("network-bind", "network-inbound"),
                               [f'(local tcp "*:{p}")' for p in ports]))
        verdicts.append(verdict(BACKEND, subject, ENFORCED, r.span))
    if net.rules and not net.hosts:
        verdicts.append(verdict(BACKEND, "network: rules", NARROWED, net.span,
                                "name lookups (mDNSResponder) are not allowed, so connect by address; "
                                "UDP is refused"))
    return lines
