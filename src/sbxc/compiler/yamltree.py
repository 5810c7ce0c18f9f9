"""The positioned YAML tree: policy bytes -> checked text -> YScalar / YSeq / YMap nodes.

Nothing here trusts its input. The file is size-checked and decoded before YAML sees it;
YAML is composed to nodes (never constructed to objects) with a resolver that knows only
YAML 1.2's plain types (``yes``/``no``/``on``/``off`` stay strings); the node graph is
walked with a budget, so alias bombs and deep nesting end in a diagnostic, not a hang.

Each scalar keeps its text as written and whether YAML typed it implicitly (a plain
scalar with no tag), so the checks can tell ``0755`` from ``"0755"`` and can ask how a
YAML 1.1 reader (PyYAML's ``safe_load``, many editors and CI tools) would read it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver, Resolver
from yaml.scanner import Scanner

from .diagnostics import Diagnostic, Related, diag
from .plan import Span
from .source import SourceFile, point

MAX_BYTES = 1 << 20
"""A policy of 10,000 rules is about 300 KB; anything past 1 MiB is not a policy."""
MAX_NODES = 200_000
"""Nodes visited while walking the YAML graph, aliases counted each time they are used."""
MAX_DEPTH = 64


# ---------------------------------------------------------------- the positioned tree

@dataclass(slots=True)
class YScalar:
    value: Union[str, int, float, bool, None]
    span: Span
    cols: Optional[list[int]] = None
    """Column in the file of each character of ``value`` (on the scalar's first line),
    when that could be worked out: quoted one-line scalars."""
    col0: int = 0
    """For a plain one-line scalar, the column of ``value[0]`` (character i is at col0 + i)."""
    text: str = ""
    """The scalar's characters as YAML read them, before any typing (``0755`` for 755)."""
    plain: bool = False
    """Written without quotes and without a tag, so YAML chose its type from the text."""

    def readings(self) -> tuple:
        """The value as the loader took it (YAML 1.2), and for a plain scalar also as a
        YAML 1.1 reader takes it; a policy means one thing only where all of them agree."""
        if not self.plain:
            return (self.value,)
        return (self.value, yaml11_value(self.text))

    def _col(self, offset: int) -> int:
        if self.col0:
            return self.col0 + offset if 0 <= offset < len(self.value) else 0
        if self.cols and 0 <= offset < len(self.cols):
            return self.cols[offset]
        return 0

    def span_at(self, offset: int, length: int = 1) -> Span:
        """The file span of ``value[offset:offset+length]``; the scalar's own span otherwise."""
        col = self._col(offset)
        if not col:
            return self.span
        end = self._col(offset + max(1, length) - 1) or col
        return Span(self.span.file, self.span.line, col, self.span.line, end + 1)


@dataclass(slots=True)
class YSeq:
    items: list
    span: Span


@dataclass(slots=True)
class YMap:
    items: list[tuple[YScalar, object]]
    span: Span

    def get(self, key: str):
        for k, v in self.items:
            if k.value == key:
                return k, v
        return None


YNode = Union[YScalar, YSeq, YMap]


def kind_name(node) -> str:
    """What ``node`` is, without its value: "a mapping", "a string" ..."""
    if isinstance(node, YMap):
        return "a mapping"
    if isinstance(node, YSeq):
        return "a list"
    v = node.value
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    return "a string"


def type_name(node) -> str:
    """``kind_name`` with the scalar's value."""
    kind = kind_name(node)
    if isinstance(node, (YMap, YSeq)):
        return kind
    v = node.value
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"{kind} ({'true' if v else 'false'})"
    if isinstance(v, (int, float)):
        return f"{kind} ({v})"
    return f"{kind} (\"{shorten(v)}\")"


def shorten(s: str, n: int = 40) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------- YAML loading

_IMPLIED = "tag:sbxc.invalid,2026:implied:"
"""Prefix the resolver puts on tags it chose from a plain scalar's text (see ``resolve``)."""


class _PolicyResolver(BaseResolver):
    """YAML 1.2 core schema for plain scalars: null, true/false, integers, floats."""

    def resolve(self, kind, value, implicit):
        # Both parsers (PyYAML's and libyaml's) call this only for scalars with no tag or
        # the non-specific "!"; marking what it decides is how the tree learns that a
        # scalar's type was implied by its text rather than written by the person.
        tag = super().resolve(kind, value, implicit)
        if kind is ScalarNode and implicit[0]:
            return _IMPLIED + tag
        return tag


_PolicyResolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_PolicyResolver.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_PolicyResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))
_PolicyResolver.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])


# The YAML 1.2 core schema's forms, for a scalar tagged explicitly (!!bool "yes" is no
# boolean of that schema); the same patterns the resolver uses for plain scalars.
_CORE_FORMS = {tag: regexp for tag, regexp in (
    (tag, next(r for t, r in _PolicyResolver.yaml_implicit_resolvers.get(first, []) if t == tag))
    for tag, first in (("tag:yaml.org,2002:bool", "t"), ("tag:yaml.org,2002:int", "0"),
                       ("tag:yaml.org,2002:float", "."), ("tag:yaml.org,2002:null", "~")))}


