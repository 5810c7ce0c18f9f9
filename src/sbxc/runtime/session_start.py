"""Starting and ending sessions: a workspace from the warm pool (``session_pool``) or a
fresh copy, staged files, quotas and snapshots (store layout: ``sessions``).
"""
from __future__ import annotations

import os

from . import session_copy as sc
from .session_pool import POOL, base_manifest, pool_key, refill_in_background, take_ready
from .sessions import (SESSION_PREFIX, SNAPSHOT_PREFIX, SessionError, StoreLock, mkdir_open, new_id, open_session,
                       read_meta, remove_entry, sessions_dir, sessions_of, size_of, try_lock, valid_name,
                       write_manifest, write_meta)

_RD = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# ------------------------------------------------------------------ staging

def _stage(ws: str, staged, environ) -> list:
    """Copy each (host source, destination in the workspace) into the workspace. The
    folders on the way to the destination are opened without following a link: a copied
    project may hold a symlink there that leads out (into the home folder, say)."""
    done = []
    for src, dest in staged:
        if not os.path.lexists(src):
            raise SessionError(f"nothing to stage at {src}", "create it, or drop it from --stage / workspace.stage")
        parts = [p for p in dest.split("/") if p and p != "."]
        if not parts or ".." in parts:
            raise SessionError(f"the staging destination {dest!r} is not inside the workspace",
                               "give a relative path such as .config/tool")
        for i in range(1, len(parts)):
            if not os.path.lexists(ws + "/" + "/".join(parts[:i])):
                done.append("/".join(parts[:i]))  # made for the staging: not the session's work either
                break
        fd = os.open(ws, _RD)
        try:
            for part in parts[:-1]:
                try:
                    nfd = mkdir_open(fd, part)
                except OSError:
                    raise SessionError(f"the staging destination {dest} passes through {part}, which is not a "
                                       "folder in the workspace (a symlink is never followed)",
                                       "stage to another destination") from None
                os.close(fd)
                fd = nfd
            remove_entry(fd, parts[-1])
        finally:
            os.close(fd)
        sc.copy_tree(src, ws + "/" + "/".join(parts), environ)
        done.append("/".join(parts))
    return done


# ------------------------------------------------------------------ start / stop

def _quota_sessions(store_fd: int, project: str, limit) -> None:
    # An --ephemeral run's session that no process holds was left by an sbxc that was
    # killed: nobody can use it again (its id was never shown), so it goes, and never
    # takes a place (the store's lock is held: no start is between its steps).
    have = []
    for e in sessions_of(store_fd, project):
        if e.meta.get("state") == "ephemeral" and e.state == "interrupted":
            remove_entry(store_fd, e.dir)
        else:
            have.append(e)
    if limit is None:
        return
    if len(have) >= int(limit):
        raise SessionError(f"this project has {len(have)} session(s), the most workspace.max_sessions allows "
                           f"({limit})", "stop one (sbxc session list; sbxc session stop ID), or raise "
                                         "workspace.max_sessions in the policy")


def start(project: str, settings: dict, environ, from_snapshot: str = "", stage=(), policy: str = "",
          ephemeral: bool = False) -> dict:
    """Make a session of ``project`` (a real path): returns {id, method, source, workspace,
    pool_check} (pool_check: how a ready copy was found current, ``take_ready``; "" for a
    fresh copy).
    ``settings``: the plan's ``runtime.workspace`` (quotas, pool, policy staging).
    ``ephemeral``: for one ``exec --ephemeral``: its state says so, and the folder stays
    open and locked for the caller (``fd`` and ``meta`` in the result), so that it is never
    unlocked while the run lives; unlocked, it is a leftover (``_quota_sessions``)."""
    from .sessions import open_store

    store_fd = open_store(environ)
    store = sessions_dir(environ)
    try:
        # How a copy is made (``method`` reads the mount table) is asked only when one is.
        source = {"project": project, "src": project}
        inherited = []
        if from_snapshot:
            source.update(_snapshot_source(store_fd, store, from_snapshot, project))
            # What was staged into the snapshot's session stays staged in a fork of it:
            # never part of a diff or an apply.
            inherited = [p for p in str(source.pop("staged", "")).split("\x1f") if p]
        sid = new_id()
        name = SESSION_PREFIX + sid
        with StoreLock(store_fd):
            _quota_sessions(store_fd, project, settings.get("max_sessions"))
            os.mkdir(name, 0o700, dir_fd=store_fd)
            fd = os.open(name, _RD, dir_fd=store_fd)
            try_lock(fd)  # held until the start is complete (or this process is gone)
            meta = {"state": "starting", "project": project, "policy": policy, "created_ns": sc.now_ns(),
                    "from": from_snapshot, "pid": os.getpid()}
            write_meta(fd, meta)
        try:
            key = pool_key(project, source.get("uid", ""))
            size = int(settings.get("pool", 1) or 0)
            taken, kept = take_ready(store_fd, key, source, fd, size)
            checked = taken
            if not taken:
                source["method"] = sc.method(project, store)
            how = "pool" if taken else source["method"]
            if not taken:
                started = sc.now_ns()
                sc.copy_tree(source["src"], f"{store}/{name}/ws", environ)
                if from_snapshot:
                    manifest = sc.record(project, f"{store}/{name}/ws", started, base_manifest(store_fd, source),
                                         source["src"], int(source.get("ready_ns", 0)))
                else:
                    manifest = sc.record(project, f"{store}/{name}/ws", started)
                write_manifest(fd, manifest)
            staged = _stage(f"{store}/{name}/ws", list(settings.get("stage") or ()) + list(stage), environ)
            staged = inherited + [p for p in staged if p not in inherited]
            meta.update(state="ephemeral" if ephemeral else "ready", ready_ns=sc.now_ns(), method=how,
                        staged="\x1f".join(staged))
            write_meta(fd, meta)
        except BaseException:
            os.close(fd)
            remove_entry(store_fd, name)
            raise
        if ephemeral:
            return {"id": sid, "method": how, "source": project, "workspace": f"{store}/{name}/ws",
                    "pool_check": checked, "fd": fd, "meta": meta}
        os.close(fd)
        if not kept:
            # A keeper that answered refills the pool itself once this start hangs up.
            refill_in_background(key, source, size, environ)
        return {"id": sid, "method": how, "source": from_snapshot or project, "workspace": f"{store}/{name}/ws",
                "pool_check": checked}
    finally:
        os.close(store_fd)


