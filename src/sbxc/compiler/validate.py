"""The checks that turn one file's YAML tree into typed values, against the schema of settings.py.

Checking collects every problem of a file into diagnostics and never raises for a user's
mistake.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .diagnostics import Diagnostic, diag, suggest
from .plan import Span
from .rules import parse_fs_rule, parse_net_rule
from .settings import FORMAT_VERSION, Field, schema
from .yamltree import YMap, YNode, YScalar, YSeq, type_name


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
    if f.kind in ("list", "network"):
        return _check_list(node, f, key, diags)
    if f.kind in ("map", "strmap"):
        return _check_map(node, f, key, diags)
    return _check_scalar(node, f, key, diags)


def _check_list(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    if f.kind == "network" and isinstance(node, YScalar) and isinstance(node.value, bool):
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


def _check_map(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    if not isinstance(node, YMap):
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
        return None
    out = {}
    for kn, vn in node.items:
        name = kn.value
        if f.kind == "strmap":
            v = _check_env_value(kn, vn, key, diags)
            if v is not None:
                out[name] = v
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


def _check_env_value(kn: YScalar, vn: YNode, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    """One ``NAME: value`` of ``env.set``."""
    name = kn.value
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        diags.append(diag("SBX020", kn.span, what="name", name=str(name)))
        return None
    if not isinstance(vn, YScalar) or isinstance(vn.value, bool) or vn.value is None:
        diags.append(diag("SBX011", vn.span, key=f"{key}.{name}", expected="a string", got=type_name(vn)))
        return None
    text = str(vn.value) if not isinstance(vn.value, str) else vn.value
    if _BAD_CHARS.search(text):
        diags.append(diag("SBX038", vn.span))
        return None
    return Located(text, vn.span, kn.span)


def _check_scalar(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    k = f.kind
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
        return _check_int(node, f, key, diags)
    if k == "size":
        return _check_size(node, f, key, diags)
    if not isinstance(v, str):
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
        return None
    # Escapes in quoted YAML can produce what the file itself may not hold: NUL, lone
    # surrogates. Neither can be a path or a name.
    if _BAD_CHARS.search(v):
        diags.append(diag("SBX038", node.span))
        return None
    return _check_string(node, f, key, diags)


def _check_int(node: YScalar, f: Field, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    v = node.value
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


_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _check_size(node: YScalar, f: Field, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    """A byte count: an integer, or digits with one suffix K, M, G or T (powers of 1024;
    a trailing B or iB is allowed, ``2G``, ``2GB`` and ``2GiB`` are the same)."""
    v = node.value
    if isinstance(v, str):
        text = v.strip().upper()
        for tail in ("IB", "B"):
            if text.endswith(tail) and len(text) > len(tail) and text[-len(tail) - 1] in _SIZE_UNITS:
                text = text[:-len(tail)]
                break
        mult = _SIZE_UNITS.get(text[-1:], 0)
        digits = text[:-1] if mult else text
        if not digits.isdigit() or not digits.isascii():
            diags.append(diag("SBX011", node.span, key=key, expected="a size such as 500M or 2G", got=repr(v)))
            return None
        v = int(digits) * (mult or 1)
    elif isinstance(v, bool) or not isinstance(v, int):
        diags.append(diag("SBX011", node.span, key=key, expected="a size such as 500M or 2G", got=type_name(node)))
        return None
    if (f.lo is not None and v < f.lo) or (f.hi is not None and v > f.hi):
        diags.append(diag("SBX019", node.span, key=key, value=v, range=f"{f.lo}-{f.hi}"))
        return None
    return Located(v, node.span)


def _check_string(node: YScalar, f: Field, key: str, diags: list[Diagnostic]):
    k, v = f.kind, node.value
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
