"""Every key a policy file can hold, in one table, and the typed settings resolved from it.

``TABLE`` is the single description of each key: its type, default, description and
allowed values. The loader's schema (``schema``), the JSON Schema for editors
(``json_schema``), the defaults the compiler applies (``resolve`` in merge.py)
and print-config's default rows are all made from it, so they cannot drift apart.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Generic, Optional, TypeVar, Union

from .. import cache as cachemod
from ..layout import BACKEND_CHOICES  # noqa: F401 (the loader and its callers take it from here)
from .plan import Span
from .rules import FS_VERBS, FsRuleAst, NetRuleAst

HOME_CHOICES = ("read-only", "hidden", "writable")
FORMAT_VERSION = 1
LOCKABLE = ("project", "backend", "home", "filesystem", "network", "host_groups", "cache", "env", "landlock", "syscalls", "workspace")


@dataclass(frozen=True)
class Field:
    kind: str
    """int, bool, str, enum, list, map, strmap, groups, fsrule, netrule, network, syscall, envglob, size."""
    doc: str = ""
    choices: tuple = ()
    item: Optional["Field"] = None
    fields: Optional[dict] = None
    lo: Optional[int] = None
    hi: Optional[int] = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class Key:
    """One key of the policy file: a dotted name (``landlock.min_abi``) for keys in a section."""

    key: str
    field: Field
    default: object = None
    """What applies when no file sets it (None: nothing, e.g. no quota)."""
    shown: str = ""
    """How print-config shows the default when the value alone would not say it."""
    row: bool = True
    """print-config shows a row for it (``sbxc`` and ``extends`` are not settings; ``env.set``
    has one row per variable)."""


SECTIONS = {
    "cache": "Per-project dependency caches.",
    "env": "Environment inside the sandbox.",
    "landlock": "Landlock settings.",
    "syscalls": "System call filter.",
    "workspace": "Per-session workspaces: quotas, the warm pool, files staged into each.",
}
"""Keys that group others (``cache: {tools: ..., root: ...}``), with their descriptions."""

# In print-config's order; the schema groups the dotted keys under their sections.
TABLE: tuple[Key, ...] = (
    Key("sbxc", Field("int", "Policy format version; must be 1.", lo=1, hi=1, required=True), row=False),
    Key("extends", Field("list", "Policies this one builds on, applied in order: builtin:NAME or a path relative "
                                 "to this file.", item=Field("str")), (), row=False),
    Key("project", Field("str", "Project root, relative to this file (default: the file's folder)."),
        None, "the policy file's folder"),
    Key("backend", Field("enum", "Sandbox backend.", choices=BACKEND_CHOICES), "auto"),
    Key("home", Field("enum", "The home folder inside the sandbox.", choices=HOME_CHOICES), "read-only"),
    Key("network", Field("network", "true (default), false, or a list of rules: `allow HOST[:PORT]`, "
                                    "`allow *.DOMAIN`, `allow @GROUP`, `connect tcp PORT`, "
                                    "`bind tcp PORT[-PORT]`.", item=Field("netrule")), True),
    Key("host_groups", Field("groups", "Named host groups for `allow @NAME`: NAME: [HOST[:PORT] or "
                                       "`from TOOL` (pip, npm, cargo, go: the registries that tool is "
                                       "configured to use here)].", item=Field("str")), (), row=False),
    Key("cache.tools", Field("list", "Tools whose caches point into the project's cache folder (default: all).",
                             item=Field("enum", choices=tuple(cachemod.TOOLS))), cachemod.DEFAULT_TOOLS, "all"),
    Key("cache.root", Field("str", "Cache root; must lie outside the home folder (default /var/tmp/sbxc-{uid})."),
        cachemod.ROOT_TEMPLATE),
    Key("cache.required", Field("bool", "Refuse to run instead of falling back to a throwaway cache."), False),
    Key("env.pass", Field("list", "Host variables let through; globs * and ? allowed.", item=Field("envglob")), ()),
    Key("env.set", Field("strmap", "Variables set inside the sandbox (they win over pass)."), (), row=False),
    Key("landlock.min_abi", Field("int", "Refuse to run on a kernel with a lower Landlock ABI.", lo=1, hi=64), 1),
    Key("landlock.best_effort", Field("bool", "Run with what the kernel has, and say what was dropped."), False),
    Key("syscalls.deny", Field("list", "Syscalls refused with EPERM, added to the builtin list.",
                               item=Field("syscall")), (), "the builtin list"),
    Key("syscalls.allow_unix_sockets", Field("bool", "Landlock backend: allow creating Unix sockets (default false)."),
        False),
    Key("filesystem", Field("list", "Filesystem rules: VERB[?] PATH..., VERB one of read, write, tmpfs, mask.",
                            item=Field("fsrule")), ()),
    Key("locked", Field("list", "Keys a policy extending this one may only tighten.",
                        item=Field("enum", choices=LOCKABLE)), ()),
    Key("workspace.max_bytes", Field("size", "Most bytes one session's workspace may hold: a number of bytes, or "
                                             "digits and K, M, G or T (powers of 1024), e.g. 2G.", lo=1, hi=1 << 62)),
    Key("workspace.max_sessions", Field("int", "Most sessions of this project at once.", lo=1, hi=1 << 20)),
    Key("workspace.pool", Field("int", "Ready copies of the project kept for `sbxc session start` (0: none).",
                                lo=0, hi=16), 1),
    Key("workspace.stage", Field("list", "Files or folders copied into every new session's workspace: "
                                         "SRC:DEST, SRC an absolute host path, DEST relative to the workspace.",
                                 item=Field("str")), ()),
)

KEYS = {k.key: k for k in TABLE}

# The rule grammar (grammar/policy.lark) as regular expressions for the JSON Schema, so an
# editor flags what the loader would: words apart by blanks, a path bare or double-quoted.
_PATH = r"""([^\s"]+|"(\\.|[^"\\])*")"""
FS_RULE_PATTERN = r"^[ \t]*(" + "|".join(FS_VERBS) + r")\??([ \t]+" + _PATH + r")+[ \t]*$"
# 1-65535, leading zeros allowed up to five digits, as the loader reads a port.
_PORT = (r"(0{0,4}[1-9]|0{0,3}[1-9][0-9]|0{0,2}[1-9][0-9]{2}|0?[1-9][0-9]{3}|[1-5][0-9]{4}"
         r"|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])")
NET_RULE_PATTERN = (r"^[ \t]*((connect|bind)[ \t]+tcp[ \t]+" + _PORT + "(-" + _PORT + r")?"
                    r"|allow[ \t]+[^\s]+)[ \t]*$")
SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SIZE_PATTERN = r"^[1-9][0-9]{0,5}[KMGT]$"
"""Sizes as text: at most six digits, so even ``999999T`` stays below the 2**62 limit."""
SCHEMA_ORDER = ("sbxc", "extends", "project", "backend", "home", "filesystem", "network", "host_groups", "cache",
                "env",
                "landlock", "syscalls", "locked", "workspace")


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Field]:
    """Top-level key -> Field, sections as ``map`` Fields holding their keys (what the loader checks)."""
    out: dict[str, Field] = {}
    for name in SCHEMA_ORDER:
        if name in SECTIONS:
            subs = {k.key.split(".", 1)[1]: k.field for k in TABLE if k.key.startswith(name + ".")}
            out[name] = Field("map", SECTIONS[name], fields=subs)
        else:
            out[name] = KEYS[name].field
    return out


def json_schema() -> dict:
    def conv(f: Field) -> dict:
        d: dict = {}
        if f.doc:
            d["description"] = f.doc
        k = f.kind
        if k == "int":
            d["type"] = "integer"
            if f.lo is not None:
                d["minimum"] = f.lo
            if f.hi is not None:
                d["maximum"] = f.hi
        elif k == "bool":
            d["type"] = "boolean"
        elif k == "str":
            d["type"] = "string"
            d["minLength"] = 1
        elif k == "enum":
            d["enum"] = list(f.choices)
        elif k == "list":
            d["type"] = "array"
            d["items"] = conv(f.item)
        elif k == "map":
            d["type"] = "object"
            d["additionalProperties"] = False
            d["properties"] = {n: conv(sub) for n, sub in f.fields.items()}
        elif k == "strmap":
            d["type"] = "object"
            d["propertyNames"] = {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
            d["additionalProperties"] = {"type": "string"}
        elif k == "fsrule":
            d["type"] = "string"
            d["pattern"] = FS_RULE_PATTERN
        elif k == "netrule":
            d["type"] = "string"
            d["pattern"] = NET_RULE_PATTERN
        elif k == "size":
            d["oneOf"] = [{"type": "integer", "minimum": f.lo, "maximum": f.hi},
                          {"type": "string", "pattern": SIZE_PATTERN}]
        elif k == "groups":
            d["type"] = "object"
            d["propertyNames"] = {"pattern": "^[a-z][a-z0-9_-]{0,63}$"}
            d["additionalProperties"] = {"type": "array", "items": {"type": "string"}}
        elif k == "network":
            d["oneOf"] = [{"type": "boolean"}, {"type": "array", "items": conv(f.item)}]
        elif k == "syscall":
            d["type"] = "string"
            d["pattern"] = "^[a-z_][a-z0-9_]*$"
        elif k == "envglob":
            d["type"] = "string"
            d["pattern"] = "^[A-Za-z0-9_*?]+$"
        return d

    sch = schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://sbxc.invalid/schema/policy-1.json",
        "title": "sbxc sandbox policy (sandbox.policy.yaml)",
        "type": "object",
        "additionalProperties": False,
        "required": [n for n, f in sch.items() if f.required],
        "properties": {n: conv(f) for n, f in sch.items()},
    }


# ---------------------------------------------------------------- resolved settings (typed)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Value(Generic[T]):
    """One resolved setting: the winning value and where it was written."""

    value: T
    span: Optional[Span] = None
    """Where the winning value was written (a file or the command line); None for the default."""
    base_dir: str = ""
    """Folder of the file that wrote it (``project`` is relative to it)."""


@dataclass(frozen=True, slots=True)
class CacheSettings:
    tools: Value[tuple[str, ...]]
    root: Value[str]
    """As written: variables not yet expanded."""
    required: Value[bool]


@dataclass(frozen=True, slots=True)
class EnvSettings:
    passed: tuple[Value[str], ...]
    """Names and globs of ``env.pass``, each where it was written, in file order."""
    set: tuple[tuple[str, str], ...]
    """``env.set`` by name."""
    span: Optional[Span] = None
    """Where the winning ``env.pass`` was written (None: the default)."""


@dataclass(frozen=True, slots=True)
class LandlockSettings:
    min_abi: Value[int]
    best_effort: Value[bool]


@dataclass(frozen=True, slots=True)
class SyscallSettings:
    deny: tuple[str, ...]
    """Names the policies add to the builtin deny list."""
    allow_unix_sockets: Value[bool]
    span: Optional[Span] = None
    """Where the winning ``syscalls.deny`` was written (None: the default)."""


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    max_bytes: Value[Optional[int]]
    max_sessions: Value[Optional[int]]
    pool: Value[int]
    stage: tuple[Value[str], ...]


@dataclass(frozen=True, slots=True)
class Settings:
    """Every key of the merged policy files (and the command line), defaults filled in."""

    project: Value[Optional[str]]
    """None: the top policy file's folder."""
    backend: Value[str]
    home: Value[str]
    filesystem: tuple[FsRuleAst, ...]
    network: Value[Union[bool, tuple[NetRuleAst, ...]]]
    host_groups: tuple
    """(name, Value[list of group items]) for each group the files define, by name."""
    cache: CacheSettings
    env: EnvSettings
    landlock: LandlockSettings
    syscalls: SyscallSettings
    workspace: WorkspaceSettings