def _snapshot_source(store_fd: int, store: str, name: str, project: str) -> dict:
    if not valid_name(name):
        raise SessionError(f"{name!r} is not a snapshot name", "use letters, digits, '.', '_' and '-'")
    try:
        fd = os.open(SNAPSHOT_PREFIX + name, _RD, dir_fd=store_fd)
    except FileNotFoundError:
        raise SessionError(f"there is no snapshot {name}", "see sbxc session list") from None
    try:
        meta = read_meta(fd)
        if meta.get("project") != project:
            raise SessionError(f"snapshot {name} is of another project ({meta.get('project')})",
                               "start it with that project's policy")
        return {"snapshot": name, "uid": meta.get("uid", ""), "src": f"{store}/{SNAPSHOT_PREFIX}{name}/ws",
                "ready_ns": meta.get("ready_ns", "0"), "staged": meta.get("staged", "")}
    finally:
        os.close(fd)


def stop(sid: str, environ, snapshot: str = "", max_bytes=None) -> dict:
    """Discard the session ``sid``, or keep its workspace as the snapshot ``snapshot``."""
    from .sessions import open_store

    store_fd = open_store(environ, create=False)
    try:
        fd, meta = open_session(store_fd, sid, ready=bool(snapshot))
        try:
            if not try_lock(fd):
                raise SessionError(f"session {sid} is in use (a command of it is running, or it is starting)",
                                   "wait for it to end, then stop the session")
            if snapshot:
                if not valid_name(snapshot):
                    raise SessionError(f"{snapshot!r} is not a snapshot name", "use letters, digits, '.', '_' and '-'")
                size = size_of(fd)
                if max_bytes is not None and size > int(max_bytes):
                    raise SessionError(f"session {sid}'s workspace holds {size} bytes, more than workspace.max_bytes "
                                       f"({max_bytes}); it is not kept as a snapshot",
                                       "remove what it does not need (sbxc exec --session), or raise the quota")
                meta.update(state="ready", uid=new_id(), snapshot_of=sid)
                write_meta(fd, meta)
                try:
                    os.rename(SESSION_PREFIX + sid, SNAPSHOT_PREFIX + snapshot, src_dir_fd=store_fd, dst_dir_fd=store_fd)
                except OSError as e:
                    if e.errno in (17, 39):
                        raise SessionError(f"a snapshot named {snapshot} exists",
                                           f"choose another name, or drop it first (sbxc session drop {snapshot})") \
                            from None
                    raise
                return {"id": sid, "snapshot": snapshot}
        finally:
            os.close(fd)
        remove_entry(store_fd, SESSION_PREFIX + sid)
        return {"id": sid, "removed": True}
    finally:
        os.close(store_fd)


def drop_snapshot(name: str, environ) -> None:
    from .sessions import open_store

    if not valid_name(name):
        raise SessionError(f"{name!r} is not a snapshot name", "see sbxc session list")
    store_fd = open_store(environ, create=False)
    try:
        try:
            fd = os.open(SNAPSHOT_PREFIX + name, _RD, dir_fd=store_fd)
        except FileNotFoundError:
            raise SessionError(f"there is no snapshot {name}", "see sbxc session list") from None
        try:
            uid = read_meta(fd).get("uid", "")
        finally:
            os.close(fd)
        remove_entry(store_fd, SNAPSHOT_PREFIX + name)
        if uid:
            try:
                pfd = os.open(POOL, _RD, dir_fd=store_fd)
            except FileNotFoundError:
                return
            try:
                remove_entry(pfd, f"n-{uid}")
            finally:
                os.close(pfd)
    finally:
        os.close(store_fd)
