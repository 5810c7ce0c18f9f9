"""From a policy to a plan file: the one pipeline ``compile``, ``compile -o`` and the
plan cache (``exec`` on a miss) share.

It is the one place that joins the layers: the compiler makes the Plan, the runtime's
probe gathers the host facts a backend asks for (folder listings), the pure backend
lowers, and the result is laid out as a plan file. The runtime never imports this
module; ``exec`` hands ``compile_for_exec`` to the plan cache.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import backends
from ..verdict import Verdict


@dataclass(frozen=True, slots=True)
class BackendReport:
    """What one backend does with a plan; ``unavailable`` set when it could not lower it."""

    backend: str
    verdicts: tuple[Verdict, ...] = ()
    unavailable: str = ""
    lowered: object = None
    """The backend's ``Lowered`` (for writing the plan without lowering twice)."""


def with_listings(backend: str, plan, host, lister=None):
    """``host`` plus the folder listings ``backend`` needs for ``plan`` (Landlock grants
    the entries of a folder above a stricter rule one by one). Listings already present
    are kept, so golden tests can give them; ``lister`` answers from a fake file system."""
    wanted = backends.listing_dirs(backend, plan)
    have = {d for d, _ in (host.listings or ())}
    missing = [d for d in wanted if d not in have]
    if not missing:
        return host
    if lister is None:
        from ..runtime.probe import dir_listings as lister
    return dataclasses.replace(host, listings=tuple(sorted(tuple(host.listings or ()) + tuple(lister(missing)))))


def lower(backend: str, plan, host, lister=None):
    """Gather what ``backend`` needs from the host, then lower (pure)."""
    return backends.lower(backend, plan, with_listings(backend, plan, host, lister))


def lower_all(plan, host, names, lister=None) -> list[BackendReport]:
    """Lower ``plan`` for each backend; a backend that is missing or fails is reported, not raised."""
    out = []
    for name in names:
        try:
            lowered = lower(name, plan, host, lister)
        except ModuleNotFoundError as e:
            if e.name == backends.module_name(name):
                out.append(BackendReport(name, unavailable=f"backend module {e.name} is not part of this build"))
                continue
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}"))
            continue
        except Exception as e:  # a backend bug must not hide the other backends' reports
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}"))
            continue
        out.append(BackendReport(name, tuple(lowered.verdicts), lowered=lowered))
    return out
