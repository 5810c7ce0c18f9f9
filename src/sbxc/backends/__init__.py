"""Backends: pure functions from (Plan, HostFacts) to a backend plan and its verdicts.

Each module defines ``lower(plan, host) -> Lowered``. ``data`` is JSON-able and is what
the runtime for that backend consumes; ``verdicts`` has one entry per rule (and per
global setting) saying what the backend really enforces (SPEC §3). No module here
touches the disk, the environment or the clock.
"""
from __future__ import annotations

from ..layout import BACKENDS
from .lowered import Lowered  # noqa: F401  (the registry's callers take it from here)

_MODULES = {
    "bwrap": "sbxc.backends.bwrap",
    "landlock": "sbxc.backends.landlock",
    "sandbox-exec": "sbxc.backends.sbpl",
    "oci": "sbxc.backends.oci",
}


def module_name(backend: str) -> str:
    return _MODULES[backend]


def _module(backend: str):
    return __import__(_MODULES[backend], fromlist=["lower"])


def listing_dirs(backend: str, plan) -> tuple:
    """Folders whose entries ``backend`` needs (as ``HostFacts.listings``) to lower ``plan``;
    the caller gathers them from the host before calling ``lower``."""
    fn = getattr(_module(backend), "listing_dirs", None)
    return tuple(fn(plan)) if fn is not None else ()


def lower(backend: str, plan, host) -> Lowered:
    """Pure: ``host`` already carries every fact the backend needs (see ``listing_dirs``)."""
    return _module(backend).lower(plan, host)
