"""The one IR: a policy after loading, merging, variable expansion and path resolution.

Everything after ``normalize`` works on these types only; nothing here knows about YAML
or Lark. All containers are tuples in canonical order, so equal policies give equal plans
and ``to_dict`` gives the same bytes every time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Path access kinds, ordered from most to least restrictive on the same path (SPEC §2:
# mask > read > write). ``tmpfs`` sits between mask and read: it shows none of the
# host's content and writes nothing back to the host, so it exposes less than ``read``.
MASK = "mask"
TMPFS = "tmpfs"
READ = "read"
WRITE = "write"
NONE = "none"  # no rule covers the path: it is not there for the command

STRICTNESS = {MASK: 0, TMPFS: 1, READ: 2, WRITE: 3}

# What a path was on the host when the plan was compiled.
KIND_DIR = "dir"
KIND_FILE = "file"
KIND_SOCKET = "socket"
KIND_OTHER = "other"  # device, fifo
KIND_MISSING = "missing"  # a mask of a missing path, or the cache folder made at run time


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """Where something was written: 1-based line and column, end exclusive."""

    file: str
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


BUILTIN_SPAN = Span("<builtin>", 0, 0)


@dataclass(frozen=True, slots=True)
class PathRule:
    """One filesystem rule after expansion and resolution."""

    path: str
    """Absolute real path, no trailing slash (except ``/`` itself), symlinks resolved."""
    access: str
    """One of ``mask``, ``tmpfs``, ``read``, ``write``."""
    kind: str
    """What ``path`` was on the host at compile time (``dir``, ``file``, ``socket`` …)."""
    span: Span
    """The rule this entry came from."""
    written: str = ""
    """The path as the policy wrote it, before expansion (for reports)."""
    origin: str = "filesystem"
    """``filesystem`` for a policy rule; ``home``, ``cache`` for rules implied by those keys."""


@dataclass(frozen=True, slots=True)
class SkippedRule:
    """An optional (``verb?``) rule whose path is missing on this host."""

    path: str
    access: str
    span: Span
    reason: str


@dataclass(frozen=True, slots=True)
class NetRule:
    """``connect tcp PORT[-PORT]`` or ``bind tcp PORT[-PORT]``."""

    op: str  # "connect" | "bind"
    proto: str  # "tcp"
    port_lo: int
    port_hi: int
    span: Span


@dataclass(frozen=True, slots=True)
class HostRule:
    """``allow HOST[:PORT]``, one per host after groups are expanded: enforced by the proxy."""

    host: str
    """In the proxy's reading: a lower-case ASCII name, ``*.parent`` (exactly one label more),
    or an address (IPv6 in brackets)."""
    ports: tuple[int, ...]
    """Sorted; ``(80, 443)`` when the rule named none."""
    span: Span
    """The rule it came from (for a group, the ``allow @GROUP`` rule)."""
    text: str
    """The rule as written, e.g. ``allow example.org`` or ``allow @python``."""
    group: str = ""
    """The group's name when the host came from ``allow @GROUP``."""
    source: str = ""
    """Where a group's host was read from (a configuration file, a variable, a default)."""
    unusable: str = ""
    """Why the proxy refuses every connection this rule would allow (SBX048), or empty.
    Backends report such a rule narrowed, never enforced."""


DEFAULT_HOST_PORTS = (80, 443)

NET_ON = "on"
NET_OFF = "off"
NET_RULES = "rules"
NET_HOSTS = "hosts"


@dataclass(frozen=True, slots=True)
class Network:
    mode: str
    """``on``, ``off``, ``rules`` (only the listed TCP ports) or ``hosts`` (host rules through
    the proxy, with the listed TCP ports where the backend can allow them)."""
    rules: tuple[NetRule, ...] = ()
    span: Span = BUILTIN_SPAN
    """Where the winning setting came from (a file, or ``<command line>``)."""
    hosts: tuple[HostRule, ...] = ()
    """Sorted by (host, ports); what the proxy admits."""
    inputs: tuple[tuple[str, str], ...] = ()
    """What host groups were read from: (absolute file path, sha256 or "" when missing), or
    (``$NAME``, the variable's value); a plan is stale when one changes."""


@dataclass(frozen=True, slots=True)
class CachePlan:
    enabled: bool
    root: str
    """The cache root, e.g. ``/var/tmp/sbxc-1000``."""
    dir: str
    """This project's cache folder: ``{root}/{project-id}``."""
    tools: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    """Variables set inside the sandbox, each pointing into ``dir``."""
    required: bool = False
    """Refuse to run (125) instead of falling back to a throwaway cache."""
    span: Span = BUILTIN_SPAN


