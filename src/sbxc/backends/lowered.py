"""What every backend's ``lower`` returns (kept apart from the registry in __init__, which
imports the backends: a backend importing the registry would make a cycle)."""
from __future__ import annotations

from dataclasses import dataclass

from ..verdict import Verdict


@dataclass(frozen=True, slots=True)
class Lowered:
    backend: str
    data: dict
    """JSON-able: what the runtime for that backend consumes."""
    verdicts: tuple[Verdict, ...]
    """One per rule and per global setting: what the backend really enforces (SPEC §3)."""
