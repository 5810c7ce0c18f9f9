"""``sbxc exec --session ID`` and ``sbxc exec --ephemeral``: one run in a session's
workspace, through the same core as every ``exec`` (``launch``), with the workspace in
the project's place (``spec.Workspace``, ``session_mounts``).

While the command runs, sbxc holds a shared lock on the session's folder: commands of one
session may run at once, and ``session stop`` refuses while any runs. The workspace's size
is measured after the command when the policy sets ``workspace.max_bytes``: a quota
checked between commands, not enforced while a command writes.
"""
from __future__ import annotations

import os
import sys

from .errors import Refusal
from .spec import Workspace


def run(session, ephemeral: bool, policy, plan, backend, network, cmd, environ, cwd, compile, state) -> int:
    from .launch import launch, load_plan
    from .planstore import policy_watch
    from .sessions import SESSION_PREFIX, open_session, open_store, sessions_dir, try_lock
    from .staleness import HostNow

    now = HostNow(environ)
    store_fd = open_store(environ)
    try:
        if ephemeral:
            pf = load_plan(policy, plan, backend, network, now, cwd, compile)
            from .session_start import start

            settings = dict((pf.get("runtime") or {}).get("workspace") or {})
            settings["pool"] = 0  # one run: a ready copy for the next would outlive it for nothing
            # Locked from its making to its removal: killed, it is a leftover the next
            # start removes (session_start._quota_sessions).
            made = start(pf["runtime"]["project"], settings, environ, policy=policy or "", ephemeral=True)
            session, fd, meta = made["id"], made["fd"], made["meta"]
        else:
            fd, meta = open_session(store_fd, session)
        try:
            if not ephemeral and not try_lock(fd, shared=True):
                raise Refusal(f"session {session} is being applied or stopped",
                              "wait for that to end, then run again (sbxc session list shows whether it is still there)")
            if not ephemeral:
                if policy is None and plan is None and meta.get("policy"):
                    policy = meta["policy"]
                project = meta.get("project", "")
                # Run from outside the project: its policy is found from the project, as at the start.
                inside = cwd == project or cwd.startswith(project.rstrip("/") + "/")
                where = cwd if inside or plan is not None else project
                pf = load_plan(policy, plan, backend, network, now, where, compile)
            ws = Workspace(meta.get("project", ""), f"{sessions_dir(environ)}/{SESSION_PREFIX}{session}/ws")
            status = launch(pf, cmd, environ, cwd, watch=policy_watch(pf.get("sources") if plan is None else (), cwd),
                            paths_checked=plan is None, state=state, now=now, workspace=ws)
            limit = ((pf.get("runtime") or {}).get("workspace") or {}).get("max_bytes")
            if limit is not None and not ephemeral:
                from .sessions import size_of

                size = size_of(fd)
                if size > int(limit):
                    sys.stderr.write(f"sbxc: warning: session {session}'s workspace holds {size} bytes, more than "
                                     f"workspace.max_bytes ({limit}; checked after each command, not while it "
                                     "writes); session apply and stop --snapshot refuse it until it is smaller\n")
            return status
        finally:
            os.close(fd)
            if ephemeral:
                from .sessions import remove_entry

                remove_entry(store_fd, SESSION_PREFIX + session)
    finally:
        os.close(store_fd)
