"""``sbxc exec --format json``: one JSON object about the run, for harnesses.

Loaded only with ``--format json`` (the ``exec`` hot path imports none of it, and ``json``
only when the object is written). While the run lasts, sbxc's own lines on stderr pass
through a recorder (``sys.stderr`` is replaced: sbxc writes its messages through it, while
the command's stderr is relayed to the descriptor directly and never passes here), and the
proxy of a run with host rules reports each refused host as data (``blocked``). After the
run the object goes to the status descriptor:

    {"blocked": [{"host": "example.com", "policy": "sandbox.policy.yaml:5", "port": 443,
                  "reason": "not allowed by sandbox.policy.yaml:5", "rule": "allow example.com"}],
     "exit_status": 0, "format": "sbxc-exec-status/1", "hints": [], "ran": true,
     "refusal": null, "warnings": ["sbxc: warning: ..."]}

Which channel: ``--status-fd N`` (default 2). On stderr the object follows everything
sbxc and the command wrote, and the command can write a look-alike there: a harness that
must trust the status passes a descriptor of its own (a pipe), which sbxc never passes to
the command (every descriptor but 0, 1, 2 is closed before the command's exec).
"""
from __future__ import annotations

from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from .errors import Refusal

current = None
"""The run's Recorder while one is active (read by ``proxy_run`` for the refused hosts)."""


class _Tee:
    """Passes every write on to the real stderr and keeps sbxc's complete lines."""

    def __init__(self, real, lines: list):
        self._real = real
        self._lines = lines
        self._part = ""

    def write(self, text) -> int:
        n = self._real.write(text)
        self._take(str(text))
        return n

    def _take(self, text: str) -> None:
        text = self._part + text
        *done, self._part = text.split("\n")
        self._lines.extend(done)

    def sbxc_note(self, text: str) -> None:
        """Lines sbxc wrote to the descriptor itself (the feedback after the run)."""
        self._take(text if text.endswith("\n") else text + "\n")

    def flush(self) -> None:
        self._real.flush()

    def __getattr__(self, name):
        return getattr(self._real, name)


class Recorder:
    """Collects one run's status; ``finish(rc)`` writes it. A bad ``fd`` is a refusal."""

    def __init__(self, fd, state):
        if fd is None:
            fd = 2
        else:
            try:
                fd = int(fd, 10)
                if fd < 0:
                    raise ValueError
            except ValueError:
                raise Refusal(f"exec: --status-fd {fd!r} is not a descriptor number",
                              "give the number of an open descriptor, e.g. --status-fd 3") from None
        try:
            os.fstat(fd)
        except OSError:
            raise Refusal(f"exec: --status-fd {fd} is not open", "open it for sbxc (e.g. 3>status.json)") from None
        self.fd = fd
        self.state = state
        self.lines: list[str] = []
        self.blocked: list[dict] = []
        self.blocked_connections = 0
        self._real = sys.stderr
        sys.stderr = _Tee(self._real, self.lines)
        global current
        current = self

    def note_blocked(self, host, port, rule: str, policy: str, reason: str) -> None:
        # rule: None where no rule would admit it (the connection limit, the unspecified
        # address); host and port: None for refusals before a host was read
        self.blocked.append({"host": host, "port": port, "rule": rule or None, "policy": policy, "reason": reason})

    def status(self, rc: int) -> dict:
        warnings, hints, errors = [], [], []
        for line in self.lines:
            if not line.startswith("sbxc: "):
                continue
            if line.startswith("sbxc: warning: "):
                warnings.append(line)
            elif line.startswith("sbxc: hint: "):
                hints.append(line)
            elif not line.startswith("sbxc: blocked ") and not line.startswith("sbxc: ... and "):
                errors.append(line)
        # 125 with sbxc's own line: refused before the command ran; 126/127 with one: the
        # command could not be started. Any other status is the command's.
        refusal = errors[-1] if errors and rc in (125, 126, 127) else None
        return {"format": "sbxc-exec-status/1", "ran": bool(self.state.started) and refusal is None, "exit_status": rc,
                "refusal": refusal, "blocked": self.blocked, "blocked_connections": self.blocked_connections,
                "warnings": warnings, "hints": hints}

    def finish(self, rc: int) -> None:
        global current
        current = None
        tee, sys.stderr = sys.stderr, self._real
        if isinstance(tee, _Tee) and tee._part:
            self.lines.append(tee._part)
        import json

        data = (json.dumps(self.status(rc), ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        while data:
            try:
                n = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                return  # the reader went away: the exit status still tells the outcome
            data = data[n:]
