"""``sbxc print-config [--policy P] [--backend B] [--network[=BOOL]] [--format text|json]``
(the grammar: ``_args.PRINT_CONFIG``).

Every resolved setting, where it came from (default, FILE:LINE:COL, command line), what
it replaced, and for the network the effect it can really have on this host.
"""
from __future__ import annotations

import os
import sys

from ..compiler.diagnostics import display_path, dumps_json, render_json, render_text
from . import _args, _help
from .compile import overrides_of

_EXPLAINED = ("policy", "backend (resolved)")

JSON_FORMAT = "sbxc-config/1"
"""The ``format`` field of ``print-config --format json`` (docs/output-formats.md)."""


def main(argv) -> int:
    from ..runtime.probe import probe_host

    return run(argv, cwd=os.getcwd(), environ=os.environ, host=None, probe=probe_host)


def _origin(o: str, cwd: str) -> str:
    if ":" in o and o.startswith("/"):
        path, _, rest = o.partition(":")
        return f"{display_path(path, cwd)}:{rest}"
    if ", " in o:
        return ", ".join(display_path(x, cwd) for x in o.split(", "))
    return o


def rows_for(result, host, cwd: str) -> list[dict]:
    from ..compiler.report import network_effect

    rows = [{"key": "policy", "value": display_path(result.policy, cwd), "origin": result.policy_reason,
             "beat": [], "effect": ""}]
    for r in result.settings:
        effect = ""
        value = r.value
        if r.key == "network" and result.plan is not None:
            effect = network_effect(result.plan.network.mode, result.backend, host)
        if r.key == "backend" and value == "auto":
            value = f"auto -> {result.backend}"
        rows.append({"key": r.key, "value": value, "origin": _origin(r.origin, cwd),
                     "beat": [{"value": v, "origin": _origin(o, cwd)} for v, o in r.beat], "effect": effect})
        if r.key == "backend":
            rows.append({"key": "backend (resolved)", "value": result.backend, "origin": result.backend_reason,
                         "beat": [], "effect": ""})
    return rows


def run(argv, *, cwd, environ, host, paths=None, probe=None, stdout=None, stderr=None) -> int:
    from ..compiler.api import compile_policy

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args, code = _help.run_parse(_args.PRINT_CONFIG, argv, stdout, stderr)
    if args is None:
        return code
    if host is None:
        host = probe(environ)
    result = compile_policy(args.policy, cwd=cwd, environ=environ, host=host, overrides=overrides_of(args), paths=paths)
    rows = rows_for(result, host, cwd)
    errors = sum(d.severity == "error" for d in result.diagnostics)
    # A policy with errors is not a configuration: a run would refuse it, so a script that
    # reads the settings must not take them for what runs (exit 1, as compile does).
    code = 1 if errors or result.plan is None else 0
    if args.format == "json":
        stdout.write(dumps_json({"format": JSON_FORMAT, "settings": rows, "errors": errors,
                                 "diagnostics": render_json(result.diagnostics), "exit": code}))
        return code
    if result.diagnostics:
        stderr.write(render_text(result.diagnostics, result.lines, cwd))
    width = max(len(r["key"]) for r in rows)
    vwidth = min(40, max(len(r["value"]) for r in rows))
    for r in rows:
        # The policy and the resolved backend carry a reason rather than a place.
        where = f"({r['origin']})" if r["key"] in _EXPLAINED else f"from {r['origin']}"
        line = f"{r['key']:<{width}}  {r['value']:<{vwidth}}  {where}"
        if r["beat"]:
            line += "; beat " + ", ".join(f"{b['value']} ({b['origin']})" for b in r["beat"])
        if r["effect"]:
            line += "  " + r["effect"]
        stdout.write(line.rstrip() + "\n")
    if result.plan is None:
        stdout.write("(the policy has errors: a run would refuse)\n")
    return code
