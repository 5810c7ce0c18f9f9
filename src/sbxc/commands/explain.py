"""``sbxc explain PATH [--policy P] [--backend B] [--network[=BOOL]] [--format text|json]``.

What a sandboxed command may do with PATH on each backend, and the rule that decides.

The deciding rule is ``sbxc.compiler.decide``'s, the model every backend is tested
against (tests/live/test_cross_backend.py, the SBPL evaluator's tests). What a backend
really does is then read from what that backend itself produced for this plan, never
guessed: Landlock's answer is worked out from the (path, rights) rules its lowering
wrote, so a mask under a read parent (the parent's rights spread over its entries, new
names getting less) and a tmpfs turned per-run folder show as Landlock enforces them;
bwrap mounts the model exactly (a masked path shows empty, a tmpfs is private);
Seatbelt cannot mount, so a tmpfs is denied there. Each backend's verdict on the deciding
rule (narrowed, partial ...) is shown with its reason.

Exit 0 explained; 1 the policy has errors; 2 usage; 3 sbxc itself broke.
"""
from __future__ import annotations

import os
import posixpath
import sys

from .. import landlock_abi as ll
from ..compiler.decide import decide
from ..compiler.plan import KIND_DIR, KIND_MISSING, KIND_SOCKET, MASK, NONE, READ, TMPFS, WRITE, is_within
from ..layout import BACKENDS, INTERNAL_ERROR
from . import _args, _help
from .compile import overrides_of

JSON_FORMAT = "sbxc-explain/1"
"""The ``format`` field of ``explain --format json`` (docs/output-formats.md)."""

OPS = ("read", "write", "exec", "connect")
_BWRAP_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
# bwrap replaces these with the sandbox's own (backends/mountrules.py OWN_MOUNTS).
_BWRAP_OWN = {"/proc": "its own /proc", "/dev": "a minimal /dev of its own (null, zero, random, tty, pts, shm)"}


def main(argv) -> int:
    from ..runtime.probe import probe_host

    return run(argv, cwd=os.getcwd(), environ=os.environ, host=None, paths=None, probe=probe_host)


def _model_ops(access: str, kind: str) -> dict:
    """What ``decide``'s access means for the four questions (SPEC §2)."""
    there = access in (READ, WRITE)
    return {
        "read": there,
        "write": access == WRITE or (access == TMPFS and kind in (KIND_DIR, KIND_MISSING)),
        "exec": there and kind != KIND_DIR,
        "connect": there and kind == KIND_SOCKET,
    }


def landlock_rights(data: dict, path: str) -> int:
    """The rights Landlock gives ``path`` under the lowered rules: rules add up along the
    path (a folder's rule covers everything beneath it; a file's rule only the file)."""
    got = 0
    for rule_path, rights, kind in data.get("fs_rules", ()):
        if rule_path == path or (kind == "dir" and is_within(path, rule_path)):
            got |= rights
    return got


def _landlock(data: dict, plan, d, path: str, kind: str) -> tuple[dict, str]:
    if path in data.get("absent", ()):
        return dict.fromkeys(OPS, False), "the run refuses to start if this path exists by then"
    rights = landlock_rights(data, path)
    parent = landlock_rights(data, posixpath.dirname(path) or "/")
    notes = []
    if kind == KIND_DIR:
        ops = {"read": bool(rights & ll.FS_READ_DIR), "write": bool(rights & ll.FS_MAKE_REG),
               "exec": False, "connect": False}
    elif kind == KIND_MISSING:
        # A name made later: it gets its folder's rights, and making it needs MAKE_REG there.
        ops = {"read": bool(parent & ll.FS_READ_FILE), "write": bool(parent & ll.FS_MAKE_REG),
               "exec": bool(parent & ll.FS_EXECUTE), "connect": False}
    else:
        ops = {"read": bool(rights & ll.FS_READ_FILE), "write": bool(rights & ll.FS_WRITE_FILE),
               "exec": bool(rights & ll.FS_EXECUTE), "connect": False}
    if kind == KIND_SOCKET:
        # Landlock before ABI 9 does not check connect(2) to a socket file; seccomp then
        # decides whether a new AF_UNIX socket can be made at all.
        ops["connect"] = bool(plan.syscalls.allow_unix_sockets)
    if d.access == TMPFS and d.rule.path in data.get("tmpfs", ()):
        t = d.rule.path
        notes.append(f"the host's files in {t} are not reachable; new files go to a per-run folder inside "
                     f"{t} (TMPDIR points at it), removed after the run")
    if kind != KIND_MISSING and not any(ops.values()):
        notes.append("its name, type, size and times stay visible to stat() (Landlock cannot hide names)")
    return ops, "; ".join(notes)