@dataclass(frozen=True, slots=True)
class EnvPlan:
    passed: tuple[str, ...]
    """Host variable names or globs (``*``, ``?``) let through."""
    set: tuple[tuple[str, str], ...]
    """Variables set inside, after ``passed`` (they win)."""
    span: Span = BUILTIN_SPAN
    """Where ``env`` was set (the report's place for the environment's verdict)."""


@dataclass(frozen=True, slots=True)
class SyscallPlan:
    deny: tuple[str, ...]
    """Sorted syscall names refused with EPERM (builtin list plus the policy's)."""
    allow_unix_sockets: bool = False
    """Landlock only: allow new AF_UNIX sockets (reaching masked socket files stays possible)."""
    span: Span = BUILTIN_SPAN
    """Where ``syscalls.deny`` was set (the report's place for the syscalls' verdict)."""


@dataclass(frozen=True, slots=True)
class LandlockPlan:
    min_abi: int = 1
    best_effort: bool = False
    span: Span = BUILTIN_SPAN
    """Where ``landlock.min_abi`` (else ``landlock.best_effort``) was set."""


@dataclass(frozen=True, slots=True)
class Plan:
    project: str
    """Real path of the project root."""
    home: str
    home_mode: str
    """``read-only``, ``hidden`` or ``writable``."""
    uid: int
    backend: str
    """Requested backend: ``auto``, ``bwrap``, ``landlock`` or ``sandbox-exec``."""
    fs: tuple[PathRule, ...]
    """Sorted by (depth, path): parents before children; one entry per path."""
    skipped: tuple[SkippedRule, ...]
    network: Network
    env: EnvPlan
    cache: CachePlan
    syscalls: SyscallPlan
    landlock: LandlockPlan
    sources: tuple[tuple[str, str], ...] = ()
    """(path, sha256) of every policy file that went into the plan."""
    links: tuple[tuple[str, str, Span], ...] = ()
    """(link, target as written, the first rule that met it) for every symlink met on the way to a ``read``, ``write``
    or ``tmpfs`` rule's path as the policy spelled it, sorted: a backend that builds the
    sandbox from mounts makes them, so that the spelling leads to the mounted real path."""
    workspace: tuple[tuple[str, object], ...] = ()
    """Per-session workspace settings, as (name, value): ``max_sessions`` and ``max_bytes``
    (only when a policy sets them), ``pool`` (ready copies), ``stage`` (((source, dest), ...)
    with source an absolute host path and dest relative to the workspace), and ``span`` (where
    the policy sets the first of them; absent when it sets none)."""


def path_depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def fs_sort_key(rule: PathRule) -> tuple[int, str]:
    return (path_depth(rule.path), rule.path)


def is_within(path: str, parent: str) -> bool:
    """True when ``path`` is ``parent`` or lies beneath it (``/a/b`` is not within ``/a/bc``)."""
    if parent == "/":
        return path.startswith("/")
    return path == parent or path.startswith(parent + "/")


def parent_rule(by_path: dict, path: str):
    """The deepest rule strictly containing ``path`` in ``by_path`` ({path: rule}; None
    when none does): walk up the path's folders (O(depth)), not over every rule (a policy
    may hold thousands)."""
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        rule = by_path.get(path)
        if rule is not None:
            return rule
    return None


def stricter(a: str, b: str) -> str:
    return a if STRICTNESS[a] <= STRICTNESS[b] else b


def below_range(sorted_paths: list[str], path: str) -> tuple[int, int]:
    """The slice ``[lo:hi]`` of ``sorted_paths`` strictly beneath ``path`` (``path`` excluded).

    Paths starting with a given prefix are one contiguous run of a sorted list, so backends
    asking "what lies beneath this folder?" for every rule stay near-linear in the policy's
    size instead of scanning every rule each time.
    """
    from bisect import bisect_left, bisect_right

    prefix = "/" if path == "/" else path + "/"  # as is_within reads its parent
    # For "/" the prefix is the path itself: start after it.
    lo = bisect_right(sorted_paths, prefix) if path == "/" else bisect_left(sorted_paths, prefix)
    # "0" follows "/": every path starting with prefix sorts before prefix[:-1] + "0",
    # and no other path sorts between the two.
    hi = bisect_left(sorted_paths, prefix[:-1] + "0", lo)
    return lo, hi
