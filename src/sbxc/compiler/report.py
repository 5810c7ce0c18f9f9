"""The enforcement report's renderers: what each backend really does with each rule (SPEC §3).

Backends never drop what they cannot express: every rule ends in exactly one verdict,
made through ``sbxc.verdict.verdict``; the renderers live here, so there is one format.
"""
from __future__ import annotations

from ..verdict import (ENFORCED, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED,  # noqa: F401 (backends' imports)
                       STATUSES, Verdict, verdict)
from .plan import Span


def _where(span: Span, cwd) -> str:
    from .diagnostics import display_path

    if not span.line:
        return display_path(span.file, cwd) if span.file != "<builtin>" else "(implied)"
    return f"{display_path(span.file, cwd)}:{span.line}:{span.col}"


def _summary(r) -> str:
    counts = {s: 0 for s in STATUSES}
    for v in r.verdicts:
        counts[v.status] += 1
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no rules"


def render_report_text(reports, selected: str, cwd=None, skipped=(), verbose: bool = True) -> str:
    """The enforcement report. ``verbose``: every verdict of every backend. Otherwise one
    summary line per backend and, for the selected backend only, the verdicts that are
    not plainly ``enforced``: what a person has to read before running a command."""
    lines = ["enforcement report:"]
    for r in reports:
        mark = " (selected)" if r.backend == selected else ""
        if r.unavailable:
            lines.append(f"  {r.backend}{mark}: unavailable: {r.unavailable}")
            continue
        lines.append(f"  {r.backend}{mark}: {_summary(r)}")
        for v in r.verdicts:
            if verbose or (r.backend == selected and v.status != ENFORCED):
                lines.append(f"    {_where(v.span, cwd)}: {v.line()}")
    if skipped:
        lines.append("optional rules skipped on this host:")
        for s in skipped:
            lines.append(f"    {_where(s.span, cwd)}: {s.access}? {s.path}: skipped: {s.reason}")
    if not verbose:
        lines.append("(every rule on every backend: --verbose)")
    return "\n".join(lines) + "\n"


def report_json(reports, selected: str) -> dict:
    out = {}
    for r in reports:
        if r.unavailable:
            out[r.backend] = {"selected": r.backend == selected, "unavailable": r.unavailable}
            continue
        out[r.backend] = {
            "selected": r.backend == selected,
            "verdicts": [{"subject": v.subject, "status": v.status, "why": v.why,
                          "span": f"{v.span.file}:{v.span.line}:{v.span.col}"} for v in r.verdicts],
        }
    return out


def network_effect(mode: str, backend: str, host) -> str:
    """Why a network setting cannot take effect as written on ``host`` ("" when it can).

    ``mode`` is the plan's ``on``/``off``/``rules``/``hosts``. Network on needs no enforcement.
    """
    if mode == "on":
        return ""
    if mode == "hosts":
        return _hosts_effect(backend, host)
    if backend == "sandbox-exec":
        return "" if host.platform == "darwin" else "(no effect: sandbox-exec needs macOS)"
    if host.platform != "linux":
        return f"(no effect: {backend} needs Linux)"
    if backend == "bwrap":
        if not host.bwrap:
            return "(no effect: bwrap is not installed)"
        if not host.userns:
            return "(no effect: bwrap cannot create namespaces here)"
        if mode == "rules":
            return "(narrowed: bwrap cannot allow single ports; the command gets no network)"
        return ""
    if backend == "oci":
        if mode == "rules":
            return "(narrowed: an OCI runtime cannot allow single ports; the command gets no network)"
        return ""
    if backend == "landlock":
        if host.landlock_abi <= 0:
            return "(no effect: Landlock is not available on this kernel)"
        if mode == "rules" and host.landlock_abi < 4:
            return f"(no effect: per-port rules need Landlock ABI 4; this kernel has {host.landlock_abi})"
        if mode == "off" and host.landlock_abi < 4 and not host.seccomp:
            return "(no effect: needs Landlock ABI 4 or seccomp to refuse sockets)"
        return ""
    return ""


# ------------------------------------------------------------------ SARIF 2.1.0

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
SARIF_TOOL = "sbxc"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "note": "note"}


def _sarif_location(span, cwd) -> dict:
    from .diagnostics import display_path

    loc = {"artifactLocation": {"uri": _uri(display_path(span.file, cwd))}}
    if span.line:
        region = {"startLine": span.line, "startColumn": max(1, span.col)}
        if span.end_line >= span.line and span.end_line:
            region["endLine"] = span.end_line
            if span.end_col > 0 and (span.end_line > span.line or span.end_col > span.col):
                region["endColumn"] = span.end_col
        loc["region"] = region
    return {"physicalLocation": loc}


def _uri(path: str) -> str:
    """A relative path stays relative (code-scanning tools resolve it against the checkout);
    an absolute one becomes a file: URI. Characters a URI cannot hold are percent-encoded."""
    from urllib.parse import quote

    if path.startswith("/"):
        return "file://" + quote(path)
    return quote(path)


def render_sarif(diags, version: str, cwd=None) -> dict:
    """The diagnostics as one SARIF 2.1.0 run: a rule per SBX code that occurs (with its
    message template from the registry), a result per diagnostic, its span as the region.
    A diagnostic without a place in a file (``builtin:`` sources included) gets no
    location; related places become ``relatedLocations``."""
    from .diagnostics import CODES

    used = sorted({d.code for d in diags})
    index = {code: i for i, code in enumerate(used)}
    rules = [{"id": code, "name": code,
              "shortDescription": {"text": CODES[code][1]},
              "defaultConfiguration": {"level": _SARIF_LEVEL.get(CODES[code][0], "warning")}} for code in used]
    results = []
    for d in diags:
        res = {"ruleId": d.code, "ruleIndex": index[d.code], "level": _SARIF_LEVEL.get(d.severity, "warning"),
               "message": {"text": d.message + (f" (hint: {d.hint})" if d.hint else "")}}
        if d.span is not None and _in_file(d.span):
            res["locations"] = [_sarif_location(d.span, cwd)]
        related = [r for r in d.related if _in_file(r.span)]
        if related:
            res["relatedLocations"] = [dict(_sarif_location(r.span, cwd), id=i, message={"text": r.message})
                                       for i, r in enumerate(related)]
        results.append(res)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {"name": SARIF_TOOL, "version": version, "rules": rules}},
            "results": results,
        }],
    }


def _in_file(span) -> bool:
    return bool(span.file) and span.file.startswith("/")


def _hosts_effect(backend: str, host) -> str:
    """What host rules become on ``backend`` here (print-config's effect column)."""
    if backend == "sandbox-exec":
        return ("(through sbxc's proxy; TCP connect to its localhost port only)" if host.platform == "darwin"
                else "(no effect: sandbox-exec needs macOS)")
    if host.platform != "linux":
        return f"(no effect: {backend} needs Linux)"
    if backend == "bwrap":
        if not host.bwrap or not host.userns:
            return "(no effect: bwrap cannot run here)"
        return "(through sbxc's proxy; the command's network namespace has loopback only)"
    if backend == "landlock":
        if host.landlock_abi < 4:
            return f"(no effect: host rules need Landlock ABI 4; this kernel has {host.landlock_abi})"
        return "(partial: through sbxc's proxy; TCP connect to the proxy's port only, on any address)"
    return ""
