"""Rule strings of the filesystem and network lists, parsed with Lark into positioned ASTs.

The grammar (grammar/policy.lark) is loaded once; the Lark tree is turned into
``FsRuleAst`` / ``NetRuleAst`` here and checked afterwards, never inside a Transformer.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

from .diagnostics import Diagnostic, diag, suggest
from .plan import Span
from .yamltree import YScalar, shorten

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
@dataclass(frozen=True, slots=True)
class HostRuleAst:
    """``allow HOST[:PORT]`` or ``allow @GROUP``, checked but with groups not yet expanded."""

    host: str
    """The host as written (``example.org``, ``*.files.example.org``, ``127.0.0.2``, ``[::1]``);
    "" for a group."""
    kind: str
    """``name``, ``wild``, ``addr`` (sbxc.hostnames.parse_pattern), or ``group``."""
    canonical: str
    """The host in the proxy's reading (lower-case ASCII name, ``*.parent``, the address), or
    the group's name."""
    port: int
    """0: the default ports (443 and 80)."""
    span: Span
    target_span: Span
    text: str
    is_public_addr: bool = False
    op: str = "allow"


NET_OPS = ("connect", "bind", "allow")
PORT_OPS = ("connect", "bind")
NET_PROTOS = ("tcp",)


@functools.lru_cache(maxsize=1)
def rule_parser():
    import lark

    from ..layout import PACKAGE_DIR

    with open(f"{PACKAGE_DIR}/grammar/policy.lark", encoding="utf-8") as f:  # by path: see frontend.builtin_names
        grammar = f.read()
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
            why = f"unexpected \"{shorten(str(tok))}\"; expected {expected}"
    elif isinstance(e, lark.exceptions.UnexpectedCharacters):
        col = e.pos_in_stream or 0
        ch = scalar.value[col] if col < len(scalar.value) else ""
        why = f"unexpected character \"{ch}\"" + (" (unclosed quote?)" if ch == '"' else "")
    elif isinstance(e, lark.exceptions.UnexpectedEOF):
        col = len(scalar.value)
        why = f"ends early; expected {expected}"
    return diag("SBX014", scalar.span_at(max(0, min(col, len(scalar.value) - 1))), what=what, why=why)


def _run_together(tokens, scalar: YScalar, what: str) -> Optional[Diagnostic]:
    """A diagnostic for the first word that follows the previous one with no blank between
    (``read/usr``, ``"a""b"``): the lexer can split them, but the person may have meant one
    path, so the rule says neither (and the JSON Schema requires the blank)."""
    for prev, tok in zip(tokens, tokens[1:]):
        if tok.start_pos == prev.end_pos:
            return diag("SBX014", scalar.span_at(tok.start_pos), what=what,
                        why=f"\"{shorten(str(prev))}\" and \"{shorten(str(tok))}\" run together",
                        hint="put a space between the words; quote a path that holds spaces or quotes")
    return None


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
    bad = _run_together([verb_tok] + [p.children[0] for p in tree.children[1:]], scalar, "filesystem rule")
    if bad is not None:
        diags.append(bad)
        return None
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
        diags.append(_lark_fail(e, scalar, "network rule",
                                "`allow HOST[:PORT]`, `allow @GROUP`, `connect tcp PORT` or `bind tcp PORT-PORT`"))
        return None
    op_tok, args = tree.children[0], tree.children[1:]
    bad = _run_together(tree.children, scalar, "network rule")
    if bad is not None:
        diags.append(bad)
        return None
    if str(op_tok) == "allow":
        if len(args) != 1:
            diags.append(diag("SBX014", scalar.span_at(args[min(1, len(args) - 1)].start_pos), what="network rule",
                              why="`allow` takes one host, e.g. `allow example.org` or `allow example.org:8443`",
                              hint="write one rule per host"))
            return None
        return _host_rule(scalar, args[0], diags)
    if str(op_tok) not in NET_OPS:
        diags.append(diag("SBX013", scalar.span_at(op_tok.start_pos, len(op_tok)), key="network",
                          value=str(op_tok), suggest=suggest(str(op_tok), NET_OPS)))
        return None
    if len(args) != 2:
        at = args[2].start_pos if len(args) > 2 else len(text)
        diags.append(diag("SBX014", scalar.span_at(min(at, len(text) - 1)), what="network rule",
                          why=("ends early; " if len(args) < 2 else "too many words; ")
                          + "expected `connect tcp PORT` or `bind tcp PORT-PORT`"))
        return None
    proto_tok, port_tok = args
    ok = True
    if str(op_tok) not in PORT_OPS:
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
        diags.append(diag("SBX018", pspan, what=f"\"{shorten(str(port_tok))}\": expected PORT or PORT-PORT"))
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


