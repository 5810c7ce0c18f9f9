"""The compiled plan file: what ``sbxc compile -o`` writes and ``sbxc exec --plan`` reads.

Layout (JSON, keys sorted, so the same input gives the same bytes)::

    {
      "format": "sbxc-plan/1",
      "sbxc": "<version>",
      "backend": "bwrap" | "landlock" | "sandbox-exec",
      "host": {HostFacts},                  # the facts the plan assumed
      "sources": [[path, sha256], ...],     # policy files it came from
      "ir": {Plan as a dict},               # for print-config, reports, debugging
      "runtime": {...},                     # what every runtime needs, see runtime_section
      "lowered": {...},                     # the backend's own plan (argv, rules, profile ...)
      "report": [[subject, status, why, "file:line:col"], ...]
    }

This module only builds and serializes; the runtime reads the file with ``json`` alone
(or from its marshal cache) and never imports the compiler.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from .layout import PLAN_FORMAT as FORMAT, VERSION

# A leaf: the plan (sbxc.compiler.plan.Plan) and host facts (sbxc.hostfacts.HostFacts) come
# in as objects; nothing here imports the compiler, so the runtime can import this module.


def runtime_section(plan) -> dict:
    """What the runtime needs whatever the backend: environment, cache, checks, network."""
    return {
        "project": plan.project,
        "env_pass": list(plan.env.passed),
        "env_set": [list(kv) for kv in plan.env.set],
        "cache": {
            "enabled": plan.cache.enabled,
            "root": plan.cache.root,
            "dir": plan.cache.dir,
            "env": [list(kv) for kv in plan.cache.env],
            "required": plan.cache.required,
        },
        "network": plan.network.mode,
        # Re-checked at run time: a path that became a symlink (or changed kind) since
        # compile time makes the run refuse (125); so does a masked path that was missing
        # then and exists now (the plan has nothing to hide it with). Not the cache's rules:
        # runtime/cachedir checks those folders itself and falls back to a throwaway cache.
        # Each entry: [path, kind, access, span of its rule ("file:line:col", "" for an
        # implied rule without a place), the path as the rule wrote it], so that a refusal
        # names the rule. A runtime reads the first three of older plan files (no span).
        "checks": [[r.path, r.kind, r.access, str(r.span) if r.span.line else "", r.written or r.path]
                   for r in plan.fs if r.origin != "cache"],
        # Optional rules skipped because their path was missing: when one appears, a cached
        # plan is stale (compiled again), though running it would only grant less.
        # Per-session workspaces (runtime/sessions): quotas, the pool's size, what is staged.
        "workspace": {k: ([list(x) for x in v] if k == "stage" else v) for k, v in plan.workspace if k != "span"},
        "skipped": sorted({s.path for s in plan.skipped if s.path.startswith("/")}),
    }


def build(plan, host, backend: str, lowered: dict, verdicts) -> dict:
    return {
        "format": FORMAT,
        "sbxc": VERSION,
        "backend": backend,
        "host": host.to_dict(),
        "sources": [list(s) for s in plan.sources],
        "ir": asdict(plan),
        "runtime": runtime_section(plan),
        "lowered": lowered,
        "report": [[v.subject, v.status, v.why, str(v.span)] for v in verdicts],
    }


def dumps(planfile: dict) -> bytes:
    return (json.dumps(planfile, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()
