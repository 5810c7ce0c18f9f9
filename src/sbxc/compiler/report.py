"""The enforcement report: what each backend really does with each rule (SPEC §3).

Backends never drop what they cannot express: every rule ends in exactly one verdict,
made through ``verdict``; the renderers live here too, so there is one format.
"""
from __future__ import annotations

from dataclasses import dataclass

from .plan import Span

ENFORCED = "enforced"
NARROWED = "narrowed"
PARTIAL = "partial"
NOT_ENFORCEABLE = "not enforceable"
SKIPPED = "skipped"
STATUSES = (ENFORCED, NARROWED, PARTIAL, NOT_ENFORCEABLE, SKIPPED)


@dataclass(frozen=True, slots=True)
class Verdict:
    backend: str
    subject: str
    """What the verdict is about, as a person reads it: ``mask ~/.ssh``, ``network: false``."""
    status: str
    why: str
    """Empty for ``enforced``; otherwise the reason, or what a command can still do."""
    span: Span

    def line(self) -> str:
        text = self.status if not self.why else f"{self.status}: {self.why}"
        return f"{self.subject}: {text}"


def verdict(backend: str, subject: str, status: str, span: Span, why: str = "") -> Verdict:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    if status != ENFORCED and not why:
        raise ValueError(f"a {status} verdict needs a reason")
    return Verdict(backend, subject, status, why, span)
