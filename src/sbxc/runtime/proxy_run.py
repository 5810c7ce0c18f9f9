"""The host-rule proxy for one run: started before the runner prepares the sandbox, stopped
after the command ended, and its refusals told to the person (SPEC §5).

Imported only for a plan with host rules (``runtime.proxy`` in the plan file), so a run
without them loads none of the proxy.

- bwrap: the proxy listens on a Unix socket in a private folder (0700) that is bound into
  the sandbox at the same path; inside, ``proxy_forward`` listens on loopback port
  ``FORWARD_PORT`` of the sandbox's own network namespace and relays to that socket, then
  execs the command. The namespace has loopback only: there is no route to anything else.
- Landlock: the proxy listens on a loopback TCP port of the host; the runner adds a
  connect rule for that port (the only TCP connect the ruleset allows).
"""
from __future__ import annotations

import os
import sys

from .errors import Refusal, one_line

FORWARD_PORT = 3128
"""The forwarder's port on the sandbox's own loopback (bwrap): a private namespace, so any
fixed port serves."""

_MAX_LINES = 20


def proxy_env(port: int) -> dict:
    """What HTTP clients, pip, npm, git, cargo and Go read to use the proxy, with no dotfile."""
    http = f"http://127.0.0.1:{port}"
    socks = f"socks5h://127.0.0.1:{port}"  # h: the proxy resolves names; DNS inside is not needed
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = env[name.lower()] = http
    env["ALL_PROXY"] = env["all_proxy"] = socks
    # Nothing bypasses the proxy: a loopback name would be refused there, as anywhere.
    env["NO_PROXY"] = env["no_proxy"] = ""
    env["PIP_PROXY"] = http                      # pip (it also reads HTTPS_PROXY)
    env["npm_config_proxy"] = http               # npm
    env["npm_config_https_proxy"] = http
    env["CARGO_HTTP_PROXY"] = http               # cargo
    return env


class ProxyRun:
    """The running proxy of one run, and what the sandbox needs to reach it."""

    def __init__(self, proxy, folder: str, port: int, at: str, unix_path: str):
        self.proxy = proxy
        self.folder = folder
        self.port = port
        """bwrap: the forwarder's port inside; Landlock: the proxy's own loopback port."""
        self.at = at
        self.unix_path = unix_path
        self.refused: list = []
        self.failure = None
        self._stopped = False

    def stop(self) -> None:
        """Stop the proxy and collect its refusals (once; the runner may call it first: on
        Landlock, before the command's leftover processes, which sbxc reaps, are ended)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.proxy.stop()
            self.refused = list(self.proxy.refused())
            self.failure = getattr(self.proxy, "failure", None)
        finally:
            try:
                os.rmdir(self.folder)
            except OSError:
                pass

    def finish(self, cwd: str) -> None:
        """Stop the proxy and print one line per refused host (fixed text, sanitised names)."""
        self.stop()
        failure = self.failure
        lines = [blocked_line(host, port, self.at, cwd, why) for host, port, why in self.refused if host]
        if failure:
            lines.append(f"sbxc: warning: the network proxy stopped serving during the run ({one_line(failure, 200)})")
        for line in lines[:_MAX_LINES]:
            sys.stderr.write(line + "\n")
        if len(lines) > _MAX_LINES:
            sys.stderr.write(f"sbxc: ... and {len(lines) - _MAX_LINES} more blocked connections\n")


def _safe(text: str) -> str:
    # The proxy gives ASCII names or addresses only; anything else is dropped, not shown.
    return "".join(ch for ch in str(text) if ch.isascii() and (ch.isalnum() or ch in ".-_:[]*"))[:260]


def blocked_line(host: str, port: int, at: str, cwd: str, reason: str = "") -> str:
    """The feedback line for one refusal. ``host`` and ``port`` come from the proxy's own
    parse, ``reason`` is the proxy's fixed text (with addresses it printed itself); both
    are filtered again to name characters, so a command cannot shape the line."""
    host = _safe(host)
    port = int(port)
    where = at
    path, _, line = at.rpartition(":")
    if path.startswith("/") and cwd and path.startswith(cwd.rstrip("/") + "/"):
        where = path[len(cwd.rstrip("/")) + 1:] + ":" + line
    rule = f"allow {host}" if port in (80, 443) else f"allow {host}:{port}"
    why = f"not allowed by {where}"
    for marker in ("; if that is meant, add: ", "; to allow it: "):
        head, found, tail = reason.partition(marker)
        if found and tail.startswith("allow "):
            rule = "allow " + _safe(tail[len("allow "):])
            if marker.startswith("; if"):
                # The name is allowed, but it resolves to an address the proxy uses only
                # where an address rule names it (loopback, private, link-local ...).
                addr = head.rpartition("(")[2].rstrip(")")
                why = f"it resolves only to the non-public address {_safe(addr)}, which no rule in {where} names"
            break
    return f"sbxc: blocked {host}:{port} ({why}); allow it with \"{rule}\""


def _private_folder(backend: str) -> str:
    """A new 0700 folder for the proxy's socket. bwrap binds it at the same path, so it is
    made in /tmp (a sticky folder every sandbox can show, or mount over); the other
    backends use the caller's runtime folder where there is one."""
    base = "/tmp"
    if backend != "bwrap":
        runtime = os.environ.get("XDG_RUNTIME_DIR", "")
        if runtime.startswith("/") and os.path.isdir(runtime):
            base = runtime
    for _ in range(16):
        name = os.path.join(base, "sbxc-proxy-" + os.urandom(8).hex())
        try:
            os.mkdir(name, 0o700)  # fails on an existing name, link or not: never reused
        except FileExistsError:
            continue
        return name
    raise OSError("could not make a private folder for the proxy's socket")


def start_proxy(rt: dict, backend: str, env: dict) -> ProxyRun:
    """Start the proxy for the plan's runtime section ``rt``; ``env`` (the command's) gets
    the proxy variables. Refusal (125) when it cannot start."""
    from .proxy import Proxy

    section = rt.get("proxy") or {}
    rules = []
    for host, ports, place, text in section.get("rules", ()):
        rules.append((host, tuple(ports), f"{place}: {text}"))
    folder = ""
    try:
        folder = _private_folder(backend)
        if backend == "bwrap":
            unix_path = os.path.join(folder, "proxy.sock")
            proxy = Proxy(rules, unix_path=unix_path, tcp_host=None)
            proxy.start()
            port = FORWARD_PORT
        else:
            unix_path = ""
            proxy = Proxy(rules, unix_path=None, tcp_host="127.0.0.1")
            proxy.start()
            port = proxy.tcp_address[1]
    except (OSError, ValueError) as e:
        if folder:
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise Refusal(f"the network proxy for the host rules could not start ({one_line(str(e), 200)})",
                      "check the policy's allow rules (sbxc compile --check) and the temporary folder") from None
    env.update(proxy_env(port))
    return ProxyRun(proxy, folder, port, section.get("at", ""), unix_path)
