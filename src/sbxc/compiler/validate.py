"""The checks that turn one file's YAML tree into typed values, against the schema of settings.py.

Checking collects every problem of a file into diagnostics and never raises for a user's
mistake.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .diagnostics import Diagnostic, diag, has_errors, suggest
from .plan import Span
from .rules import parse_fs_rule, parse_group_item, parse_net_rule
from .settings import FORMAT_VERSION, SIZE_PATTERN, SIZE_UNITS, Field, schema
from .yamltree import Unreadable, YMap, YNode, YScalar, YSeq, shorten, type_name


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
    from ..libseccomp import load

    pyseccomp = load()

    names = set()
    for nr in range(0, 1024):
        try:
            name = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, nr)
        except ValueError:
            continue
        names.add(name.decode() if isinstance(name, bytes) else name)
    return frozenset(names)


def syscall_known(name: str) -> bool:
    from ..libseccomp import load

    pyseccomp = load()

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
        "size": "a number of bytes or a size such as 2G",
    }.get(f.kind, f.kind)


def _check(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    """Typed value for ``node`` per ``f``, or None after appending a diagnostic."""
    if f.kind in ("list", "network"):
        return _check_list(node, f, key, diags)
    if f.kind == "groups":
        return _check_groups(node, key, diags)
    if f.kind in ("map", "strmap"):
        return _check_map(node, f, key, diags)
    return _check_scalar(node, f, key, diags)


def _check_list(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    if f.kind == "network" and isinstance(node, YScalar):
        return _check_bool(node, f, key, diags)
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


_GROUP_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def _check_groups(node: YNode, key: str, diags: list[Diagnostic]):
    """``host_groups``: NAME -> list of ``HOST[:PORT]`` / ``from TOOL`` items."""
    if not isinstance(node, YMap):
        diags.append(diag("SBX011", node.span, key=key, expected="a mapping of group names to lists of hosts",
                          got=type_name(node)))
        return None
    out = {}
    for kn, vn in node.items:
        name = kn.value
        if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
            diags.append(diag("SBX014", kn.span, what="host group name",
                              why=f"\"{shorten(str(name))}\" is not lower-case letters, digits, - and _"))
            continue
        if not isinstance(vn, YSeq):
            diags.append(diag("SBX011", vn.span, key=f"{key}.{name}", expected="a list of hosts", got=type_name(vn)))
            continue
        items = []
        for i, item in enumerate(vn.items):
            if not isinstance(item, YScalar) or not isinstance(item.value, str):
                diags.append(diag("SBX011", item.span, key=f"{key}.{name}[{i}]", expected="a string",
                                  got=type_name(item)))
                continue
            parsed = parse_group_item(item, diags)
            if parsed is not None:
                items.append(parsed)
        out[name] = Located(items, vn.span, kn.span)
    return Located(out, node.span)


def _check_env_value(kn: YScalar, vn: YNode, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    """One ``NAME: value`` of ``env.set``: the name and the value reach the command as written."""
    name = kn.value
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        diags.append(diag("SBX020", kn.span, what="name", name=kn.text or str(name)))
        return None
    if not _all_strings(kn):
        diags.append(_retyped_diag(kn, key, kn.readings(), "the name "))
        return None
    if not isinstance(vn, YScalar):
        diags.append(diag("SBX011", vn.span, key=f"{key}.{name}", expected="a string", got=type_name(vn)))
        return None
    if not _all_strings(vn):
        if vn.plain and vn.text:
            diags.append(_retyped_diag(vn, f"{key}.{name}", vn.readings()))
        else:
            diags.append(diag("SBX011", vn.span, key=f"{key}.{name}", expected="a string", got=type_name(vn)))
        return None
    if _BAD_CHARS.search(vn.value):
        diags.append(diag("SBX038", vn.span))
        return None
    return Located(vn.value, vn.span, kn.span)


# ---------------------------------------------------------------- what YAML made of a plain scalar

def _all_strings(node: YScalar) -> bool:
    return all(isinstance(r, str) for r in node.readings())


def _reading_text(v) -> str:
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, int):
        return f"an integer ({v})"
    if isinstance(v, float):
        return f"a number ({v})"
    if v is None:
        return "null (no value)"
    if isinstance(v, Unreadable):
        return f"a {v.tag.rsplit(':', 1)[-1]} (and cannot build it)"
    if isinstance(v, str):
        return "text"
    return f"a {type(v).__name__} ({v})"


def _how_read(readings: tuple) -> str:
    """``an integer (755 under YAML 1.2, 493 under YAML 1.1)`` and the like."""
    v12 = readings[0]
    v11 = readings[1] if len(readings) > 1 else v12
    t12, t11 = _reading_text(v12), _reading_text(v11)
    if isinstance(v12, str):
        return f"{t11} under YAML 1.1"
    if isinstance(v11, str):
        return f"{t12} under YAML 1.2"
    if t12 == t11:
        return t12
    k12, _, d12 = t12.partition(" (")
    k11, _, d11 = t11.partition(" (")
    if k12 == k11 and d12 and d11:
        return f"{k12} ({d12[:-1]} under YAML 1.2, {d11[:-1]} under YAML 1.1)"
    return f"{t12} under YAML 1.2 and {t11} under YAML 1.1"


def quoted(text: str) -> str:
    """``text`` as a double-quoted YAML scalar, which every YAML reader takes as that text."""
    return json.dumps(text, ensure_ascii=False)


def _retyped_diag(node: YScalar, key: str, readings: tuple, what: str = "") -> Diagnostic:
    return diag("SBX026", node.span, key=key, text=what + shorten(node.text), how=_how_read(readings),
                hint=f"quote it to keep it as written: {quoted(node.text)}")


def _valid_as(node: YScalar, f: Field, key: str) -> bool:
    """Would the scalar's text, quoted, be a valid value here? (Then quoting is the fix.)"""
    scratch: list[Diagnostic] = []
    as_text = YScalar(node.text, node.span, node.cols, node.col0, node.text, False)
    return _check_string(as_text, f, key, scratch) is not None and not has_errors(scratch)


