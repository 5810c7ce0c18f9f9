"""Frontend: policy bytes -> a positioned YAML tree -> rules parsed with Lark.

Nothing here trusts its input. The file is size-checked and decoded before YAML sees it;
YAML is composed to nodes (never constructed to objects) with a resolver that knows only
YAML 1.2's plain types (``yes``/``no``/``on``/``off`` stay strings); the node graph is
walked with a budget, so alias bombs and deep nesting end in a diagnostic, not a hang.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Optional, Union

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from .diagnostics import Diagnostic, Related, diag, suggest
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


def type_name(node) -> str:
    if isinstance(node, YMap):
        return "a mapping"
    if isinstance(node, YSeq):
        return "a list"
    v = node.value
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, int):
        return f"an integer ({v})"
    if isinstance(v, float):
        return f"a number ({v})"
    return f"a string (\"{_short(v)}\")"


def _short(s: str, n: int = 40) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------- YAML loading

class _PolicyResolver(BaseResolver):
    """YAML 1.2 core schema for plain scalars: null, true/false, integers, floats."""


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
        value = _scalar_value(node)
        if isinstance(value, str):
            col0, cols = _scalar_positions(src.text, node, value)
            return YScalar(value, span, cols, col0)
        return YScalar(value, span)
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
            diags.append(diag("SBX007", key.span, key=_short(str(key.value)),
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
            return float(v.replace("inf", "Inf").replace("INF", "Inf").replace("Inf", "inf"))
        if tag == "tag:yaml.org,2002:null":
            return None
    except ValueError:
        return v
    return v


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
        diags.append(diag("SBX008", tree.span, got=type_name(tree), hint="start with `sbxc: 1`"))
        return None
    return tree


# ---------------------------------------------------------------- rule strings (Lark)

@dataclass(frozen=True, slots=True)
class PathAst:
    text: str
    """The path as written, quotes removed, variables not yet expanded."""
    span: Span
    scalar: Optional[YScalar] = None
    """The YAML scalar of the whole rule, for pointing at a character inside the path."""
    index: tuple[int, ...] = ()
    """Offset in the rule string of each character of ``text`` (quotes and escapes skipped)."""

    def span_at(self, offset: int, length: int = 1) -> Span:
        if self.scalar is None or not (0 <= offset < len(self.index)):
            return self.span
        start = self.scalar.span_at(self.index[offset])
        end_off = min(len(self.index) - 1, offset + max(1, length) - 1)
        end = self.scalar.span_at(self.index[end_off])
        if start is self.scalar.span or end.line != start.line:
            return start
        return Span(start.file, start.line, start.col, start.line, end.end_col)


@dataclass(frozen=True, slots=True)
class FsRuleAst:
    verb: str
    optional: bool
    paths: tuple[PathAst, ...]
    span: Span
    verb_span: Span
    text: str


@dataclass(frozen=True, slots=True)
class NetRuleAst:
    op: str
    proto: str
    port_lo: int
    port_hi: int
    span: Span
    text: str


FS_VERBS = ("read", "write", "tmpfs", "mask")
NET_OPS = ("connect", "bind")
NET_PROTOS = ("tcp",)


@functools.lru_cache(maxsize=1)
def rule_parser():
    import lark

    grammar = resources.files("sbxc").joinpath("grammar/policy.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", start=["fsrule", "netrule"], propagate_positions=True)


def _lark_fail(e, scalar: YScalar, what: str, expected: str) -> Diagnostic:
    import lark

    col = 0
    why = f"expected {expected}"
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            col = len(scalar.value)
            why = f"ends early; expected {expected}"
        else:
            col = (tok.start_pos or 0)
            why = f"unexpected \"{_short(str(tok))}\"; expected {expected}"
    elif isinstance(e, lark.exceptions.UnexpectedCharacters):
        col = e.pos_in_stream or 0
        ch = scalar.value[col] if col < len(scalar.value) else ""
        why = f"unexpected character \"{ch}\"" + (" (unclosed quote?)" if ch == '"' else "")
    elif isinstance(e, lark.exceptions.UnexpectedEOF):
        col = len(scalar.value)
        why = f"ends early; expected {expected}"
    return diag("SBX014", scalar.span_at(max(0, min(col, len(scalar.value) - 1))), what=what, why=why)


def parse_fs_rule(scalar: YScalar, diags: list[Diagnostic]) -> Optional[FsRuleAst]:
    import lark

    text = scalar.value
    if not text.strip():
        diags.append(diag("SBX014", scalar.span, what="filesystem rule", why="empty rule",
                          hint="write a verb and a path, e.g. `read /usr`"))
        return None
    try:
        tree = rule_parser().parse(text, start="fsrule")
    except lark.exceptions.LarkError as e:
        diags.append(_lark_fail(e, scalar, "filesystem rule", "a verb (read, write, tmpfs, mask) and then paths"))
        return None
    verb_tok = tree.children[0]
    verb = str(verb_tok)
    optional = verb.endswith("?")
    if optional:
        verb = verb[:-1]
    vstart = verb_tok.start_pos
    verb_span = scalar.span_at(vstart, len(verb))
    if verb not in FS_VERBS:
        diags.append(diag("SBX012", verb_span, verb=verb, suggest=suggest(verb, FS_VERBS)))
        return None
    paths = []
    for ptree in tree.children[1:]:
        tok = ptree.children[0]
        start = tok.start_pos
        if tok.type == "STRING":
            inner, idx = [], []
            i = 1
            s = str(tok)
            while i < len(s) - 1:
                if s[i] == "\\" and i + 1 < len(s) - 1:
                    inner.append(s[i + 1])
                    idx.append(start + i + 1)
                    i += 2
                else:
                    inner.append(s[i])
                    idx.append(start + i)
                    i += 1
            ptext = "".join(inner)
        else:
            ptext = str(tok)
            idx = list(range(start, start + len(ptext)))
        paths.append(PathAst(ptext, scalar.span_at(start, len(str(tok))), scalar, tuple(idx)))
    return FsRuleAst(verb, optional, tuple(paths), scalar.span, verb_span, text)


def parse_net_rule(scalar: YScalar, diags: list[Diagnostic]) -> Optional[NetRuleAst]:
    import lark

    text = scalar.value
    try:
        tree = rule_parser().parse(text, start="netrule")
    except lark.exceptions.LarkError as e:
        diags.append(_lark_fail(e, scalar, "network rule", "`connect tcp PORT` or `bind tcp PORT-PORT`"))
        return None
    op_tok, proto_tok, port_tok = tree.children
    ok = True
    if str(op_tok) not in NET_OPS:
        diags.append(diag("SBX013", scalar.span_at(op_tok.start_pos, len(op_tok)), key="network",
                          value=str(op_tok), suggest=suggest(str(op_tok), NET_OPS)))
        ok = False
    if str(proto_tok) not in NET_PROTOS:
        diags.append(diag("SBX013", scalar.span_at(proto_tok.start_pos, len(proto_tok)), key="network",
                          value=str(proto_tok), suggest=suggest(str(proto_tok), NET_PROTOS),
                          hint="only TCP ports can be allowed one by one"))
        ok = False
    m = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", str(port_tok))
    pspan = scalar.span_at(port_tok.start_pos, len(port_tok))
    if not m:
        diags.append(diag("SBX018", pspan, what=f"\"{_short(str(port_tok))}\": expected PORT or PORT-PORT"))
        return None
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    if not (1 <= lo <= 65535 and 1 <= hi <= 65535):
        diags.append(diag("SBX018", pspan, what=f"{port_tok}: ports are 1-65535"))
        return None
    if hi < lo:
        diags.append(diag("SBX018", pspan, what=f"range {port_tok}: the first port is above the second"))
        return None
    if not ok:
        return None
    return NetRuleAst(str(op_tok), str(proto_tok), lo, hi, scalar.span, text)


# ---------------------------------------------------------------- reading files

def builtin_names() -> list[str]:
    try:
        return sorted(p.name[:-5] for p in resources.files("sbxc").joinpath("policies").iterdir()
                      if p.name.endswith(".yaml"))
    except OSError:
        return []


def read_builtin(name: str) -> Optional[bytes]:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        return None
    try:
        return resources.files("sbxc").joinpath(f"policies/{name}.yaml").read_bytes()
    except (OSError, FileNotFoundError):
        return None


def read_file(path: str, diags: list[Diagnostic], span: Optional[Span] = None) -> Optional[bytes]:
    """Read at most MAX_BYTES + 1 bytes (so a huge or endless file costs nothing)."""
    import os

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why=e.strerror or str(e)))
        return None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why="not a regular file"))
            return None
        return _read_fd(fd, path, diags, span or point(path, 0, 0))
    except OSError as e:
        diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why=e.strerror or str(e)))
        return None
    finally:
        os.close(fd)


def _read_fd(fd: int, path: str, diags: list[Diagnostic], at: Span) -> Optional[bytes]:
    import os

    chunks, total = [], 0
    try:
        while total <= MAX_BYTES:
            b = os.read(fd, min(1 << 16, MAX_BYTES + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
    except OSError as e:
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    return b"".join(chunks)


# ---------------------------------------------------------------- whose file is it

def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _entry_problem(what: str, st, folder: str, dst, uid: int) -> str:
    """Why an entry (the policy file, or a symlink met on the way to it) with stat ``st``
    in ``folder`` with stat ``dst`` could have been written by someone other than the
    caller or root; "" when it could not.

    Only the caller and root may own the entry and its folder. Nobody else may write the
    entry, nor the folder (they could rename the entry away and put their own in its
    place), except in a sticky folder such as /tmp, where only an entry's owner can
    rename or delete it: there the entry must be the caller's, since the folder lets
    anyone create names the caller might look for.
    """
    import stat

    trusted = (uid, 0)
    if st.st_uid not in trusted:
        return f"{what} is owned by {_owner_name(st.st_uid)}"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
        return f"{what} is writable by {'others' if st.st_mode & 0o002 else 'its group'} (mode {stat.S_IMODE(st.st_mode):04o})"
    if dst.st_uid not in trusted:
        return f"its folder {folder} is owned by {_owner_name(dst.st_uid)}"
    if dst.st_mode & 0o022:
        who = "others" if dst.st_mode & 0o002 else "its group"
        if not dst.st_mode & stat.S_ISVTX:
            return f"its folder {folder} is writable by {who} and not sticky (mode {stat.S_IMODE(dst.st_mode):04o})"
        if st.st_uid != uid:
            return (f"its folder {folder} is writable by {who} (sticky) and {what} is not yours "
                    f"but {_owner_name(st.st_uid)}'s")
    return ""


def _links_problem(path: str, uid: int) -> str:
    """Check every symlink met while resolving ``path`` like the file itself: a link
    someone else controls chooses which file the caller's run compiles."""
    import os
    import posixpath
    import stat

    parts = [p for p in path.split("/") if p and p != "."]
    resolved = "/"
    for _ in range(256):
        if not parts:
            return ""
        part = parts.pop(0)
        if part == "..":
            resolved = posixpath.dirname(resolved) or "/"
            continue
        cand = posixpath.join(resolved, part)
        try:
            st = os.lstat(cand)
        except OSError:
            return ""  # missing: opening it reports that
        if stat.S_ISLNK(st.st_mode):
            try:
                dst = os.stat(resolved)
                target = os.readlink(cand)
            except OSError:
                return ""
            why = _entry_problem(f"the symlink {cand}", st, resolved, dst, uid)
            if why:
                return why
            if target.startswith("/"):
                resolved = "/"
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        resolved = cand
    return ""  # a link loop: opening it reports ELOOP