_GROUP = re.compile(r"@([a-z][a-z0-9_-]{0,63})")


def _host_rule(scalar: YScalar, tok, diags: list[Diagnostic]) -> Optional[HostRuleAst]:
    from .. import hostnames

    raw = str(tok)
    tspan = scalar.span_at(tok.start_pos, len(raw))
    if raw.startswith("@"):
        m = _GROUP.fullmatch(raw)
        if not m:
            diags.append(diag("SBX046", tspan, target=shorten(raw),
                              why="a group name is lower-case letters, digits, - and _, after one @"))
            return None
        return HostRuleAst("", "group", m.group(1), 0, scalar.span, tspan, scalar.value)
    if "/" in raw or "://" in raw:
        diags.append(diag("SBX046", tspan, target=shorten(raw), why="a rule names a host, not a URL or a path",
                          hint="write the host alone, e.g. `allow example.org`"))
        return None
    host, port_text = raw, ""
    if raw.startswith("["):
        end = raw.find("]")
        if end > 0 and raw[end + 1:end + 2] == ":":
            host, port_text = raw[:end + 1], raw[end + 2:]
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
    port = 0
    if port_text or raw.endswith(":"):
        # ASCII digits only ([0-9], as for port rules): str.isdigit() also takes "²" (which
        # int() refuses) and other scripts' digits (which it reads as a number).
        if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 1 <= int(port_text) <= 65535:
            diags.append(diag("SBX018", tspan, what=f"\"{shorten(port_text)}\" in {shorten(raw)}: ports are 1-65535"))
            return None
        port = int(port_text)
    try:
        kind, value = hostnames.parse_pattern(host)
    except hostnames.BadTarget as e:
        diags.append(diag("SBX046", tspan, target=shorten(raw), why=str(e)))
        return None
    public = False
    if kind == "addr":
        canonical = hostnames.display("addr", value)
        public = hostnames.is_public(*value)
    elif kind == "wild":
        canonical = "*." + value
    else:
        canonical = value
    return HostRuleAst(host, kind, canonical, port, scalar.span, tspan, scalar.value, public)


GROUP_SOURCES = ("pip", "npm", "cargo", "go")
"""Tools whose configured registries ``from TOOL`` reads (compiler/hostgroups.py)."""


class _Word(str):
    """A word of a group item, shaped like the Lark token ``_host_rule`` reads."""

    start_pos: int = 0


def _word(text: str, at: int) -> _Word:
    w = _Word(text)
    w.start_pos = at
    return w


def parse_group_item(scalar: YScalar, diags: list[Diagnostic]) -> Optional[HostRuleAst]:
    """One item of a ``host_groups`` list: ``HOST[:PORT]`` or ``from TOOL``."""
    text = scalar.value
    words = text.split()
    if not words:
        diags.append(diag("SBX014", scalar.span, what="host group item", why="empty",
                          hint="write a host, e.g. `example.org`, or `from pip`"))
        return None
    if words[0] == "from":
        if len(words) != 2 or words[1] not in GROUP_SOURCES:
            got = words[1] if len(words) > 1 else ""
            diags.append(diag("SBX013", scalar.span_at(text.find(got) if got else 0, max(1, len(got))),
                              key="host_groups", value=shorten(got or text),
                              suggest=suggest(got, GROUP_SOURCES),
                              hint="`from TOOL` reads the registries of one of: " + ", ".join(GROUP_SOURCES)))
            return None
        at = text.find(words[1])
        return HostRuleAst("", "from", words[1], 0, scalar.span, scalar.span_at(at, len(words[1])), text)
    if len(words) != 1:
        diags.append(diag("SBX014", scalar.span_at(text.find(words[1])), what="host group item",
                          why="one host per item", hint="write each host as its own item"))
        return None
    if words[0].startswith("@"):
        diags.append(diag("SBX046", scalar.span, target=shorten(words[0]), why="a group cannot hold another group"))
        return None
    return _host_rule(scalar, _word(words[0], text.find(words[0])), diags)
