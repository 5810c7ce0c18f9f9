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
        **({"proxy": proxy_section(plan.network)} if plan.network.hosts else {}),
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


# With the network off, what makes tools fail at once instead of waiting and retrying
# (SPEC §5: a network attempt fails fast). Each is read from the environment, so no file
# in the project or the home folder is written; a value the policy sets or passes wins.
OFFLINE_ENV = (
    # npm (and pnpm) retry a failed request twice, 10 s and then 60 s later: 70 s and
    # more before `npm install` fails, every request that misses its cache again.
    ("npm_config_fetch_retries", "0"),
    # npm's check for a newer npm after the command: one more request that cannot succeed.
    ("npm_config_update_notifier", "false"),
    # pip retries 5 times with a growing pause (about 7.5 s per URL). One retry costs
    # no wait (urllib3 pauses from the second on) and is what makes pip print why the
    # connection failed: with none, it reports only "No matching distribution".
    ("PIP_RETRIES", "1"),
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    # cargo retries network errors 3 times by default.
    ("CARGO_NET_RETRY", "0"),
    # glibc's resolver (getaddrinfo in every C, Python, Node and git program) overrides
    # resolv.conf's options with these: one try of one second per name server. Without a
    # network each query fails at once anyway (no route, or no socket under Landlock);
    # this bounds a resolv.conf that asks for long timeouts and many attempts.
    ("RES_OPTIONS", "timeout:1 attempts:1"),
)


def offline_env(mode: str, backend: str) -> list:
    """OFFLINE_ENV where the run has no network: ``network: false``, and per-port rules on
    bwrap and OCI (narrowed to no network). Under Landlock and macOS the listed ports stay
    open."""
    if mode == "off" or (mode == "rules" and backend in ("bwrap", "oci")):
        return [list(kv) for kv in OFFLINE_ENV]
    return []


def proxy_section(network) -> dict:
    """What the runtime's proxy needs (plans with host rules only): each rule as plain data
    ``[host, [ports], "file:line:col", rule text]``, and where the network setting was written
    (for the feedback line after a refusal)."""
    return {
        "rules": [[h.host, list(h.ports), f"{h.span.file}:{h.span.line}:{h.span.col}", h.text] for h in network.hosts],
        "at": f"{network.span.file}:{network.span.line}" if network.span.line else network.span.file,
    }


def build(plan, host, backend: str, lowered: dict, verdicts, warnings=()) -> dict:
    """The plan file. ``warnings``: lines ``exec`` prints once per policy change (the
    compiler's ``run_warnings``)."""
    rt = runtime_section(plan)
    rt["offline_env"] = offline_env(plan.network.mode, backend)
    rt["warnings"] = [str(w) for w in warnings]
    return {
        "format": FORMAT,
        "sbxc": VERSION,
        "backend": backend,
        "host": host.to_dict(),
        "sources": [list(s) for s in plan.sources],
        "ir": asdict(plan),
        "runtime": rt,
        "lowered": lowered,
        "report": [[v.subject, v.status, v.why, str(v.span)] for v in verdicts],
    }


def dumps(planfile: dict) -> bytes:
    return (json.dumps(planfile, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()
