"""The enforcement report's verdict: what one backend really does with one rule (SPEC §3).

A leaf, so that backends (which make verdicts), the compiler (which renders them) and the
runtime (which refuses on some) share the type without importing one another.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    span: object
    """The ``Span`` of the rule or setting (a leaf imports no IR type to name it)."""

    def line(self) -> str:
        text = self.status if not self.why else f"{self.status}: {self.why}"
        return f"{self.subject}: {text}"


def verdict(backend: str, subject: str, status: str, span, why: str = "") -> Verdict:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    if status != ENFORCED and not why:
        raise ValueError(f"a {status} verdict needs a reason")
    return Verdict(backend, subject, status, why, span)
