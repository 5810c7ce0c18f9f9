"""The policy file's schema, and the checks that turn a YAML tree into typed values.

``SCHEMA`` is the single description of every key: ``check_document`` validates against
it and ``json_schema`` exports it for editors, so the two cannot drift apart. Checking
collects every problem of a file into diagnostics and never raises for a user's mistake.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .diagnostics import Diagnostic, diag, suggest
from .plan import Span
from .rules import FS_VERBS, parse_fs_rule, parse_net_rule
from .yamltree import YMap, YNode, YScalar, YSeq, type_name

BACKEND_CHOICES = ("auto", "bwrap", "landlock", "sandbox-exec")
HOME_CHOICES = ("read-only", "hidden", "writable")
FORMAT_VERSION = 1


def _cache_tools() -> tuple[str, ...]:
    from .. import cache

    return tuple(cache.TOOLS)


@dataclass(frozen=True)
class Field:
    kind: str
    """int, bool, str, enum, list, map, strmap, fsrule, netrule, network, syscall, envname."""
    doc: str = ""
    choices: tuple = ()
    item: Optional["Field"] = None
    fields: Optional[dict] = None
    lo: Optional[int] = None
    hi: Optional[int] = None
    required: bool = False


LOCKABLE = ("project", "backend", "home", "filesystem", "network", "cache", "env", "landlock", "syscalls", "workspace")


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Field]:
    return {
        "sbxc": Field("int", "Policy format version; must be 1.", lo=1, hi=1, required=True),
        "extends": Field("list", "Policies this one builds on, applied in order: builtin:NAME or a path relative to this file.",
                         item=Field("str")),
        "project": Field("str", "Project root, relative to this file (default: the file's folder)."),
        "backend": Field("enum", "Sandbox backend.", choices=BACKEND_CHOICES),
        "home": Field("enum", "The home folder inside the sandbox.", choices=HOME_CHOICES),
        "filesystem": Field("list", "Filesystem rules: VERB[?] PATH..., VERB one of read, write, tmpfs, mask.",
                            item=Field("fsrule")),
        "network": Field("network", "true (default), false, or a list of `connect tcp PORT` / `bind tcp PORT[-PORT]` rules.",
                         item=Field("netrule")),
        "cache": Field("map", "Per-project dependency caches.", fields={
            "tools": Field("list", "Tools whose caches point into the project's cache folder (default: all).",
                           item=Field("enum", choices=_cache_tools())),
            "root": Field("str", "Cache root; must lie outside the home folder (default /var/tmp/sbxc-{uid})."),
            "required": Field("bool", "Refuse to run instead of falling back to a throwaway cache."),
        }),
        "env": Field("map", "Environment inside the sandbox.", fields={
            "pass": Field("list", "Host variables let through; globs * and ? allowed.", item=Field("envglob")),
            "set": Field("strmap", "Variables set inside the sandbox (they win over pass)."),
        }),
        "landlock": Field("map", "Landlock settings.", fields={
            "min_abi": Field("int", "Refuse to run on a kernel with a lower Landlock ABI.", lo=1, hi=64),
            "best_effort": Field("bool", "Run with what the kernel has, and say what was dropped."),
        }),
        "syscalls": Field("map", "System call filter.", fields={
            "deny": Field("list", "Syscalls refused with EPERM, added to the builtin list.", item=Field("syscall")),
            "allow_unix_sockets": Field("bool", "Landlock backend: allow creating Unix sockets (default false)."),
        }),
        "locked": Field("list", "Keys a policy extending this one may only tighten.", item=Field("enum", choices=LOCKABLE)),
        "workspace": Field("map", "Session workspace quotas.", fields={
            "max_sessions": Field("int", "Most sessions at once.", lo=1, hi=1 << 20),
            "max_bytes": Field("int", "Most bytes one session's workspace may hold.", lo=1, hi=1 << 62),
        }),
    }


@dataclass(frozen=True, slots=True)
class Located:
    value: Any
    span: Span
    key_span: Optional[Span] = None


@dataclass(slots=True)
class PolicyDoc:
    """One policy file's checked content: top-level key -> typed value (see ``_check``)."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    key_spans: dict[str, Span] = field(default_factory=dict)


# ---------------------------------------------------------------- syscalls

@functools.lru_cache(maxsize=1)
def known_syscalls() -> frozenset[str]:
    """Names libseccomp knows for this machine's architecture (for "did you mean")."""
    import pyseccomp

    names = set()
    for nr in range(0, 1024):
        try:
            name = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, nr)
        except ValueError:
            continue
        names.add(name.decode() if isinstance(name, bytes) else name)
    return frozenset(names)


def syscall_known(name: str) -> bool:
    import pyseccomp

    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", name):
        return False
    # -1 is libseccomp's "unknown"; other negative numbers are its pseudo-syscalls, names
    # that exist on another architecture, which the filter compiler handles per arch.
    return name in known_syscalls() or pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) != -1


# ---------------------------------------------------------------- checking

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_GLOB = re.compile(r"[A-Za-z0-9_*?]+")


