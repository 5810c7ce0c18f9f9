"""The enforcement report's unit (SPEC §3): what one backend really does with one rule.

A leaf: backends make verdicts, the compiler renders them, the plan file stores them.
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
    """The ``Span`` (sbxc.compiler.plan) of the rule the verdict is about."""

    def line(self) -> str:
        text = self.status if not self.why else f"{self.status}: {self.why}"
        return f"{self.subject}: {text}"


HOST_MOUNTS = "mounts the host makes during a run"
"""The report's subject for what becomes of a mount the host adds while the command runs."""


def verdict(backend: str, subject: str, status: str, span, why: str = "") -> Verdict:
    """The one way to make a verdict: a status other than ``enforced`` needs its reason."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    if status != ENFORCED and not why:
        raise ValueError(f"a {status} verdict needs a reason")
    return Verdict(backend, subject, status, why, span)