class _PolicyLoader(Reader, Scanner, Parser, Composer, _PolicyResolver):
    def __init__(self, stream):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _PolicyResolver.__init__(self)


def _c_loader():
    """libyaml's parser when present and new enough to bound nesting itself (0.2.5+): it is
    about ten times faster, and its composer recurses in C, so it must not see unbounded depth."""
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    try:
        version = tuple(int(x) for x in yaml._yaml.get_version_string().split(".")[:3])
    except (AttributeError, ValueError):
        return None
    if version < (0, 2, 5):
        return None

    class _CPolicyLoader(yaml._yaml.CParser, _PolicyResolver):
        def __init__(self, stream):
            yaml._yaml.CParser.__init__(self, stream)
            _PolicyResolver.__init__(self)

    return _CPolicyLoader


_LOADER = _c_loader() or _PolicyLoader


class _Budget:
    def __init__(self):
        self.nodes = 0


class _TooBig(Exception):
    def __init__(self, what: str, limit: int, span: Span):
        self.what, self.limit, self.span = what, limit, span


def _scalar_positions(text: str, node: ScalarNode, value: str) -> tuple[int, Optional[list[int]]]:
    """(col0, cols) for ``YScalar``; (0, None) when characters cannot be mapped to columns."""
    sm, em = node.start_mark, node.end_mark
    if sm.line != em.line or node.style in ("|", ">"):
        return 0, None
    col0 = sm.column + 1
    if not node.style:  # plain: None from PyYAML's parser, "" from libyaml's
        # libyaml's end mark can include trailing blanks; the start is exact.
        return (col0, None) if text[sm.index:sm.index + len(value)] == value else (0, None)
    raw = text[sm.index:em.index]
    cols: list[int] = []
    i = 1
    if node.style == "'":
        while i < len(raw) - 1:
            cols.append(col0 + i)
            i += 2 if raw[i] == "'" and raw[i + 1:i + 2] == "'" else 1
    elif node.style == '"':
        widths = {"x": 2, "u": 4, "U": 8}
        while i < len(raw) - 1:
            cols.append(col0 + i)
            i += 2 + widths.get(raw[i + 1:i + 2], 0) if raw[i] == "\\" else 1
    else:
        return 0, None
    return (0, cols) if len(cols) == len(value) else (0, None)


def _mark_span(file: str, node) -> Span:
    sm, em = node.start_mark, node.end_mark
    return Span(file, sm.line + 1, sm.column + 1, em.line + 1, em.column + 1)


def _convert(node, src: SourceFile, budget: _Budget, depth: int, diags: list[Diagnostic]) -> YNode:
    budget.nodes += 1
    span = _mark_span(src.path, node)
    if budget.nodes > MAX_NODES:
        raise _TooBig("large once aliases are expanded", MAX_NODES, span)
    if depth > MAX_DEPTH:
        raise _TooBig("deeply nested", MAX_DEPTH, span)
    if isinstance(node, ScalarNode):
        plain = node.tag.startswith(_IMPLIED)
        if plain:
            node.tag = node.tag[len(_IMPLIED):]
        core = None if plain else _CORE_FORMS.get(node.tag)
        if core is not None and not core.match(node.value):
            # An explicit tag on text that the tag's YAML 1.2 core form does not take:
            # readers differ (PyYAML reads !!bool "yes" as true, and would read "garbage"
            # as an error), so sbxc takes no side.
            diags.append(diag("SBX055", span, tag=node.tag.rsplit(":", 1)[-1], text=shorten(node.value)))
            return YScalar(node.value, span, text=node.value, plain=False)
        value = _scalar_value(node)
        if isinstance(value, str):
            col0, cols = _scalar_positions(src.text, node, value)
            return YScalar(value, span, cols, col0, node.value, plain)
        return YScalar(value, span, text=node.value, plain=plain)
    if isinstance(node, SequenceNode):
        return YSeq([_convert(n, src, budget, depth + 1, diags) for n in node.value], span)
    assert isinstance(node, MappingNode)
    items: list[tuple[YScalar, YNode]] = []
    seen: dict = {}
    for kn, vn in node.value:
        key = _convert(kn, src, budget, depth + 1, diags)
        value = _convert(vn, src, budget, depth + 1, diags)
        if not isinstance(key, YScalar):
            diags.append(diag("SBX011", key.span, key="key", expected="a plain word", got=type_name(key)))
            continue
        hashable = (type(key.value).__name__, key.value)
        if hashable in seen:
            first = seen[hashable]
            diags.append(diag("SBX007", key.span, key=shorten(str(key.value)),
                              related=[Related(first.span, "first given here")],
                              hint="YAML keeps only one of them; remove or merge the other"))
            continue
        seen[hashable] = key
        items.append((key, value))
    return YMap(items, span)


