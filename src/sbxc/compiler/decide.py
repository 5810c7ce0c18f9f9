"""The decision model: for any path, which access a plan gives and which rule decided it.

Every backend is tested against this function: a live sandbox, an SBPL evaluator and
this model must answer the same cases the same way (or the backend's report must say
``narrowed``/``partial`` for the difference, and only ever towards less access).
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable, Optional

from .plan import MASK, NONE, READ, TMPFS, WRITE, Plan, PathRule, is_within, path_depth

# Operations a case can ask about. ``read_host`` means: see the host's bytes at that path.
# ``write_host`` means: a change made there is visible on the host after the run.
# ``write_private`` means: the command may create or change files there, and they vanish.
OPS = ("read", "list", "exec", "write", "create", "delete", "connect")

_ALLOWED = {
    MASK: frozenset(),
    NONE: frozenset(),
    READ: frozenset({"read", "list", "exec", "connect"}),
    WRITE: frozenset({"read", "list", "exec", "write", "create", "delete", "connect"}),
    # tmpfs: an empty private folder. Nothing of the host is readable; writes stay private.
    TMPFS: frozenset({"list", "write", "create", "delete"}),
}


@dataclass(frozen=True, slots=True)
class Decision:
    access: str
    """``mask``, ``tmpfs``, ``read``, ``write``, or ``none`` (no rule covers the path)."""
    rule: Optional[PathRule]
    """The deciding rule; ``None`` when no rule covers the path."""
    path: str
    """The query path after normalization (and resolution, when a resolver was given)."""

    def allows(self, op: str) -> bool:
        return op in _ALLOWED[self.access]


def normalize_query(path: str, resolve: Optional[Callable[[str], str]] = None) -> str:
    """Absolute, ``..``/``.``/duplicate-slash/trailing-slash free; symlinks resolved if asked.

    Without a resolver ``..`` is folded lexically, which is what the kernel does only when
    no component is a symlink: pass ``os.path.realpath`` (or a host-facts lookup) otherwise.
    """
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    if resolve is not None:
        path = resolve(path)
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    return path


def decide(plan: Plan, path: str, resolve: Optional[Callable[[str], str]] = None) -> Decision:
    """The rule on the deepest path containing ``path`` decides (SPEC §2).

    ``plan.fs`` holds one rule per path (normalize already settled same-path pairs by
    strictness), so the deepest containing rule is unique.
    """
    q = normalize_query(path, resolve)
    # The deepest rule containing q is the rule on q's longest ancestor-or-self path:
    # walking up q costs its depth, where scanning plan.fs made every backend quadratic.
    by_path = _rules_by_path(plan.fs)
    p = q
    while True:
        rule = by_path.get(p)
        if rule is not None:
            return Decision(rule.access, rule, q)
        if p == "/":
            return Decision(NONE, None, q)
        p = posixpath.dirname(p)


_BY_PATH: dict = {}


def _rules_by_path(fs: tuple) -> dict:
    """path -> rule for ``fs`` (the first rule wins, as the scan did), cached for recent plans.
    The entry keeps ``fs`` itself, so an id is never mistaken for a later tuple's."""
    hit = _BY_PATH.get(id(fs))
    if hit is not None and hit[0] is fs:
        return hit[1]
    by_path: dict = {}
    for rule in fs:
        by_path.setdefault(rule.path, rule)
    if len(_BY_PATH) >= 16:
        _BY_PATH.pop(next(iter(_BY_PATH)))
    _BY_PATH[id(fs)] = (fs, by_path)
    return by_path


def allowed(plan: Plan, path: str, op: str, resolve: Optional[Callable[[str], str]] = None) -> bool:
    return decide(plan, path, resolve).allows(op)