def read_policy_file(path: str, diags: list[Diagnostic], span: Optional[Span] = None,
                     uid: Optional[int] = None) -> Optional[bytes]:
    """``read_file`` for a policy, which must be one only the caller (or root) could have
    written (SBX025), in the spirit of git's safe.directory.

    The folder is opened without following a link and the file is opened relative to it,
    and both are checked by ``fstat`` on what was opened: whatever is renamed on the way
    meanwhile, the bytes read come from a checked file in a checked folder.
    """
    import os
    import stat

    uid = os.geteuid() if uid is None else uid
    at = span or point(path, 0, 0)
    why = _links_problem(path, uid)
    if why:
        diags.append(_untrusted(path, why, at))
        return None
    real = os.path.realpath(path)
    why = _secret_place(real)
    if why:
        diags.append(_not_a_policy(path, real, why, at))
        return None
    folder, name = os.path.dirname(real), os.path.basename(real)
    try:
        # O_PATH needs no read permission on the folder; macOS has none, and reads it instead.
        dfd = os.open(folder, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        os.close(dfd)
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    try:
        st, dst = os.fstat(fd), os.fstat(dfd)
        if not stat.S_ISREG(st.st_mode):
            diags.append(diag("SBX001", at, what=path, why="not a regular file"))
            return None
        why = _entry_problem("the file", st, folder, dst, uid)
        if why:
            diags.append(_untrusted(path, why, at))
            return None
        why = _private_file(real, st, linked=real != os.path.abspath(path))
        if why:
            diags.append(_not_a_policy(path, real, why, at))
            return None
        return _read_fd(fd, path, diags, at)
    finally:
        os.close(fd)
        os.close(dfd)


# Kernel and runtime state: never a policy, and /proc/self/environ or a process's memory
# quoted in a YAML error would print secrets.
_STATE_FOLDERS = ("/proc", "/sys", "/dev", "/run")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _secret_place(real: str) -> str:
    """Why the real path of a policy file is a place for secrets, not policies ("" when it
    is not), judged before a byte is read: diagnostics quote policy lines, so a link named
    sandbox.policy.yaml that leads to a credential would print it."""
    for folder in _STATE_FOLDERS:
        if _under(real, folder):
            return f"it lies under {folder}, which holds kernel and process state"
    for masked in default_masks():
        if _under(real, masked):
            return f"it lies under {masked}, which builtin:default hides from every command as a credential"
    return ""


def _private_file(real: str, st, linked: bool) -> str:
    """Why a policy file that passed the ownership checks may still be a secret ("" when
    not). A policy holds nothing private, so a file others may not read is suspect where
    someone other than the person may have chosen it: reached through a symlink or a hard
    link (its name was put there; the file is some other file), or kept under /etc, where
    root's secrets (shadow, sudoers, private keys) are root-owned like every policy there."""
    if st.st_mode & 0o004:
        return ""
    if _under(real, "/etc"):
        return f"it lies under /etc and is not readable by everyone (mode {st.st_mode & 0o7777:04o}), as secrets are"
    if linked:
        return (f"it is reached through a symlink and is not readable by everyone (mode {st.st_mode & 0o7777:04o}), "
                "as secrets are")
    if st.st_nlink > 1:
        return (f"it has {st.st_nlink} names (hard links) and is not readable by everyone "
                f"(mode {st.st_mode & 0o7777:04o}), as secrets are")
    return ""


def default_masks() -> list:
    """The credential paths builtin:default masks, with ``~`` as this process's home: the
    one list of them (policies/default.yaml), read without Lark (plain words only)."""
    import os

    home = os.environ.get("HOME") or os.path.expanduser("~")
    out = []
    tree = _default_tree()
    entry = tree.get("filesystem") if isinstance(tree, YMap) else None
    for item in (entry[1].items if entry is not None and isinstance(entry[1], YSeq) else ()):
        words = str(getattr(item, "value", "")).split()
        if not words or words[0] not in ("mask", "mask?"):
            continue
        for w in words[1:]:
            if w.startswith("~/") and home.startswith("/"):
                out.append(os.path.normpath(home.rstrip("/") + w[1:]))
            elif w.startswith("/") and "$" not in w and "{" not in w:
                out.append(w)
    return out


@functools.lru_cache(maxsize=1)
def _default_tree():
    data = read_builtin("default") or b""
    diags: list[Diagnostic] = []
    src, usable = decode_source("builtin:default", data, diags)
    return load_yaml(src, diags) if src is not None and usable else None


def _not_a_policy(path: str, real: str, why: str, at: Span) -> Diagnostic:
    shown = path if real == path else f"{path} (which resolves to {real})"
    return diag("SBX025", at, path=shown, why=why + "; sbxc did not read it",
                hint="point --policy (or the link) at the policy file itself, kept in a folder of yours; "
                     "a policy holds nothing secret, so it may be readable by everyone (chmod o+r)")


def _untrusted(path: str, why: str, at: Span) -> Diagnostic:
    return diag("SBX025", at, path=path, why=why,
                hint="another user could have written it; move it to a folder of yours, fix its owner or "
                     "mode (chmod go-w), or pass --policy with a file you own (--policy builtin:default "
                     "for the builtin profile)")


# ---------------------------------------------------------------- extends and merging

MAX_EXTENDS = 32

LIST_KEYS = ("filesystem", "cache.tools", "env.pass", "syscalls.deny", "locked")
"""Keys whose lists join across files (SPEC §1); every other key: the later file wins."""

_HOME_ORDER = {"hidden": 0, "read-only": 1, "writable": 2}


@dataclass(slots=True)
class Setting:
    """One resolved key: its value, where it was written, and what it replaced."""

    key: str
    value: object
    span: Optional[Span]
    """Where the winning value was written; None for a default."""
    origin: str = "default"
    """``default``, ``file`` or ``command line``."""
    beat: list = field(default_factory=list)
    """(value, span or None, origin) of each value it replaced, latest first."""
    base_dir: str = ""
    """Folder of the file that wrote it (``project`` is relative to it)."""


@dataclass(slots=True)
class Merged:
    settings: dict[str, Setting] = field(default_factory=dict)
    env_set: dict[str, Setting] = field(default_factory=dict)
    locked: dict[str, Span] = field(default_factory=dict)
    sources: list[SourceFile] = field(default_factory=list)
    applied: set = field(default_factory=set)
    root: str = ""
    """The top policy file (absolute path or ``builtin:NAME``)."""


def _net_level(v) -> int:
    if v is True or v is None:
        return 2
    if v is False:
        return 0
    return 1


def _net_covered(rule, rules) -> bool:
    return any(r.op == rule.op and r.proto == rule.proto and r.port_lo <= rule.port_lo and rule.port_hi <= r.port_hi
               for r in rules)


def describe_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        if v and isinstance(v[0], (NetRuleAst, FsRuleAst)):
            return "[" + ", ".join(r.text for r in v) + "]"
        return "[" + ", ".join(str(getattr(x, "value", x)) for x in v) + "]"
    if v is None:
        return "unset"
    return str(v)


def _loosening(key: str, old, new, added) -> tuple[str, Optional[Span]]:
    """Why going from ``old`` to ``new`` (``added`` for joined lists) loosens a locked key
    ("" if it does not), and the rule to point at when it is one item of a list."""
    if key == "network":
        lo, ln = _net_level(old), _net_level(new)
        if ln > lo:
            return f"sets network: {describe_value(new)}, looser than {describe_value(old)}", None
        if lo == ln == 1:
            extra = [r for r in new if not _net_covered(r, old)]
            if extra:
                return f"allows {extra[0].text}, which the locked rules do not", extra[0].span
        return "", None
    if key == "filesystem":
        loose = [r for r in added if r.verb != "mask"]
        if loose:
            return f"adds \"{loose[0].text}\"; only mask rules may be added to a locked filesystem", loose[0].span
        return "", None
    return _loosening_scalar(key, old, new, added), None


def _loosening_scalar(key: str, old, new, added) -> str:
    if key == "home":
        if _HOME_ORDER.get(new, 2) > _HOME_ORDER.get(old, 2):
            return f"sets home: {new}, looser than {old}"
        return ""
    if key in ("syscalls.deny",):
        return ""
    if key == "landlock.min_abi":
        return f"lowers min_abi to {new} from {old}" if old is not None and new < old else ""
    if key in ("landlock.best_effort", "syscalls.allow_unix_sockets"):
        return f"turns {key} on" if new and not old else ""
    if key == "cache.required":
        return "turns cache.required off" if old and not new else ""
    if key.startswith("workspace."):
        return f"raises {key} to {new} from {old}" if old is not None and new > old else ""
    if key in LIST_KEYS:
        return f"adds {describe_value(added)} to {key}" if added else ""
    if new != old:
        return f"changes {key} from {describe_value(old)} to {describe_value(new)}"
    return ""


def _flatten(doc) -> list[tuple[str, object, Span, Span]]:
    """(dotted key, value, value span, key span) for every leaf a document sets."""
    out = []
    for name, loc in doc.values.items():
        if name in ("sbxc", "extends"):
            continue
        if isinstance(loc.value, dict):
            for sub, sloc in loc.value.items():
                if name == "env" and sub == "set":
                    out.append(("env.set", sloc.value, sloc.span, sloc.key_span or sloc.span))
                else:
                    out.append((f"{name}.{sub}", sloc.value, sloc.span, sloc.key_span or sloc.span))
        else:
            out.append((name, loc.value, loc.span, doc.key_spans.get(name, loc.span)))
    return out


def apply_document(m: Merged, doc, base_dir: str, diags: list[Diagnostic]) -> None:
    new_locks = {}
    for key, value, span, key_span in _flatten(doc):
        top = key.split(".")[0]
        lock_span = m.locked.get(top)
        if key == "env.set":
            for name, loc in value.items():
                prev = m.env_set.get(name)
                if lock_span is not None and (prev is None or prev.value != loc.value):
                    diags.append(_locked_diag(top, f"sets env.set.{name}", loc.key_span or loc.span, lock_span, prev))
                    continue
                s = Setting(f"env.set.{name}", loc.value, loc.span, "file", base_dir=base_dir)
                if prev is not None:
                    s.beat = [(prev.value, prev.span, prev.origin)] + prev.beat
                m.env_set[name] = s
            continue
        if key == "locked":
            for loc in value:
                new_locks.setdefault(loc.value, loc.span)
        prev = m.settings.get(key)
        old = prev.value if prev else None
        added = []
        if key in LIST_KEYS or (key == "network" and isinstance(value, list) and isinstance(old, list)):
            added = list(value)
            merged_value = (list(old) if isinstance(old, list) else []) + added
        else:
            merged_value = value
        if lock_span is not None:
            why, at = _loosening(key, old, merged_value if key != "network" else value, added)
            if why:
                diags.append(_locked_diag(top, why, at or key_span, lock_span, prev))
                continue
            if key == "network" and isinstance(value, list) and isinstance(old, list):
                merged_value = value  # a locked rule list may only narrow: the later list replaces it
        s = Setting(key, merged_value, span, "file", base_dir=base_dir)
        if prev is not None and key not in LIST_KEYS:
            s.beat = [(prev.value, prev.span, prev.origin)] + prev.beat
        m.settings[key] = s
    for k, sp in new_locks.items():
        m.locked.setdefault(k, sp)


def _locked_diag(key: str, why: str, span: Span, lock_span: Span, prev: Optional[Setting]) -> Diagnostic:
    related = [Related(lock_span, f"\"{key}\" was locked here")]
    if prev is not None and prev.span is not None:
        related.append(Related(prev.span, f"the locked value {describe_value(prev.value)} was set here"))
    return diag("SBX023", span, key=key, change=why, related=related,
                hint="a policy that extends a locked key may only make it stricter")


def resolve_extends(target: str, from_path: str) -> str:
    """``builtin:NAME`` stays; a relative path is taken from the extending file's folder."""
    import os

    if target.startswith("builtin:"):
        return target
    if from_path.startswith("builtin:"):
        return target if target.startswith("/") else "builtin-relative:" + target
    base = os.path.dirname(from_path)
    return os.path.normpath(os.path.join(base, target))


def load_chain(root: str, diags: list[Diagnostic], uid: Optional[int] = None) -> Merged:
    """Load ``root`` and everything it extends, depth first, each file once, and merge.

    Every file must pass ``read_policy_file``'s ownership checks for ``uid`` (default:
    this process's effective uid, whose files a sandbox would run with)."""
    import os

    from .validate import check_document

    m = Merged(root=root)

    def visit(ref: str, stack: list[str], via: Optional[Span]) -> None:
        if ref in stack:
            chain = " -> ".join(stack[stack.index(ref):] + [ref])
            diags.append(diag("SBX022", via, chain=chain, hint="remove one of the extends entries"))
            return
        if ref in m.applied:
            return
        if len(stack) >= MAX_EXTENDS:
            diags.append(diag("SBX024", via, limit=MAX_EXTENDS))
            return
        m.applied.add(ref)
        if ref.startswith("builtin:"):
            name = ref[len("builtin:"):]
            data = read_builtin(name)
            if data is None:
                diags.append(diag("SBX021", via, target=ref, why="no such builtin profile",
                                  suggest=suggest(name, builtin_names())))
                return
            base_dir = ""
        elif ref.startswith("builtin-relative:"):
            diags.append(diag("SBX021", via, target=ref.split(":", 1)[1], why="a builtin profile can only extend builtins", suggest=""))
            return
        else:
            if via is not None and not os.path.exists(ref):
                diags.append(diag("SBX021", via, target=ref, why="file not found", suggest=""))
                return
            data = read_policy_file(ref, diags, via, uid)
            if data is None:
                return
            base_dir = os.path.dirname(ref)
        src, usable = decode_source(ref, data, diags)
        if src is not None:
            m.sources.append(src)
        if not usable:
            return
        tree = load_yaml(src, diags)
        if tree is None:
            return
        doc = check_document(ref, tree, diags)
        ext = doc.values.get("extends")
        if ext is not None:
            for loc in ext.value:
                visit(resolve_extends(loc.value, ref), stack + [ref], loc.span)
        apply_document(m, doc, base_dir, diags)

    visit(root, [], None)
    return m