def _check_scalar(node: YNode, f: Field, key: str, diags: list[Diagnostic]):
    k = f.kind
    if not isinstance(node, YScalar):
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
        return None
    if k == "bool":
        return _check_bool(node, f, key, diags)
    if k == "int" or (k == "size" and any(_whole(r) is not None or isinstance(r, float) for r in node.readings())):
        return _check_int(node, f, key, diags)
    # Every other kind is text. A plain scalar some YAML reader types (0755, 1.10, yes,
    # 2026-01-02, ~) would reach the command changed, or mean another thing to another tool.
    if not _all_strings(node):
        if node.plain and node.text and _valid_as(node, f, key):
            diags.append(_retyped_diag(node, key, node.readings()))
            return None
        if not isinstance(node.value, str):
            diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
            return None
        # Text to YAML 1.2 but typed by YAML 1.1, and not valid here either way: the
        # kind's own check below says what is wrong with the text.
    v = node.value
    # Escapes in quoted YAML can produce what the file itself may not hold: NUL, lone
    # surrogates. Neither can be a path or a name.
    if _BAD_CHARS.search(v):
        diags.append(diag("SBX038", node.span))
        return None
    return _check_string(node, f, key, diags)


def _bool_hint(node: YScalar) -> str:
    for r in node.readings()[1:]:
        if isinstance(r, bool):
            return (f"YAML 1.1 reads {node.text} as {'true' if r else 'false'} and YAML 1.2 as text; "
                    "write true or false, which every YAML reader takes alike")
    return ""


def _check_bool(node: YScalar, f: Field, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    readings = node.readings()
    if not all(isinstance(r, bool) for r in readings) or len(set(readings)) > 1:
        diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node),
                          hint=_bool_hint(node)))
        return None
    return Located(node.value, node.span)


def _whole(v) -> Optional[int]:
    """``v`` as an integer when it is one: 4 and 4.0 (a JSON Schema integer), not True or 4.5."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _check_int(node: YScalar, f: Field, key: str, diags: list[Diagnostic]) -> Optional[Located]:
    readings = node.readings()
    nums = [_whole(r) for r in readings]
    if any(n is not None for n in nums) and (None in nums or len(set(nums)) > 1):
        diags.append(diag("SBX027", node.span, key=key, text=shorten(node.text),
                          how=_how_read(readings) if None in nums else
                          f"{nums[0]} under YAML 1.2, {nums[1]} under YAML 1.1",
                          hint="write the number in plain decimal digits (no leading zero, underscore, "
                               "0o/0x prefix or exponent), which every YAML reader takes alike"))
        return None
    v = nums[0]
    if v is None:
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


def _check_string(node: YScalar, f: Field, key: str, diags: list[Diagnostic]):
    k, v = f.kind, node.value
    if k == "str":
        if not v:
            diags.append(diag("SBX011", node.span, key=key, expected="a non-empty string", got=type_name(node)))
            return None
        return Located(v, node.span)
    if k == "enum":
        if v not in f.choices:
            diags.append(diag("SBX013", node.span, key=key, value=v, suggest=suggest(v, f.choices)))
            return None
        return Located(v, node.span)
    if k == "size":
        if not re.fullmatch(SIZE_PATTERN.strip("^$"), v):
            diags.append(diag("SBX011", node.span, key=key, expected=_describe(f), got=type_name(node)))
            return None
        return Located(int(v[:-1]) * SIZE_UNITS[v[-1]], node.span)
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
    if not any(kn.value == "sbxc" for kn, _ in tree.items):
        # No `sbxc:` key: maybe no policy at all (an `extends` of a password file parses as
        # a mapping too). Nothing else of it is checked, so none of its text is quoted back.
        diags.append(diag("SBX016", Span(path, 1, 1, 1, 2), key="sbxc",
                          hint="a policy file starts with `sbxc: 1`; nothing else of this file was read"))
        return doc
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
    return doc
