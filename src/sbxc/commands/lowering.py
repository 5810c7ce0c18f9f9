"""Lowering a plan for several backends at once, for the enforcement report (compile --check)."""
from __future__ import annotations

from dataclasses import dataclass

from ..backends import _MODULES, lower
from ..verdict import Verdict


@dataclass(frozen=True, slots=True)
class BackendReport:
    """What one backend does with a plan; ``unavailable`` set when it could not lower it."""

    backend: str
    verdicts: tuple[Verdict, ...] = ()
    unavailable: str = ""
    lowered: object = None
    """The backend's ``Lowered`` (for writing the plan without lowering twice)."""


def lower_all(plan, host, backends) -> list[BackendReport]:
    """Lower ``plan`` for each backend; a backend that is missing or fails is reported, not raised."""
    out = []
    for name in backends:
        try:
            lowered = lower(name, plan, host)
        except ModuleNotFoundError as e:
            if e.name == _MODULES[name]:
                out.append(BackendReport(name, unavailable=f"backend module {e.name} is not part of this build"))
                continue
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}"))
            continue
        except Exception as e:  # a backend bug must not hide the other backends' reports
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}"))
            continue
        out.append(BackendReport(name, tuple(lowered.verdicts), lowered=lowered))
    return out


