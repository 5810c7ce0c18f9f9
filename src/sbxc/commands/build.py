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
    internal: bool = False
    """``unavailable`` is a bug of sbxc's (the backend raised), not something of this build
    or of the policy: the command reports it as an internal error (exit 3)."""


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
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}", internal=True))
            continue
        except Exception as e:  # a backend bug must not hide the other backends' reports
            out.append(BackendReport(name, unavailable=f"internal error: {type(e).__name__}: {e}", internal=True))
            continue
        out.append(BackendReport(name, tuple(lowered.verdicts), lowered=lowered))
    return out


def compile_for_exec(policy, backend, network, environ, cwd: str, gate=None) -> dict:
    """The plan cache's miss (``sbxc exec`` without ``--plan``): compile ``policy`` (None:
    discovery) with the command line's flags into a plan file, as a dict, with what the
    cache key needs: ``{"plan", "sources": [[path, sha256]], "env": [[name, value]]}``.
    A policy with errors prints its diagnostics and raises a Refusal (exit 125). The
    runtime never imports this module: ``sbxc.commands.exec`` hands this function in.
    ``gate(path)``: called before each policy file is read (see ``compile_policy``)."""
    import json
    import sys

    from ..compiler.api import compile_policy
    from ..compiler.diagnostics import ERROR, diag, render_text
    from ..compiler.report import NOT_ENFORCEABLE
    from ..planfile import build, dumps
    from ..runtime.errors import Refusal, one_line
    from ..runtime.probe import probe_host

    host = probe_host(environ)
    overrides = {}
    if backend:
        overrides["backend"] = backend
    if network:
        overrides["network"] = network == "on"
    res = compile_policy(policy, cwd=cwd, environ=environ, host=host, overrides=overrides, gate=gate)
    diags = list(res.diagnostics)
    lowered = None
    if res.plan is not None:
        try:
            lowered = lower(res.backend, res.plan, host)
        except ImportError as e:
            raise Refusal(f"the {res.backend} backend is not part of this sbxc ({e})", "use another backend (sbxc doctor)") from None
        for v in lowered.verdicts:
            if v.status == NOT_ENFORCEABLE:
                diags.append(diag("SBX050", v.span, backend=res.backend, subject=v.subject, why=v.why))
    errors = [d for d in diags if d.severity == ERROR]
    if errors or res.plan is None or lowered is None:
        sys.stderr.write(render_text(errors or diags, res.lines, cwd))
        raise Refusal(f"the policy {one_line(res.policy, 200)} has errors", "fix them (sbxc compile --check)")
    from ..compiler.runwarnings import run_warnings

    warnings = run_warnings(res.plan, diags, res.backend, host)
    pf = json.loads(dumps(build(res.plan, host, res.backend, lowered.data, lowered.verdicts, warnings)))
    return {
        "plan": pf,
        # Host groups were read from toolchain configuration files: a change there (or a
        # file that appears) compiles the plan again, as a policy file's change does.
        "sources": [[p, d] for p, d in res.sources] + [
            [p, d] for p, d in res.plan.network.inputs if p.startswith("/") and (len(d) == 64 or d == "")],
        "env": [[k, v] for k, v in res.env_used.items()],
    }
