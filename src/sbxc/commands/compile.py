"""``sbxc compile [POLICY] [--check [--verbose]] [--backend B] [--network[=BOOL]] [--strict]
[--format text|json|sarif] [-o PLAN]`` (the grammar: ``_args.COMPILE``).

Exit 0 clean (warnings allowed), 1 errors (including a rule the selected backend cannot
enforce, and ``partial`` under ``--strict``), 2 usage, 3 sbxc itself broke (a backend
raised: its report says so, and no plan is written; see docs/decisions.md).
"""
from __future__ import annotations

import os
import sys

from ..compiler.diagnostics import Diagnostic, diag, dumps_json, has_errors, render_json, render_text
from ..compiler.report import NOT_ENFORCEABLE, PARTIAL, render_report_text, render_sarif, report_json
from ..layout import INTERNAL_ERROR, VERSION
from ..runtime.errors import one_line
from . import _args, _help
from .build import lower_all
from ._output import write_file


def overrides_of(args) -> dict:
    """The policy keys the command line sets (flags beat files, SPEC §4): the same for
    compile, print-config and explain (exec hands its flags to the plan cache instead)."""
    out = {}
    if args.backend:
        out["backend"] = args.backend
    if args.network is not None:
        out["network"] = args.network == "on"
    return out


def policy_arg(args, stderr, name: str):
    """compile's POLICY and --policy are one setting: both given and different is a usage error."""
    pos = args.get("policy_pos")
    if pos is not None and args.policy is not None and pos != args.policy:
        stderr.write(f"sbxc {name}: POLICY {pos!r} and --policy {args.policy!r} were both given; give one "
                     f"(see: sbxc help {name})\n")
        return None, 2
    return (args.policy if args.policy is not None else pos), None


JSON_FORMAT = "sbxc-check/1"
"""The ``format`` field of ``compile --check --format json`` (docs/output-formats.md)."""


def main(argv) -> int:
    from ..runtime.probe import probe_host

    return run(argv, cwd=os.getcwd(), environ=os.environ, host=None, paths=None, probe=probe_host)


