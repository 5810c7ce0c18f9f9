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


def render_report_text(reports, selected: str, cwd=None, skipped=()) -> str:
    lines = ["enforcement report:"]
    for r in reports:
        mark = " (selected)" if r.backend == selected else ""
        if r.unavailable:
            lines.append(f"  {r.backend}{mark}: unavailable: {r.unavailable}")
            continue
        counts = {s: 0 for s in STATUSES}
        for v in r.verdicts:
            counts[v.status] += 1
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        lines.append(f"  {r.backend}{mark}: {summary or 'no rules'}")
        for v in r.verdicts:
            lines.append(f"    {_where(v.span, cwd)}: {v.line()}")
    if skipped:
        lines.append("optional rules skipped on this host:")
        for s in skipped:
            lines.append(f"    {_where(s.span, cwd)}: {s.access}? {s.path}: skipped: {s.reason}")
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
    if backend == "landlock":
        if host.landlock_abi <= 0:
            return "(no effect: Landlock is not available on this kernel)"
        if mode == "rules" and host.landlock_abi < 4:
            return f"(no effect: per-port rules need Landlock ABI 4; this kernel has {host.landlock_abi})"
        if mode == "off" and host.landlock_abi < 4 and not host.seccomp:
            return "(no effect: needs Landlock ABI 4 or seccomp to refuse sockets)"
        return ""
    return ""


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
