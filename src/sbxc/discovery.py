"""Where a policy file is looked for: the one answer the compiler, the plan cache, the
post-run watch and ``sbxc cache`` share.

A leaf (``os`` and ``sbxc.layout`` only): ``sbxc exec`` runs it on every cached run.

Discovery takes ``sandbox.policy.yaml`` in the current folder or the nearest parent that
holds one as a regular file (``exists``: followed links count, as the compiler reads
them); with none, ``builtin:default`` applies.
"""
from .fastos import os  # the hot path's os (sbxc.fastos)

from .layout import BUILTIN_PREFIX, DEFAULT_POLICY, POLICY_NAME


def candidates(cwd: str, stop: str = "") -> list:
    """Discovery's candidates, nearest first: ``sandbox.policy.yaml`` in ``cwd`` (absolute)
    and in each parent up to ``/``; with ``stop`` (a policy file), only those nearer than it."""
    out = []
    d = cwd
    while True:
        cand = (d.rstrip("/") or "") + "/" + POLICY_NAME
        if cand == stop:
            return out
        out.append(cand)
        parent = os.path.dirname(d)
        if parent == d:
            return out
        d = parent


def discover(cwd: str, exists=os.path.isfile) -> tuple[str, str]:
    """(the nearest policy file, or ``builtin:default``; how it was found)."""
    cwd = os.path.abspath(cwd)
    for cand in candidates(cwd):
        if exists(cand):
            d = os.path.dirname(cand)
            where = "in the current folder" if d == cwd else f"in {d}, a parent of the current folder"
            return cand, f"found {where}"
    return DEFAULT_POLICY, f"no {POLICY_NAME} in {cwd} or its parents; using {DEFAULT_POLICY}"


def locate(policy, cwd: str, exists=os.path.isfile) -> tuple[str, str]:
    """(the policy the compiler loads for ``--policy`` ``policy``, None: discovery; why):
    an absolute path or a ``builtin:NAME``."""
    if policy is None:
        return discover(cwd, exists)
    if policy.startswith(BUILTIN_PREFIX):
        return policy, "named on the command line"
    return os.path.normpath(os.path.join(cwd, policy)), "named on the command line"


def project_of(start: str) -> str:
    """The project folder for ``start`` as a real path: the folder of the policy file
    discovery finds from there (its ``project:`` key aside), else ``start`` itself."""
    real = os.path.realpath(start)
    found, _why = discover(real)
    return real if found.startswith(BUILTIN_PREFIX) else os.path.dirname(found)