def run(argv, *, cwd, environ, host, paths=None, probe=None, stdout=None, stderr=None) -> int:
    from ..backends import BACKENDS
    from ..compiler.api import compile_policy

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args, code = _help.run_parse(_args.COMPILE, argv, stdout, stderr)
    if args is None:
        return code
    args["policy_pos"] = args.pop("policy_arg")
    policy, code = policy_arg(args, stderr, "compile")
    if code is not None:
        return code
    fmt = args.format or "text"
    if fmt == "sarif" and not args.check:
        stderr.write("sbxc compile: --format sarif needs --check (a plan file is JSON already) (see: sbxc help compile)\n")
        return 2
    if args.verbose and not args.check:
        stderr.write("sbxc compile: --verbose needs --check (see: sbxc help compile)\n")
        return 2
    if not args.check and not args.output:
        args["output"] = "-"  # `sbxc compile` alone prints the plan, as `-o -` does
    if host is None:
        host = probe(environ)
    result = compile_policy(policy, cwd=cwd, environ=environ, host=host, overrides=overrides_of(args), paths=paths)
    diags: list[Diagnostic] = list(result.diagnostics)
    reports = []
    selected = result.backend
    if result.plan is not None:
        names = BACKENDS if args.check else (selected,)
        reports = lower_all(result.plan, host, names)
        for r in reports:
            if r.backend != selected:
                continue
            if r.unavailable and not r.internal:
                diags.append(diag("SBX052", None, backend=r.backend, why=r.unavailable))
            for v in r.verdicts:
                if v.status == NOT_ENFORCEABLE:
                    diags.append(diag("SBX050", v.span, backend=r.backend, subject=v.subject, why=v.why))
                elif v.status == PARTIAL and args.strict:
                    diags.append(diag("SBX051", v.span, backend=r.backend, subject=v.subject, why=v.why))
    failed = has_errors(diags)
    code = 1 if failed else 0
    # A backend that raised is sbxc's bug, not the policy's: exit 3, after every report.
    broken = [r for r in reports if r.internal]
    if any(r.backend == selected for r in broken):
        failed = True  # no plan from a backend that failed
    if broken:
        code = INTERNAL_ERROR

    if args.output and not failed:
        from ..planfile import build, dumps

        lowered = next(r.lowered for r in reports if r.backend == selected)
        from ..compiler.runwarnings import run_warnings

        warnings = run_warnings(result.plan, diags, selected, host)
        data = dumps(build(result.plan, host, selected, lowered.data, lowered.verdicts, warnings))
        try:
            if selected == "oci" and args.output != "-":
                # For the OCI backend -o names a bundle folder (config.json, rootfs, the plan).
                from .export import write_bundle

                write_bundle(os.path.join(cwd, args.output), data, lowered.data["config"], result.plan,
                             lowered.data.get("links", ()))
            elif args.output == "-":
                stdout.flush()
                getattr(stdout, "buffer", None).write(data) if hasattr(stdout, "buffer") else stdout.write(data.decode())
            else:
                write_file(os.path.join(cwd, args.output), data)
        except OSError as e:
            stderr.write(f"sbxc compile: cannot write {args.output}: {e.strerror or e}\n")
            return 1

    accepted, closed = [], []
    if args.check and not failed and not args.no_accept:
        # The caller has just looked at what these files enforce: a policy file that a
        # sandboxed command wrote (or a nearer one it removed) is trusted again.
        # A file the run journal holds as possibly written by a sandboxed run is recorded
        # as accepted in its present state (sha256, and inode and ctime of it and of the
        # links on the way), so a later change voids the acceptance.
        from ..runtime import journal_check as journal
        from ..runtime.planstore import accept_policies

        accepted = accept_policies(result.sources, cwd if policy is None else "", result.policy)
        in_journal, closed = journal.accept(result.sources)
        accepted += [p for p in in_journal if p not in accepted]
    out_info = stderr if fmt != "text" or args.output == "-" else stdout
    if accepted:
        out_info.write(
            f"sbxc: accepted {', '.join(accepted)} (written or removed by a sandboxed command during an earlier run, "
            "or changed where one could write); sbxc exec uses what is there now\n")
    if closed:
        out_info.write(
            f"sbxc: closed the record of {len(closed)} earlier run(s) (sbxc pid {', '.join(map(str, sorted(closed)))}) "
            "that ended without their post-run checks: policy files they could write that changed before now stay "
            "refused until accepted; make sure none of their processes is still running\n")

    for r in broken:  # "internal error: " is the start of every such reason
        stderr.write(f"sbxc: internal error: the {r.backend} backend failed "
                     f"({one_line(r.unavailable.removeprefix('internal error: '), 300)}); please report this\n")

    if fmt == "sarif":
        stdout.write(dumps_json(render_sarif(diags, VERSION, cwd)))
        return code
    if fmt == "json":
        out = {
            "policy": result.policy,
            "policy_reason": result.policy_reason,
            "backend": selected,
            "backend_reason": result.backend_reason,
            "diagnostics": render_json(diags),
            "report": report_json(reports, selected),
            "skipped": [{"path": s.path, "access": s.access, "reason": s.reason,
                         "span": f"{s.span.file}:{s.span.line}:{s.span.col}"}
                        for s in (result.plan.skipped if result.plan else ())],
            "exit": code,
            "format": JSON_FORMAT,
        }
        if args.output != "-":
            stdout.write(dumps_json(out))
        else:
            stderr.write(dumps_json(out))
        return code

    text = render_text(diags, result.lines, cwd)
    err = stderr if (args.output == "-" or not args.check) else stdout
    if text:
        err.write(text)
    if args.check:
        stdout.write(f"policy: {_display(result.policy, cwd)} ({result.policy_reason})\n")
        stdout.write(f"backend: {selected} ({result.backend_reason})\n")
        if reports:
            stdout.write(render_report_text(reports, selected, cwd, verbose=bool(args.verbose)))
        n_err = sum(1 for d in diags if d.severity == "error")
        n_warn = sum(1 for d in diags if d.severity == "warning")
        stdout.write(f"{n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}\n")
    return code


def _display(path: str, cwd: str) -> str:
    from ..compiler.diagnostics import display_path

    return display_path(path, cwd)
