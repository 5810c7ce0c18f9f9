"""``sbxc.Session``: per-session workspaces for programs (an agent harness's "run in
sandbox" tool), over the same runtime as the command line.

Every operation runs the ``sbxc session`` / ``sbxc exec --session`` commands with
``--format json`` and reads their answer, so a harness gets exactly what a person at the
command line gets: the same plan cache, the same checks, the same refusals. Harnesses in
other languages do the same with the commands themselves.

    with sbxc.Session.start("/path/to/project") as s:
        r = s.run(["make", "test"], timeout=600)
        print(r.status, r.stdout)
        for change in s.diff():
            print(change["change"], change["path"])
        s.apply(["src/fix.py"])
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


class SessionError(Exception):
    """A session command was refused: ``str(e)`` is sbxc's one-line reason."""


class RunResult:
    """What ``Session.run`` returns: ``status`` (the command's exit status, 128+N for a
    signal, 125 when sbxc refused to run it, None when it timed out), ``stdout`` and
    ``stderr`` (bytes), ``timed_out``."""

    __slots__ = ("status", "stdout", "stderr", "timed_out")

    def __init__(self, status, stdout, stderr, timed_out=False):
        self.status, self.stdout, self.stderr, self.timed_out = status, stdout, stderr, timed_out

    def __repr__(self):
        return f"RunResult(status={self.status}, stdout={self.stdout[-200:]!r}, stderr={self.stderr[-200:]!r})"


def _command() -> list:
    """The sbxc this module belongs to, whatever the harness did to ``sys.path``. ``-I``:
    the commands run with the project as their current folder, and ``python -m sbxc``
    there would import a ``sbxc`` package from the project first (one that a sandboxed
    command may have written)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-I", "-c",
            f"import sys; sys.path.insert(0, {here!r}); from sbxc.cli import main; sys.exit(main(sys.argv[1:]))"]


def _env() -> dict:
    return dict(os.environ)


class Session:
    """One session; make it with ``Session.start``."""

    def __init__(self, sid: str, project: str, policy=None, info=None, command=None):
        self.id = sid
        self.project = project
        self.policy = policy
        self.info = info or {}
        """What ``session start --format json`` said: method (pool, copy, reflink), workspace, backend."""
        self._command = list(command or _command())
        self.stopped = False

    # ---------------------------------------------------------------- plumbing

    def _sbxc(self, *args, cwd=None, check=True):
        p = subprocess.run(self._command + list(args), cwd=cwd or self.project, env=_env(),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if check and p.returncode not in (0, 1):
            raise SessionError(p.stderr.decode("utf-8", "replace").strip() or f"sbxc exited {p.returncode}")
        return p

    @staticmethod
    def _answer(p) -> dict:
        try:
            return json.loads(p.stdout.decode("utf-8"))
        except ValueError:
            raise SessionError(p.stderr.decode("utf-8", "replace").strip() or "sbxc gave no answer") from None

    # ---------------------------------------------------------------- the operations

    @classmethod
    def start(cls, project, policy=None, from_snapshot=None, stage=(), command=None) -> "Session":
        """Start a session of ``project``: ``policy`` (a path; default: the project's own,
        found as ``sbxc exec`` finds it), ``from_snapshot`` (a snapshot's name), ``stage``
        ((host source, destination in the workspace) pairs, or "SRC:DEST" strings)."""
        project = os.path.realpath(project)
        args = ["session", "start", "--format", "json"]
        if policy:
            args += ["--policy", os.path.realpath(policy)]
        if from_snapshot:
            args += ["--from", from_snapshot]
        for item in stage:
            args += ["--stage", item if isinstance(item, str) else f"{item[0]}:{item[1]}"]
        s = cls("", project, policy, command=command)
        p = s._sbxc(*args)
        if p.returncode != 0:
            raise SessionError(p.stderr.decode("utf-8", "replace").strip())
        info = cls._answer(p)
        s.id, s.info = info["id"], info
        return s

    def run(self, argv, input=None, timeout=None) -> RunResult:
        """Run ``argv`` in the session's workspace; ``input`` (bytes) is its stdin. On
        ``timeout`` (seconds) sbxc gets SIGTERM (passed on to the command), then SIGKILL."""
        cmd = self._command + ["exec", "--session", self.id]
        if self.policy:
            cmd += ["--policy", os.path.realpath(self.policy)]
        p = subprocess.Popen(cmd + ["--"] + list(argv), cwd=self.project, env=_env(),
                             stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = p.communicate(input, timeout=timeout)
            return RunResult(p.returncode, out, err)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                out, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            return RunResult(None, out, err, timed_out=True)

    def diff(self) -> list:
        """[{"path", "change" (added, changed, deleted), "host_changed"}]."""
        return self._answer(self._sbxc("session", "diff", self.id, "--format", "json"))["changes"]

    def apply(self, paths=()) -> dict:
        """Copy the changes (at or under ``paths``, or all) to the host project:
        {"applied": [...], "refused": [{"path", "change", "why"}]}."""
        # After "--": a path the command named "-h" or "--format" is a path, not an option.
        p = self._sbxc("session", "apply", self.id, "--format", "json", "--", *paths)
        if p.returncode != 0 and not p.stdout:
            raise SessionError(p.stderr.decode("utf-8", "replace").strip())
        return self._answer(p)

    def stop(self, snapshot=None) -> None:
        """Discard the workspace, or keep it as the snapshot ``snapshot``."""
        args = ["session", "stop", self.id] + (["--snapshot", snapshot] if snapshot else [])
        p = self._sbxc(*args)
        if p.returncode != 0:
            raise SessionError(p.stderr.decode("utf-8", "replace").strip())
        self.stopped = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.stopped:
            self.stop()
        return False
