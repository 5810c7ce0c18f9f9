"""The host-rule proxy for one run: started before the runner prepares the sandbox, stopped
after the command ended, and its refusals told to the person (SPEC §5).

Imported only for a plan with host rules (``runtime.proxy`` in the plan file), so a run
without them loads none of the proxy.

- bwrap: the proxy's listening socket is made inside the sandbox's own network namespace
  (``proxy_netns``, on loopback port ``SANDBOX_PORT``) while bwrap waits before it execs
  the command; the proxy, outside, accepts on it. The namespace has loopback only: there is
  no route to anything else, and nothing of the host (no socket file, no folder) is bound
  into the sandbox for it.
- OCI (runc): the same listener, made in the container's network namespace between
  `runc create` and `runc start` (``oci_run``), the namespace again with loopback only.
- Landlock: the proxy listens on a loopback TCP port of the host; the runner adds a
  connect rule for that port (the only TCP connect the ruleset allows).
"""
import sys

from .errors import Refusal, one_line

SANDBOX_PORT = 3128
"""The proxy's port on the sandbox's own loopback (bwrap, OCI): a private namespace, so
any fixed port serves."""

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

    def __init__(self, proxy, port: int, at: str, in_sandbox: bool):
        self.proxy = proxy
        self.port = port
        """The port the command connects to on 127.0.0.1 (bwrap, OCI: inside its own namespace)."""
        self.at = at
        self.in_sandbox = in_sandbox
        """True: the proxy waits for its listener, made in the sandbox (``listen_in``)."""
        self.refused: list = []
        self.refused_count = 0
        """Every refused connection, counted (``refused`` keeps the distinct ones, up to a bound)."""
        self.failure = None
        self._stopped = False

    def joiner(self):
        """The started helper that will make the listener in the sandbox (``proxy_netns``)."""
        from .proxy_netns import Joiner

        joiner = Joiner()
        joiner.start()
        return joiner

    def listen_in(self, joiner, launcher_pid: int, child_pid: int) -> None:
        """Make the listener in the network namespace of ``child_pid`` (bwrap's child, or
        the container's first process, whose parent is then ``launcher_pid``: sbxc) and
        hand it to the proxy. ``proxy_netns.NetnsError`` or OSError when that fails."""
        lst = joiner.listen_in(launcher_pid, child_pid, self.port)
        try:
            self.proxy.give_listener(lst)
        finally:
            lst.close()

    def stop(self) -> None:
        """Stop the proxy and collect its refusals (once; the runner may call it first: on
        Landlock, before the command's leftover processes, which sbxc reaps, are ended)."""
        if self._stopped:
            return
        self._stopped = True
        self.proxy.stop()
        self.refused = list(self.proxy.refused())
        self.refused_count = max(int(getattr(self.proxy, "refused_count", 0) or 0), len(self.refused))
        self.failure = getattr(self.proxy, "failure", None)

    def finish(self, cwd: str) -> None:
        """Stop the proxy and print one line per refused host (fixed text, sanitised names),
        one for the refusals that named no host, and the count when not all are shown."""
        self.stop()
        failure = self.failure
        found = [blocked(host, port, self.at, cwd, why) for host, port, why in self.refused if host]
        # Refusals before a host was read (the connection limit's resets, a malformed or
        # unsupported request): counted and said, so that flooding the proxy first cannot
        # hide what it refused.
        unnamed = sorted({_unnamed(why) for host, _port, why in self.refused if not host})
        lines = [blocked_text(*b) for b in found]
        if unnamed:
            lines.append(f"sbxc: blocked connections that named no host ({'; '.join(unnamed)})")
        # --format json loaded it (a text run does not): the same refusals as data.
        status = sys.modules.get(__package__ + ".runstatus")
        if status is not None and status.current is not None:
            for b in found:
                status.current.note_blocked(*b)
            for why in unnamed:
                status.current.note_blocked(None, None, "", self.at, why)
            status.current.blocked_connections = self.refused_count
        from .supervise import own_line  # after the command's output, which may end mid-line

        for line in lines[:_MAX_LINES]:
            own_line(line + "\n")
        shown = min(len(lines), _MAX_LINES)
        # Only when lines were left out (the proxy keeps more distinct refusals than are
        # shown, so one it did not keep means some were): a repeat of a refusal shown is
        # not one more.
        if len(lines) > shown:
            own_line(f"sbxc: ... and {len(lines) - shown} more refusals not shown; "
                     f"{self.refused_count} connections refused in all\n")
        if failure:
            # Never among the refusals the cap leaves out.
            own_line(f"sbxc: warning: the network proxy stopped serving during the run ({one_line(failure, 200)})\n")


def _unnamed(reason: str) -> str:
    """The feedback text for a refusal that named no host (the proxy's own fixed text)."""
    if reason.startswith("too many connections"):
        limit = "".join(ch for ch in reason if "0" <= ch <= "9")[:9]
        return f"the proxy's limit of {limit} open connections was reached; no rule changes that"
    return "".join(ch for ch in reason if ch.isascii() and (ch.isalnum() or ch in " .,:;()'/-_"))[:160]


