"""Backends: pure functions from (Plan, HostFacts) to a backend plan and its verdicts.

Each module defines ``lower(plan, host) -> Lowered``. ``data`` is JSON-able and is what
the runtime for that backend consumes; ``verdicts`` has one entry per rule (and per
global setting) saying what the backend really enforces (SPEC §3). No module here
touches the disk, the environment or the clock.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..compiler.report import Verdict

BACKENDS = ("bwrap", "landlock", "sandbox-exec")
_MODULES = {
    "bwrap": "sbxc.backends.bwrap",
    "landlock": "sbxc.backends.landlock",
    "sandbox-exec": "sbxc.backends.sbpl",
}


@dataclass(frozen=True, slots=True)
class Lowered:
    backend: str
    data: dict
    verdicts: tuple[Verdict, ...]


def lower(backend: str, plan, host) -> Lowered:
    module = __import__(_MODULES[backend], fromlist=["lower"])
    # A backend may need host facts that depend on the plan (Landlock: the entries of
    # folders it splits). ``complete_host`` gathers them at compile time, before the pure
    # ``lower``; facts already present (golden tests) are kept.
    complete = getattr(module, "complete_host", None)
    if complete is not None:
        host = complete(plan, host)
    return module.lower(plan, host)
