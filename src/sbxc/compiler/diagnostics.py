"""Diagnostics: the registry of stable codes, the Diagnostic record and its renderers.

Every message a user can get from the compiler is listed in ``CODES`` with its severity
and text template, so codes stay stable and docs/policy.md can list them all. A
diagnostic is data; rendering happens once, here.
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from .plan import Span

ERROR = "error"
WARNING = "warning"

# code -> (severity, message template). Templates use str.format with keyword fields.
CODES: dict[str, tuple[str, str]] = {
    # reading and YAML structure
    "SBX001": (ERROR, "cannot read {what}: {why}"),
    "SBX002": (ERROR, "file is too large (more than {limit} bytes)"),
    "SBX003": (ERROR, "file is not valid UTF-8 (byte 0x{byte:02x})"),
    "SBX004": (ERROR, "file contains a {what} character"),
    "SBX005": (ERROR, "YAML syntax error: {why}"),
    "SBX006": (ERROR, "document is too {what} (limit {limit})"),
    "SBX007": (ERROR, "duplicate key \"{key}\""),
    "SBX008": (ERROR, "a policy file must be a mapping of keys, not {got}"),
    "SBX009": (ERROR, "a policy file holds one YAML document, found more"),
    # keys, types, values
    "SBX010": (ERROR, "unknown key \"{key}\"{where}{suggest}"),
    "SBX011": (ERROR, "{key}: expected {expected}, got {got}"),
    "SBX012": (ERROR, "unknown verb \"{verb}\"{suggest}"),
    "SBX013": (ERROR, "{key}: unknown value \"{value}\"{suggest}"),
    "SBX014": (ERROR, "{what}: {why}"),
    "SBX015": (ERROR, "unknown syscall \"{name}\"{suggest}"),
    "SBX016": (ERROR, "missing required key \"{key}\""),
    "SBX017": (ERROR, "unsupported policy format sbxc: {value}; this sbxc reads format 1"),
    "SBX018": (ERROR, "invalid port {what}"),
    "SBX019": (ERROR, "{key}: value {value} is out of range ({range})"),
    "SBX020": (ERROR, "invalid environment variable {what} \"{name}\""),
    # extends and locked
    "SBX021": (ERROR, "cannot extend \"{target}\": {why}{suggest}"),
    "SBX022": (ERROR, "extends cycle: {chain}"),
    "SBX023": (ERROR, "\"{key}\" is locked and this {change}"),
    "SBX024": (ERROR, "extends chain is deeper than {limit} files"),
    "SBX025": (ERROR, "policy file {path} is not safe to use: {why}"),
    # YAML typing of plain scalars
    "SBX026": (ERROR, "{key}: YAML reads {text} as {how}, not as text"),
    "SBX027": (ERROR, "{key}: YAML readers disagree on the number {text}: {how}"),
    # variables and paths
    "SBX030": (ERROR, "unknown variable \"{{{name}}}\"{suggest}"),
    "SBX031": (ERROR, "environment variable ${name} is not set"),
    "SBX032": (ERROR, "malformed variable: {why}"),
    "SBX029": (ERROR, "\"{written}\" is {what}, which sbxc does not expand{suggest}"),
    "SBX033": (ERROR, "path must be absolute after expansion: \"{path}\""),
    "SBX034": (ERROR, "{path} does not exist"),
    "SBX035": (ERROR, "{verb} {path}: \"{link}\" is a symlink (to {target}); a writable rule through a symlink could point writes anywhere"),
    "SBX036": (ERROR, "cache.root: {why}"),
    "SBX037": (ERROR, "project folder {path} {why}"),
    "SBX039": (ERROR, "tmpfs {path}: the path is a {kind}, not a folder"),
    "SBX038": (ERROR, "the value holds a NUL, a line break or a character that is not valid Unicode"),
    # rule sets
    "SBX040": (WARNING, "duplicate rule: {subject} is already given"),
    "SBX041": (WARNING, "conflicting rules on {path}: {a} and {b}; the stricter \"{winner}\" wins"),
    "SBX042": (WARNING, "mask {path}: the path is missing and its parent is writable, so the command could create it"),
    "SBX043": (WARNING, "network rule {rule} is already covered"),
    "SBX044": (WARNING, "env.pass \"{glob}\" lets secrets through, e.g. {example}"),
    "SBX046": (ERROR, "invalid host \"{target}\": {why}"),
    "SBX047": (ERROR, "unknown host group \"@{name}\"{suggest}"),
    "SBX048": (WARNING, "network rule {rule} can never be used: {why}"),
    "SBX049": (WARNING, "{rule}: {why}"),
    "SBX045": (ERROR, "workspace.stage \"{entry}\": {why}"),
    "SBX028": (WARNING, "\"{written}\" looks like a Windows variable, which sbxc does not expand; the path keeps it as written{suggest}"),
    # enforcement (from the backends' reports)
    "SBX050": (ERROR, "{backend}: {subject}: not enforceable: {why}"),
    "SBX051": (ERROR, "{backend}: {subject}: partial: {why} (--strict)"),
    "SBX052": (ERROR, "backend {backend} is not available in this build: {why}"),
    "SBX053": (ERROR, "toolchain configuration {path} is not safe to use for @{group}: {why}"),
    "SBX054": (WARNING, "host group @{group}: {source} names \"{host}\", which no rule may name ({why}); left out"),
    "SBX056": (ERROR, "{verb} {path}: {why}"),
    "SBX055": (ERROR, "!!{tag} \"{text}\" is not a {tag} that YAML 1.2 knows: YAML readers disagree on what it means"),
    "SBX057": (ERROR, "{verb} {path}: it leads through a symlink to {real}, {hider}: a rule reached through a "
                      "link must not open what the policy hides or does not grant around its real path"),
}


@dataclass(frozen=True, slots=True)
class Related:
    span: Span
    message: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    severity: str
    message: str
    span: Optional[Span]
    hint: str = ""
    related: tuple[Related, ...] = ()

    def to_dict(self) -> dict:
        d = {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
            "related": [{"span": _span_dict(r.span), "message": r.message} for r in self.related],
        }
        d["span"] = _span_dict(self.span) if self.span else None
        return d


def _span_dict(s: Span) -> dict:
    return {"file": s.file, "line": s.line, "col": s.col, "end_line": s.end_line, "end_col": s.end_col}


def diag(code: str, span: Optional[Span], *, hint: str = "", related: Iterable[Related] = (), **fields) -> Diagnostic:
    severity, template = CODES[code]
    return Diagnostic(code, severity, template.format(**fields), span, hint, tuple(related))


def suggest(word: str, choices: Iterable[str], *, quote: str = "\"") -> str:
    """'; did you mean "X"?' for the closest choice, or ''."""
    choices = list(choices)
    if not isinstance(word, str) or not choices:
        return ""
    best = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not best:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            best = [lowered[word.lower()]]
    return f"; did you mean {quote}{best[0]}{quote}?" if best else ""


def has_errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity == ERROR for d in diags)


def sort_key(d: Diagnostic):
    s = d.span
    return (s.file if s else "", s.line if s else 0, s.col if s else 0, d.code, d.message)


def display_path(path: str, cwd: Optional[str]) -> str:
    if cwd and path.startswith("/"):
        rel = os.path.relpath(path, cwd)
        if not rel.startswith(".."):
            return rel
    return path


def _excerpt(span: Span, lines_of: Mapping[str, list[str]]) -> list[str]:
    lines = lines_of.get(span.file)
    if not lines or not (1 <= span.line <= len(lines)):
        return []
    text = lines[span.line - 1].replace("\t", " ")
    if len(text) > 200:
        return []
    width = 1
    if span.end_line == span.line and span.end_col > span.col:
        width = span.end_col - span.col
    width = max(1, min(width, len(text) - span.col + 1 if span.col <= len(text) else 1))
    return [f"  {text}", "  " + " " * (span.col - 1) + "^" + "~" * (width - 1)]


def render_text(diags: Iterable[Diagnostic], lines_of: Mapping[str, list[str]], cwd: Optional[str] = None) -> str:
    """``file:line:col: severity: message  [SBXnnn]``, the source line, a caret, hints, notes."""
    from ..printable import escaped

    return "".join(escaped(line, backslash=False) + "\n" for line in _render_lines(diags, lines_of, cwd))


def _render_lines(diags, lines_of, cwd) -> list:
    out: list[str] = []
    for d in diags:
        where = "sbxc"
        if d.span:
            where = f"{display_path(d.span.file, cwd)}:{d.span.line}:{d.span.col}" if d.span.line else display_path(d.span.file, cwd)
        out.append(f"{where}: {d.severity}: {d.message}  [{d.code}]")
        if d.span:
            out.extend(_excerpt(d.span, lines_of))
        for r in d.related:
            loc = f"{display_path(r.span.file, cwd)}:{r.span.line}:{r.span.col}" if r.span.line else display_path(r.span.file, cwd)
            out.append(f"{loc}: note: {r.message}")
            out.extend(_excerpt(r.span, lines_of))
        if d.hint:
            out.append(f"  hint: {d.hint}")
    return out


def render_json(diags: Iterable[Diagnostic]) -> list[dict]:
    return [d.to_dict() for d in diags]


def dumps_json(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
