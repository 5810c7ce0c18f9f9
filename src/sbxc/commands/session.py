"""``sbxc session start|list|diff|apply|stop|drop``: per-session workspaces.

    sbxc session start [--policy P] [--from SNAPSHOT] [--stage SRC:DEST]... [--format text|json]
    sbxc session list  [--format text|json]
    sbxc session diff  ID [--format text|json]
    sbxc session apply ID [PATH...] [--format text|json]
    sbxc session stop  ID [--snapshot NAME]
    sbxc session drop  SNAPSHOT

The work is the runtime's (``runtime/sessions``, ``session_start``, ``session_apply``);
this module reads the command line (its grammar is ``_args.SESSION``, the table every
command parses with), finds the policy's workspace settings through the
plan cache (the same plan ``exec`` runs), and words the results. Exit 0; 1 when the
operation was refused (``apply``: when any file was refused); 2 usage; 3 sbxc itself broke.
"""
from __future__ import annotations

import os
import sys

from . import _args, _help


def _plan(policy, cwd: str) -> dict:
    """The plan file ``exec`` would run for ``policy`` from ``cwd`` (plan cache, compiled
    on a miss)."""
    from ..runtime.launch import load_plan
    from ..runtime.staleness import HostNow
    from .exec import compile_on_miss

    return load_plan(policy, None, None, None, HostNow(os.environ), cwd, compile_on_miss)


def _settings(meta: dict) -> dict:
    """The workspace settings of a session's policy, as it compiles now."""
    pf = _plan(meta.get("policy") or None, meta.get("project") or os.getcwd())
    return dict((pf.get("runtime") or {}).get("workspace") or {})


def _json(obj) -> None:
    sys.stdout.write(_flat_json(obj) if _is_flat(obj) else _full_json(obj))


def _full_json(obj) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def _is_flat(obj) -> bool:
    return isinstance(obj, dict) and all(isinstance(k, str) and (v is None or type(v) in (str, int, bool))
                                         for k, v in obj.items())


def _json_str(text: str) -> str:
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7f:
            out.append(ch)
        elif o > 0xFFFF:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 | (o >> 10), 0xDC00 | (o & 0x3FF)))
        else:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}.get(ch, "\\u%04x" % o))
    out.append('"')
    return "".join(out)


def _flat_json(obj: dict) -> str:
    """``json.dumps(obj, indent=1, sort_keys=True)`` of a flat object, byte for byte, without
    loading ``json`` (its import, with ``re``, is a good part of a pool start's time)."""
    if not obj:
        return "{}\n"

    def value(v):
        if v is None:
            return "null"
        if v is True or v is False:
            return "true" if v else "false"
        return str(v) if type(v) is int else _json_str(v)

    return "{\n" + ",\n".join(f" {_json_str(k)}: {value(v)}" for k, v in sorted(obj.items())) + "\n}\n"


def _stage_arg(text: str) -> tuple[str, str]:
    src, sep, dest = text.rpartition(":")
    if not sep or not src or not dest:
        raise _args.Usage(f"--stage {text!r} is not SRC:DEST")
    return os.path.abspath(os.path.expanduser(src)), dest


def main(argv) -> int:
    verbs = {c.name: c for c in _args.SESSION.subcommands}
    if argv and argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(_help.command_help(_args.SESSION))
        return 0
    if not argv or argv[0] not in verbs:
        what = (_args.unknown("subcommand", argv[0], list(verbs)) if argv and not argv[0].startswith("-")
                else f"a subcommand is needed first (choose from: {', '.join(verbs)})")
        sys.stderr.write(f"sbxc session: {what} (see: sbxc help session)\n")
        return 2
    verb = argv[0]
    args, code = _help.run_parse(verbs[verb], argv[1:], sys.stdout, sys.stderr, parent="session")
    if args is None:
        return code
    if verb in ("start", "list", "diff", "apply"):
        args["format"] = args.format or "text"
    if verb in ("start", "stop"):
        args["snapshot"] = args.snapshot or ""
    if verb == "start":
        try:
            args["stage"] = [_stage_arg(t) for t in args.stage]
        except _args.Usage as e:
            sys.stderr.write(f"sbxc session start: {e} (see: sbxc help session start)\n")
            return 2
    from ..runtime.errors import Refusal

    try:
        return globals()["_" + verb](args)
    except Refusal as r:
        sys.stderr.write(r.line() + "\n")
        return 1