def _scalar_value(node: ScalarNode):
    tag, v = node.tag, node.value
    try:
        if tag == "tag:yaml.org,2002:bool":
            return v.lower() == "true"
        if tag == "tag:yaml.org,2002:int":
            if len(v) > 40:
                return v
            return int(v, 0) if v[:2] in ("0o", "0x") else int(v)
        if tag == "tag:yaml.org,2002:float":
            low = v.lower()
            if low.lstrip("+-") in (".inf", ".nan"):  # YAML's spelling; Python's has no dot
                return float(low.replace(".", "", 1))
            return float(v)
        if tag == "tag:yaml.org,2002:null":
            return None
    except ValueError:
        return v
    return v


class _Yaml11Resolver(Resolver):
    """PyYAML's YAML 1.1 resolver, plus the one-letter booleans the 1.1 type repository
    lists (y, Y, n, N) and PyYAML leaves out."""


_Yaml11Resolver.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
_RESOLVER11 = _Yaml11Resolver()


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A plain scalar that YAML 1.1 types but cannot build (``2026-13-45``, ``<<``, ``=``)."""

    tag: str


def yaml11_value(text: str):
    """What a YAML 1.1 reader makes of a plain scalar: ``0755`` is 493, ``yes`` is True,
    ``1:30`` is 90, ``2026-01-02`` a date; text YAML 1.1 leaves alone comes back unchanged."""
    tag = _RESOLVER11.resolve(ScalarNode, text, (True, False))
    if tag == "tag:yaml.org,2002:str":
        return text
    if tag == "tag:yaml.org,2002:bool" and text in ("y", "Y", "n", "N"):
        return text in ("y", "Y")
    try:
        # A fresh constructor each time: it remembers every node it built.
        return SafeConstructor().construct_object(ScalarNode(tag, text))
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return Unreadable(tag)


def decode_source(path: str, data: bytes, diags: list[Diagnostic]) -> tuple[Optional[SourceFile], bool]:
    """Check size, encoding and control characters.

    Returns (source, usable): the source is kept when it decodes, even if unusable, so the
    diagnostic can show the offending line.
    """
    if len(data) > MAX_BYTES:
        diags.append(diag("SBX002", point(path, 1, 1), limit=MAX_BYTES))
        return None, False
    if data.startswith(b"\xef\xbb\xbf"):
        data_text = data[3:]
    else:
        data_text = data
    try:
        text = data_text.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data_text.count(b"\n", 0, e.start) + 1
        col = e.start - (data_text.rfind(b"\n", 0, e.start) + 1) + 1
        diags.append(diag("SBX003", point(path, line, col), byte=data_text[e.start]))
        return None, False
    src = SourceFile.from_bytes(path, data, text)
    # YAML forbids these; finding them first gives a precise position and a plain message.
    for m in re.finditer(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff\ud800-\udfff]", text):
        ch = m.group()
        what = "NUL" if ch == "\x00" else f"control (U+{ord(ch):04X})"
        line = text.count("\n", 0, m.start()) + 1
        col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        diags.append(diag("SBX004", point(path, line, col), what=what))
        return src, False
    return src, True


def load_yaml(src: SourceFile, diags: list[Diagnostic]) -> Optional[YNode]:
    """Compose the one YAML document of ``src`` into a positioned tree."""
    loader = _LOADER(src.text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.composer.ComposerError as e:
            if "single document" in f"{e.context} {e.problem}":
                m = e.problem_mark
                diags.append(diag("SBX009", point(src.path, m.line + 1, m.column + 1) if m else None))
                return None
            raise
        if node is None:
            diags.append(diag("SBX008", point(src.path, 1, 1), got="an empty document",
                              hint="start with `sbxc: 1`"))
            return None
        budget = _Budget()
        tree = _convert(node, src, budget, 0, diags)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark or e.context_mark
        why = " ".join(x for x in (e.context, e.problem) if x)
        hint = ""
        if m is not None and src.line_text(m.line + 1)[m.column:m.column + 1] == "\t":
            hint = "YAML indentation must use spaces, not tabs"
        span = point(src.path, m.line + 1, m.column + 1) if m else point(src.path, 1, 1)
        related = []
        c = e.context_mark
        if c is not None and m is not None and (c.line, c.column) != (m.line, m.column) and e.context:
            related.append(Related(point(src.path, c.line + 1, c.column + 1), e.context))
        diags.append(diag("SBX005", span, why=e.problem or why or "invalid YAML", hint=hint, related=related))
        return None
    except yaml.YAMLError as e:
        diags.append(diag("SBX005", point(src.path, 1, 1), why=str(e).splitlines()[0] if str(e) else "invalid YAML"))
        return None
    except _TooBig as e:
        diags.append(diag("SBX006", e.span, what=e.what, limit=e.limit))
        return None
    except RecursionError:
        diags.append(diag("SBX006", point(src.path, 1, 1), what="deeply nested", limit=MAX_DEPTH))
        return None
    finally:
        if hasattr(loader, "dispose"):
            loader.dispose()
    if not isinstance(tree, YMap):
        # The kind only, never the text: a file that is no policy at all (an `extends` of
        # /etc/shadow, say) must not have its content printed.
        diags.append(diag("SBX008", tree.span, got=kind_name(tree), hint="start with `sbxc: 1`"))
        return None
    return tree