def _describe(f: Field) -> str:
    return {
        "int": "an integer", "bool": "true or false", "str": "a string", "enum": "one of " + ", ".join(f.choices),
        "list": "a list", "map": "a mapping", "strmap": "a mapping of names to strings",
        "fsrule": "a rule string", "netrule": "a rule string", "network": "true, false or a list of rules",
        "syscall": "a syscall name", "envglob": "a variable name or glob",
    }.get(f.kind, f.kind)


def _check(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    """Typed value for ``node`` per ``f``, or None after appending a diagnostic."""
    k = f.kind
    if k in ("list", "network"):
        if k == "network" and isinstance(node, YScalar) and isinstance(node.value, bool):
            return Located(node.value, node.span)
        if not isinstance(node, YSeq):
            diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
            return None
        items = []
        for i, item in enumerate(node.items):
            v = _check(item, f.item, f"{key}[{i}]", diags)
            if v is not None:
                items.append(v)
        return Located(items, node.span)
    if k in ("map", "strmap"):
        if not isinstance(node, YMap):
            diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
            return None
        out = {}
        for kn, vn in node.items:
            name = kn.value
            if k == "strmap":
                if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                    diags.append(diag("SBX020", kn.span, what="name", name=str(name)))
                    continue
                if not isinstance(vn, YScalar) or isinstance(vn.value, bool) or vn.value is None:
                    diags.append(diag("SBX011", vn.span, key=f"{key}.{name}", expected="a string", got=type_name(vn)))
                    continue
                text = str(vn.value) if not isinstance(vn.value, str) else vn.value
                if _BAD_CHARS.search(text):
                    diags.append(diag("SBX038", vn.span))
                    continue
                out[name] = Located(text, vn.span, kn.span)
                continue
            sub = f.fields.get(name) if isinstance(name, str) else None
            if sub is None:
                diags.append(diag("SBX010", kn.span, key=str(name), where=f" in {key}",
                                  suggest=suggest(str(name), f.fields)))
                continue
            v = _check(vn, sub, f"{key}.{name}", diags)
            if v is not None:
                out[name] = Located(v.value if isinstance(v, Located) else v, v.span if isinstance(v, Located) else vn.span, kn.span)
        return Located(out, node.span)
    # scalar kinds
    if not isinstance(node, YScalar):
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
        return None
    v = node.value
    if k == "bool":
        if not isinstance(v, bool):
            diags.append(diag("SBX011", node.span, key=key, expected="true or false", got=type_name(node)))
            return None
        return Located(v, node.span)
    if k == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            diags.append(diag("SBX011", node.span, key=key, expected="an integer", got=type_name(node)))
            return None
        if key == "sbxc":
            if v != FORMAT_VERSION:
                diags.append(diag("SBX017", node.span, value=v))
                return None
        elif (f.lo is not None and v < f.lo) or (f.hi is not None and v > f.hi):
            diags.append(diag("SBX019", node.span, key=key, value=v, range=f"{f.lo}-{f.hi}"))
            return None
        return Located(v, node.span)
    if not isinstance(v, str):
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
        return None
    # Escapes in quoted YAML can produce what the file itself may not hold: NUL, lone
    # surrogates. Neither can be a path or a name.
    if _BAD_CHARS.search(v):
        diags.append(diag("SBX038", node.span))
        return None
    if k == "str":
        return Located(v, node.span)
    if k == "enum":
        if v not in f.choices:
            diags.append(diag("SBX013", node.span, key=key, value=v, suggest=suggest(v, f.choices)))
            return None
        return Located(v, node.span)
    if k == "fsrule":
        return parse_fs_rule(node, diags)
    if k == "netrule":
        return parse_net_rule(node, diags)
    if k == "syscall":
        if not syscall_known(v):
            diags.append(diag("SBX015", node.span, name=v, suggest=suggest(v, known_syscalls()),
                              hint="names are checked against libseccomp's table for this machine"))
            return None
        return Located(v, node.span)
    if k == "envglob":
        if not _ENV_GLOB.fullmatch(v):
            diags.append(diag("SBX020", node.span, what="name or glob", name=v))
            return None
        return Located(v, node.span)
    raise AssertionError(f"schema kind {k}")


def check_document(path: str, tree: YMap, diags: list[Diagnostic]) -> PolicyDoc:
    doc = PolicyDoc(path)
    sch = schema()
    for kn, vn in tree.items:
        name = kn.value
        f = sch.get(name) if isinstance(name, str) else None
        if f is None:
            diags.append(diag("SBX010", kn.span, key=str(name), where="", suggest=suggest(str(name), sch)))
            continue
        doc.key_spans[name] = kn.span
        v = _check(vn, f, name, diags)
        if v is not None:
            doc.values[name] = v
    if "sbxc" not in doc.key_spans:
        diags.append(diag("SBX016", Span(path, 1, 1, 1, 2), key="sbxc", hint="add `sbxc: 1` as the first line"))
    return doc


# ---------------------------------------------------------------- JSON Schema

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
            d["pattern"] = r"^\s*(" + "|".join(FS_VERBS) + r")\??\s+\S"
        elif k == "netrule":
            d["type"] = "string"
            d["pattern"] = r"^\s*(connect|bind)\s+tcp\s+[0-9]{1,5}(-[0-9]{1,5})?\s*$"
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