def _safe(text: str) -> str:
    # The proxy gives ASCII names or addresses only; anything else is dropped, not shown.
    return "".join(ch for ch in str(text) if ch.isascii() and (ch.isalnum() or ch in ".-_:[]*"))[:260]


def blocked(host: str, port: int, at: str, cwd: str, reason: str = "") -> tuple:
    """One refusal as (host, port, rule to add, policy place, why). ``host`` and ``port``
    come from the proxy's own parse, ``reason`` is the proxy's fixed text (with addresses
    it printed itself); both are filtered again to name characters, so a command cannot
    shape what is shown."""
    host = _safe(host)
    port = int(port)
    where = at
    path, _, line = at.rpartition(":")
    if path.startswith("/") and cwd and path.startswith(cwd.rstrip("/") + "/"):
        where = path[len(cwd.rstrip("/")) + 1:] + ":" + line
    rule = f"allow {host}" if port in (80, 443) else f"allow {host}:{port}"
    why = f"not allowed by {where}"
    if reason.startswith("too many connections"):
        # Not the rules: the proxy's bound on open connections (Limits.max_connections).
        return host, port, "", where, _unnamed(reason)
    if reason.startswith("only the SOCKS5 CONNECT command"):
        return host, port, "", where, "only the SOCKS5 CONNECT command is supported"
    plain = True  # the proxy's reason is only that no rule allows the target
    for marker in ("; if that is meant, add: ", "; to allow it: "):
        head, found, tail = reason.partition(marker)
        if found:
            plain = False
            rule = "allow " + _safe(tail[len("allow "):]) if tail.startswith("allow ") else ""
            if marker.startswith("; if"):
                # The name is allowed, but it resolves to an address the proxy uses only
                # where an address rule names it (loopback, private, link-local ...).
                addr = head.rpartition("(")[2].rstrip(")")
                if "this host's own" in head:
                    why = f"it resolves only to {_safe(addr)}, an address of this host itself, which no rule in {where} names"
                else:
                    why = f"it resolves only to the non-public address {_safe(addr)}, which no rule in {where} names"
            elif not rule:
                why = (f"not allowed by {where}: the unspecified address stands for this host itself, which no rule "
                       "may name; connect to the address the service listens on")
            break
    from ..hostnames import is_public, parse_addr

    # The rule a person would add opens a service of this host (or of its private network)
    # to the command: say so, where the hint offers it.
    opens = "the rule would let the command reach what listens there"
    name = host.rstrip(".").lower()
    literal = parse_addr(host.strip("[]"))
    if rule and plain and (name == "localhost" or name.endswith(".localhost")):
        # Always loopback (RFC 6761): a rule on the name never reaches it (SBX048), an
        # address rule does.
        rule = f"allow 127.0.0.1:{port}"
        why += f"; {host} is always this host's loopback, which only an address rule reaches, and {opens}"
    elif rule and literal is not None and not is_public(*literal):
        why += f"; {host} is not a public address (this host's loopback, or a private or link-local network): {opens}"
    return host, port, rule, where, why


def blocked_text(host: str, port: int, rule: str, _where: str, why: str) -> str:
    if not rule:
        return f"sbxc: blocked {host}:{port} ({why})"
    return f"sbxc: blocked {host}:{port} ({why}); allow it with \"{rule}\""


def blocked_line(host: str, port: int, at: str, cwd: str, reason: str = "") -> str:
    """The feedback line for one refusal (``blocked``, worded)."""
    return blocked_text(*blocked(host, port, at, cwd, reason))


def start_proxy(rt: dict, backend: str, env: dict) -> ProxyRun:
    """Start the proxy for the plan's runtime section ``rt``; ``env`` (the command's) gets
    the proxy variables. Refusal (125) when it cannot start."""
    from .proxy import Proxy

    section = rt.get("proxy") or {}
    rules = []
    for host, ports, place, text in section.get("rules", ()):
        rules.append((host, tuple(ports), f"{place}: {text}"))
    in_sandbox = backend in ("bwrap", "oci")
    try:
        if in_sandbox:
            # Started now, so that it starts up while bwrap (runc) does; it serves once
            # the runner has handed it the listener made in the sandbox.
            proxy = Proxy(rules, unix_path=None, tcp_host=None, deferred=True)
            proxy.start()
            port = SANDBOX_PORT
        else:
            proxy = Proxy(rules, unix_path=None, tcp_host="127.0.0.1")
            proxy.start()
            port = proxy.tcp_address[1]
    except (OSError, ValueError) as e:
        raise Refusal(f"the network proxy for the host rules could not start ({one_line(str(e), 200)})",
                      "check the policy's allow rules (sbxc compile --check)") from None
    env.update(proxy_env(port))
    return ProxyRun(proxy, port, section.get("at", ""), in_sandbox)