def _bwrap(model_access: str, path: str, kind: str) -> tuple[dict, str]:
    for own, what in _BWRAP_OWN.items():
        if is_within(path, own) and model_access in (READ, WRITE):
            ops = _model_ops(model_access, kind)
            if path in _BWRAP_DEVICES:
                ops.update(read=True, write=True, exec=False)
            return ops, f"bwrap gives the sandbox {what}: not the host's"
    ops = _model_ops(model_access, kind)
    if model_access == MASK:
        if kind == KIND_MISSING:
            return ops, "absent, and it cannot be made"
        return ops, "shown as an empty read-only " + ("folder" if kind == KIND_DIR else "file")
    if model_access == TMPFS:
        return ops, "an empty private folder of the run's own; what is written there is gone after the run"
    if model_access == NONE:
        return ops, "no rule covers it: not in the sandbox"
    return ops, ""


def _sbpl(data: dict, model_access: str, path: str, kind: str) -> tuple[dict, str]:
    for dev, _subpath, writable in data.get("devices", ()):
        if dev == path:
            return {"read": True, "write": bool(writable), "exec": False, "connect": False}, "a device node it grants"
    if model_access == TMPFS:
        return dict.fromkeys(OPS, False), ("denied (Seatbelt cannot mount): the command gets an empty per-run "
                                           "folder in TMPDIR instead")
    return _model_ops(model_access, kind), ""


def _verdict_for(report, rule):
    """The backend's verdict on the deciding rule (same span and path)."""
    if rule is None:
        return None
    want = rule.written or rule.path
    for v in report.verdicts:
        if v.span == rule.span and (v.subject.endswith(" " + want) or v.subject.endswith(f"({rule.access} {want})")
                                    or v.subject.endswith(f"({rule.access} {{home}})")):
            return v
    for v in report.verdicts:
        if v.span == rule.span:
            return v
    return None


def explain_path(plan, reports, selected: str, path: str, kind: str) -> dict:
    """Pure: the answer for ``path`` (real, absolute) of host kind ``kind``, from the plan
    and each backend's lowering (``commands.build.lower_all``)."""
    d = decide(plan, path)
    rule = d.rule
    out = {"path": path, "kind": kind, "access": d.access, "rule": None, "backends": {}}
    if rule is not None:
        out["rule"] = {"span": f"{rule.span.file}:{rule.span.line}:{rule.span.col}", "file": rule.span.file,
                       "line": rule.span.line, "col": rule.span.col, "access": rule.access,
                       "text": f"{rule.access} {rule.written or rule.path}", "path": rule.path,
                       "origin": rule.origin}
    for r in reports:
        entry = {"selected": r.backend == selected}
        if r.unavailable:
            entry["unavailable"] = r.unavailable
            out["backends"][r.backend] = entry
            continue
        if r.backend == "landlock":
            ops, note = _landlock(r.lowered.data, plan, d, path, kind)
        elif r.backend == "bwrap":
            ops, note = _bwrap(d.access, path, kind)
        else:
            ops, note = _sbpl(r.lowered.data, d.access, path, kind)
        v = _verdict_for(r, rule)
        entry.update(ops)
        entry["note"] = note
        entry["status"] = v.status if v is not None else ""
        entry["why"] = v.why if v is not None else ""
        out["backends"][r.backend] = entry
    return out