def _start(args) -> int:
    from ..runtime.session_start import start

    policy = os.path.realpath(args.policy) if args.policy else None
    pf = _plan(policy, os.getcwd())
    rt = pf.get("runtime") or {}
    got = start(rt["project"], dict(rt.get("workspace") or {}), os.environ, from_snapshot=args.snapshot,
                stage=args.stage, policy=policy or "")
    got["project"] = rt["project"]
    got["backend"] = pf.get("backend")
    if args.format == "json":
        _json(got)
        return 0
    how = {"pool": "taken from the warm pool", "copy": "a fresh copy (cp -a)",
           "reflink": "a fresh copy-on-write copy (reflink)"}.get(got["method"], got["method"])
    sys.stdout.write(got["id"] + "\n")
    sys.stderr.write(f"sbxc: session {got['id']} of {rt['project']}: workspace {how}"
                     f"{' of snapshot ' + args.snapshot if args.snapshot else ''}; run commands in it with "
                     f"sbxc exec --session {got['id']} -- CMD\n")
    return 0


def _list(args) -> int:
    import time

    from ..runtime.session_pool import pool_status
    from ..runtime.sessions import entries, human_size, open_store, size_of

    fd = open_store(os.environ)
    try:
        rows = []
        for e in entries(fd):
            created = int(e.meta.get("created_ns", "0") or 0)
            sfd = os.open(e.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                size = size_of(sfd)
            finally:
                os.close(sfd)
            rows.append({"kind": e.kind, "name": e.name, "state": e.state, "project": e.meta.get("project", ""),
                         "bytes": size, "age_s": round(time.time() - created / 1e9) if created else None,
                         "from": e.meta.get("from", ""), "method": e.meta.get("method", "")})
        pool = [{"key": k, "ready": n, "bytes": b, "size": int(z) if str(z).isascii() and str(z).isdigit() else None, "source": src,
                 "keeper": kp.get("state", ""), "keeper_why": kp.get("why", "")}
                for k, (n, b, z, src, kp) in pool_status(fd).items()]
    finally:
        os.close(fd)
    if args.format == "json":
        _json({"sessions": [r for r in rows if r["kind"] == "session"],
               "snapshots": [r for r in rows if r["kind"] == "snapshot"], "pool": pool})
        return 0
    if not rows:
        sys.stdout.write("no sessions or snapshots\n")
    for r in rows:
        state = "" if r["state"] == "ready" else f"  [{r['state']}: " + {
            "starting": "start in progress]", "ephemeral": "an exec --ephemeral runs in it]"}.get(
            r["state"], f"the start did not complete, or its run was killed; sbxc session stop {r['name']}]")
        sys.stdout.write(f"{r['kind']:8} {r['name']:14} {human_size(r['bytes']):>8} {r['age_s'] or 0:>6}s  "
                         f"{r['project']}{state}\n")
    for p in pool:
        keeper = {"watching": "; a keeper watches the project (a start checks it in one question)",
                  "gave up": f"; the keeper gave up ({p['keeper_why']}): each start checks every entry",
                  "none": "; no keeper now: the next start checks every entry, then one watches again",
                  "": ""}.get(p["keeper"], f"; keeper: {p['keeper']}")
        sys.stdout.write(f"pool     {p['source'] or p['key']}: {p['ready']} ready of {p['size']} "
                         f"(workspace.pool), {human_size(p['bytes'])} on disk{keeper}\n")
    return 0


def _open(sid: str):
    from ..runtime.sessions import SESSION_PREFIX, open_session, open_store, read_manifest, sessions_dir

    store_fd = open_store(os.environ, create=False)
    try:
        fd, meta = open_session(store_fd, sid)
    finally:
        os.close(store_fd)
    try:
        manifest = read_manifest(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, meta, manifest, f"{sessions_dir(os.environ)}/{SESSION_PREFIX}{sid}/ws"


def _diff(args) -> int:
    from ..runtime.errors import shown
    from ..runtime.session_apply import _LABEL, diff_rows, unified

    fd, meta, manifest, ws = _open(args.id)
    try:
        rows = diff_rows(manifest, meta, ws)
    finally:
        os.close(fd)
    if args.format == "json":
        _json({"id": args.id, "project": meta["project"],
               "changes": [{"path": p, "change": c, "host_changed": h} for c, p, h in rows]})
        return 0
    for c, p, h in rows:
        sys.stdout.write(f"{_LABEL[c]} {shown(p)}{'  (changed on the host too: apply refuses it)' if h else ''}\n")
    for c, p, h in rows:
        if not h:
            sys.stdout.write(unified(meta, ws, p, c))
    return 0


def _apply(args) -> int:
    from ..runtime.errors import Refusal
    from ..runtime.errors import shown
    from ..runtime.session_apply import apply
    from ..runtime.sessions import size_of, write_manifest

    fd, meta, manifest, ws = _open(args.id)
    try:
        # No command of the session may run meanwhile (they hold the folder's lock shared):
        # what is applied is what the diff showed, and the quota counted holds to the end.
        from ..runtime.sessions import try_lock

        if not try_lock(fd):
            raise Refusal(f"session {args.id} is in use (a command of it is running, or it is starting); "
                          "nothing was applied", "apply once its commands have ended")
        limit = _settings(meta).get("max_bytes")
        if limit is not None:
            size = size_of(fd)
            if size > int(limit):
                raise Refusal(f"session {args.id}'s workspace holds {size} bytes, more than workspace.max_bytes "
                              f"({limit}); nothing was applied", "remove what it does not need, or raise the quota")
        results = apply(manifest, meta, ws, args.paths, max_bytes=limit)
        write_manifest(fd, manifest)
    finally:
        os.close(fd)
    refused = [r for r in results if r[2]]
    if args.format == "json":
        _json({"id": args.id, "applied": [{"path": p, "change": c} for p, c, w in results if not w],
               "refused": [{"path": p, "change": c, "why": w} for p, c, w in refused]})
    else:
        for p, c, why in results:
            sys.stdout.write(f"{'refused' if why else 'applied'}: {shown(p)} ({c}){': ' + why if why else ''}\n")
        if not results:
            sys.stdout.write("nothing to apply\n")
    return 1 if refused else 0


def _stop(args) -> int:
    from ..runtime.session_start import stop
    from ..runtime.sessions import open_session, open_store

    limit = None
    if args.snapshot:
        store_fd = open_store(os.environ, create=False)
        try:
            fd, meta = open_session(store_fd, args.id)
            os.close(fd)
        finally:
            os.close(store_fd)
        limit = _settings(meta).get("max_bytes")
    got = stop(args.id, os.environ, snapshot=args.snapshot, max_bytes=limit)
    sys.stderr.write(f"sbxc: session {args.id} " + (f"kept as snapshot {args.snapshot}; start from it with "
                                                     f"sbxc session start --from {args.snapshot}\n"
                                                     if args.snapshot else "stopped; its workspace is gone\n"))
    return 0 if got else 1


def _drop(args) -> int:
    from ..runtime.session_start import drop_snapshot

    drop_snapshot(args.name, os.environ)
    sys.stderr.write(f"sbxc: snapshot {args.name} removed\n")
    return 0
