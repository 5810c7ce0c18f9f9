"""compile_policy: find the policy, load it with everything it extends, check it, build the Plan.

This is the one entry point of the compiler; ``sbxc compile``, ``print-config`` and
``exec --policy`` all go through it. It never raises for anything a user can write.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

from .. import discovery
from ..hostfacts import HostFacts
from ..layout import POLICY_NAME
from .backend_choice import choose_backend
from .diagnostics import Diagnostic, diag, has_errors, sort_key
from .hostpaths import HostPaths
from .merge import Merged, Setting, load_chain, resolve
from .normalize import Context, normalize
from .plan import Plan, Span
from .setting_rows import SettingRow, setting_rows
from .settings import BACKEND_CHOICES

COMMAND_LINE = Span("<command line>", 0, 0)
# A file that could not be loaded, is of another format, or whose extends chain loops,
# runs too deep, or may not be trusted. A missing `sbxc:` key or one extends target that
# cannot be found is not fatal: the files that did load are still checked, so every
# problem comes out in one run.
_FATAL = frozenset({"SBX001", "SBX002", "SBX003", "SBX004", "SBX005", "SBX006", "SBX008", "SBX009",
                    "SBX017", "SBX022", "SBX024", "SBX025"})


@dataclass(slots=True)
class CompileResult:
    plan: Optional[Plan]
    """None when there are errors."""
    diagnostics: list[Diagnostic]
    sources: list[tuple[str, str]]
    """(path, sha256) of every policy file read, builtins as ``builtin:NAME``."""
    env_used: dict[str, Optional[str]]
    """Every environment variable expansion read, with its value (None: unset)."""
    settings: list[SettingRow]
    backend: str
    """The backend the plan is for, ``auto`` resolved for ``host``."""
    backend_reason: str
    policy: str
    """The top policy file: an absolute path or ``builtin:default``."""
    policy_reason: str
    """How it was found, e.g. ``no sandbox.policy.yaml in /x or its parents``."""
    lines: dict[str, list[str]] = field(default_factory=dict)
    """Source lines per file, for rendering diagnostics with a caret."""

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.diagnostics)


def discover(cwd: str, exists=os.path.isfile) -> tuple[str, str]:
    """The nearest ``sandbox.policy.yaml`` in ``cwd`` or a parent, else ``builtin:default``
    (``sbxc.discovery``: the one answer every layer shares)."""
    return discovery.discover(cwd, exists)


def _apply_overrides(m: Merged, overrides: Mapping, diags: list[Diagnostic]) -> None:
    for key in ("backend", "network"):
        if key not in overrides or overrides[key] is None:
            continue
        v = overrides[key]
        if key == "backend" and v not in BACKEND_CHOICES:
            from .diagnostics import suggest

            diags.append(diag("SBX013", COMMAND_LINE, key="--backend", value=str(v), suggest=suggest(str(v), BACKEND_CHOICES)))
            continue
        if key == "network" and not isinstance(v, bool):
            diags.append(diag("SBX011", COMMAND_LINE, key="--network", expected="true or false", got=repr(v)))
            continue
        prev = m.settings.get(key)
        s = Setting(key, v, COMMAND_LINE, "command line")
        if prev is not None:
            s.beat = [(prev.value, prev.span, prev.origin)] + prev.beat
        m.settings[key] = s


def compile_policy(policy_path: Optional[str], *, cwd: str, environ: Mapping[str, str], host: HostFacts,
                   overrides: Optional[dict] = None, paths: Optional[HostPaths] = None,
                   gate=None) -> CompileResult:
    """Compile the policy at ``policy_path`` (None: discover it from ``cwd``).

    ``overrides`` holds command-line flags (``backend``: str, ``network``: bool); they win
    over every file. ``paths`` answers filesystem questions (tests pass a fake).
    ``gate(path)`` runs before each user policy file is read and may raise (``load_chain``).
    """
    import gc

    # Compiling allocates many small objects and no reference cycles worth collecting
    # early; the collector's full passes would make large policies cost more than linear.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile(policy_path, cwd=cwd, environ=environ, host=host, overrides=overrides, paths=paths, gate=gate)
    finally:
        if was_enabled:
            gc.enable()


def _compile(policy_path, *, cwd, environ, host, overrides, paths, gate=None) -> CompileResult:
    overrides = overrides or {}
    paths = paths or HostPaths()
    diags: list[Diagnostic] = []
    cwd = os.path.abspath(cwd)
    root, why = discovery.locate(policy_path, cwd, lambda p: paths.kind(paths.realpath(p)) == "file")
    root_dir = cwd if root.startswith("builtin:") else os.path.dirname(root)

    m = load_chain(root, diags, gate=gate)
    if policy_path is None:
        # Discovery walks up to /, through folders such as /tmp where anyone can leave a
        # sandbox.policy.yaml; say where the refused file came from.
        diags[:] = [replace(d, hint=f"it was found by looking for {POLICY_NAME} in {cwd} and its parents; {d.hint}")
                    if d.code == "SBX025" and d.span is not None and d.span.file == root and not d.span.line
                    else d for d in diags]
    _apply_overrides(m, overrides, diags)
    ctx = Context(environ=environ, uid=host.uid, home_fallback=host.home, cwd=cwd, paths=paths)
    settings = resolve(m)
    sources = tuple((s.path, s.sha256) for s in m.sources)
    plan = None
    # Semantic checks still run after key or rule errors (every problem in one run), but
    # not when a file could not be read at all: its absence would only cause noise.
    if not any(d.code in _FATAL for d in diags):
        plan = normalize(settings, ctx, root_dir, sources)
        diags.extend(ctx.diags)
    backend, reason = choose_backend(settings.backend.value, host)
    if has_errors(diags):
        plan = None
    diags.sort(key=sort_key)
    return CompileResult(
        plan=plan,
        diagnostics=diags,
        sources=list(sources),
        env_used=dict(sorted(ctx.env_used.items())),
        settings=setting_rows(m, plan),
        backend=backend,
        backend_reason=reason,
        policy=root,
        policy_reason=why,
        lines={s.path: s.lines for s in m.sources},
    )