def _can(entry: dict, kind: str) -> str:
    words = {"read": "list" if kind == KIND_DIR else "read", "write": "create" if kind in (KIND_DIR, KIND_MISSING)
             else "write", "exec": "exec", "connect": "connect"}
    allowed = [words[op] for op in OPS if entry.get(op)]
    if kind == KIND_MISSING:
        return ("may " + ", ".join(allowed) + " it") if allowed else "cannot create it: not there"
    return ", ".join(allowed) if allowed else "not there"


def render_text(ans: dict, cwd: str, shown: str) -> str:
    from ..compiler.diagnostics import display_path

    kinds = {KIND_DIR: "a folder", KIND_MISSING: "missing on this host", KIND_SOCKET: "a socket", "file": "a file"}
    real = "" if shown == ans["path"] else f" (real path {ans['path']})"
    lines = [f"path: {shown}{real}: {kinds.get(ans['kind'], 'a special file')}"]
    rule = ans["rule"]
    if rule is None:
        lines.append("rule: none covers it (anything no rule covers is not there)")
    else:
        where = (f"{display_path(rule['file'], cwd)}:{rule['line']}:{rule['col']}" if rule["line"]
                 else "(implied by " + rule["origin"] + ")")
        lines.append(f"rule: {where}: {rule['text']}  (the deepest rule containing the path decides: {ans['access']})")
    width = max(len(b) + len(" (selected)") for b in ans["backends"])
    for name, e in ans["backends"].items():
        label = name + (" (selected)" if e["selected"] else "")
        if "unavailable" in e:
            lines.append(f"  {label + ':':<{width + 1}} unavailable: {e['unavailable']}")
            continue
        text = _can(e, ans["kind"])
        if e["note"]:
            text += f" ({e['note']})"
        lines.append(f"  {label + ':':<{width + 1}} {text}")
        if e["status"] and e["status"] != "enforced":
            lines.append(f"  {'':<{width + 1}} the rule is {e['status']} here: {e['why']}")
    return "\n".join(lines) + "\n"


def run(argv, *, cwd, environ, host, paths=None, probe=None, stdout=None, stderr=None) -> int:
    from ..compiler.api import compile_policy
    from ..compiler.diagnostics import dumps_json, has_errors, render_json
    from ..compiler.diagnostics import render_text as render_diags
    from ..compiler.hostpaths import HostPaths
    from .build import lower_all

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args, code = _help.run_parse(_args.EXPLAIN, argv, stdout, stderr)
    if args is None:
        return code
    paths = paths or HostPaths()
    if host is None:
        host = probe(environ)
    result = compile_policy(args.policy, cwd=cwd, environ=environ, host=host, overrides=overrides_of(args), paths=paths)
    if result.plan is None or has_errors(result.diagnostics):
        if args.format == "json":
            stdout.write(dumps_json({"format": JSON_FORMAT, "diagnostics": render_json(result.diagnostics), "exit": 1}))
        else:
            stderr.write(render_diags(result.diagnostics, result.lines, cwd))
            stderr.write("sbxc explain: the policy has errors; fix them first (sbxc compile --check)\n")
        return 1
    given = args.path
    shown = posixpath.normpath(given if given.startswith("/") else posixpath.join(cwd, given))
    real = posixpath.normpath(paths.realpath(shown))
    kind = paths.kind(real)
    reports = lower_all(result.plan, host, BACKENDS)
    ans = explain_path(result.plan, reports, result.backend, real, kind)
    broken = [r for r in reports if r.internal]
    if args.format == "json":
        ans.update({"format": JSON_FORMAT, "query": given, "policy": result.policy, "backend": result.backend,
                    "exit": INTERNAL_ERROR if broken else 0})
        stdout.write(dumps_json(ans))
    else:
        stdout.write(render_text(ans, cwd, shown))
    for r in broken:
        stderr.write(f"sbxc: internal error: the {r.backend} backend failed ({r.unavailable}); please report this\n")
    return INTERNAL_ERROR if broken else 0
