"""What a failed command's stderr tells sbxc, and the fixed lines it prints after it
(SPEC §5): the network hint, and the rule that refused a path.

The safety rule for both: the command's output is untrusted. It may *trigger* a line,
and it may *select* among the rules the plan itself lists (a path it names picks the
deepest rule of the plan's checks containing it), but no byte of it is ever printed by
sbxc. Every line printed here is a constant, or text taken from the plan (a rule as the
policy wrote it, its ``file:line:col``).

Hot path: only ``bytes`` methods, per line of stderr; no ``re``. The rules are looked at
only after a failed run whose stderr held a permission or read-only error.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
from .staleness import deepest_check

# Lower-case bytes, matched case-insensitively on each line of stderr.
NETWORK_PATTERNS = (
    b"could not resolve",  # curl, git: "Could not resolve host"; ssh: "... hostname"
    b"name resolution",  # glibc EAI_AGAIN: "Temporary failure in name resolution"
    b"name or service not known",  # glibc EAI_NONAME (pip, Python, ssh)
    b"no address associated with hostname",  # glibc EAI_NODATA
    b"temporary failure resolving",  # apt
    b"eai_again",  # Node (npm): "getaddrinfo EAI_AGAIN registry.npmjs.org"
    b"getaddrinfo enotfound",  # Node
    b"network is unreachable",
    b"network is down",
    b"no route to host",
    b"connection refused",
    b"cannot assign requested address",
)
NETWORK_HINT = (
    "sbxc: hint: the network is off in this sandbox; if the command needs it, run "
    "`sbxc exec --network=true ...` or set `network: true` in the policy\n"
)

# Under Landlock with the network off, seccomp refuses every AF_INET/AF_INET6 socket with
# EPERM: the command reports a permission error ("PermissionError: [Errno 1] Operation not
# permitted", "connect EPERM"), not a network one. Taken as the network's only when the
# same stderr also speaks of sockets or connections (a Python traceback names socket.py).
_PERMISSION = (b"operation not permitted", b"eperm", b"permission denied", b"eacces")
_SOCKET_CONTEXT = (b"socket", b"connect", b"urlopen", b"getaddrinfo")

# Text of EACCES, EROFS in common tools (coreutils, Python, Node, git, pip).
_ACCESS = (b"permission denied", b"eacces")
_READ_ONLY = (b"read-only file system", b"erofs")

_MAX_LINE = 4096  # a longer line is cut: its first part is scanned
_MAX_DENIALS = 16  # permission lines kept for after the run

# What each kind of refusal means and how to allow it; fixed text, {rule} and {where}
# come from the plan.
_DENIAL_TEXT = {
    "read": "sbxc: hint: `{rule}` ({where}) makes that path read-only in this sandbox; if the command must "
            "write there, add a `write` rule for the folder to the policy (the deepest rule wins)\n",
    "mask": "sbxc: hint: the sandbox refused that path: `{rule}` ({where}) hides it; remove or narrow that "
            "rule if the command needs it\n",
    "none": "sbxc: hint: the sandbox refused that path: `{rule}` ({where}) gives no access to it; add a "
            "`read` or `write` rule for it if the command needs it\n",
    "tmpfs": "sbxc: hint: the sandbox refused that path: under `{rule}` ({where}) Landlock gives the command a "
             "fresh per-run folder ($TMPDIR) instead of the host's folder; write in $TMPDIR, or add a `write` "
             "rule for the folder to the policy\n",
}


class StderrScan:
    """Fed every chunk of the command's stderr (as relayed); remembers what matters for
    the lines after the run. Bounded memory: one partial line and a few kept lines."""

    __slots__ = ("network_off", "landlock", "partial", "network", "permission", "socket_words", "denials")

    def __init__(self, network_off: bool, landlock: bool):
        self.network_off = network_off
        self.landlock = landlock
        self.partial = b""
        self.network = False
        self.permission = False
        self.socket_words = False
        self.denials: list = []

    def feed(self, chunk: bytes) -> None:
        data = self.partial + chunk if self.partial else chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()[-_MAX_LINE:]
        for line in lines:
            self._line(line[:_MAX_LINE])

    def finish(self) -> None:
        if self.partial:
            self._line(self.partial)
            self.partial = b""

    def _line(self, line: bytes) -> None:
        low = line.lower()
        if self.network_off and not self.network:
            for p in NETWORK_PATTERNS:
                if p in low:
                    self.network = True
                    break
            if self.landlock and not self.network:
                if not self.permission and any(p in low for p in _PERMISSION):
                    self.permission = True
                if not self.socket_words and any(p in low for p in _SOCKET_CONTEXT):
                    self.socket_words = True
        if len(self.denials) < _MAX_DENIALS and b"/" in line:
            ro = any(p in low for p in _READ_ONLY)
            if ro or any(p in low for p in _ACCESS):
                self.denials.append((line, ro))

    def network_hint(self) -> bool:
        """Whether the failed run gets the network hint."""
        if not self.network_off:
            return False
        return self.network or (self.landlock and self.permission and self.socket_words)


_SEPARATORS = b"\t\"'`,;:()[]<>{}="


def _program_prefix(line: bytes) -> bool:
    """Whether the line starts with the path of the program that wrote it
    ("/usr/bin/sh: 1: cannot create x: ..."): an executable file, followed by ':'."""
    if not line.startswith(b"/"):
        return False
    head = line.split(b":", 1)[0]
    if not head or b" " in head:
        return False
    try:
        path = head.decode("utf-8", "surrogateescape")
        return os.path.isfile(path) and os.access(path, os.X_OK)
    except (OSError, ValueError):
        return False


def _paths_in(line: bytes) -> list:
    """Absolute paths a line seems to name (a token that starts with '/'), as text. The
    program's own path at the start of a line is not one: the error is about another
    (a relative path, when no other absolute one follows)."""
    if _program_prefix(line):
        line = line.split(b":", 1)[1]
    for sep in _SEPARATORS:
        line = line.replace(bytes((sep,)), b" ")
    out = []
    for tok in line.split():
        if tok.startswith(b"/") and len(tok) < 4096:
            tok = tok.rstrip(b".")
            out.append(tok.decode("utf-8", "surrogateescape"))
    return out


def denial_line(scan: StderrScan, checks, landlock: bool) -> str:
    """The one line naming the rule that refused a path the failed command's stderr
    reports as denied or read-only, or "" when no rule of the plan explains it.

    Which refusals are the plan's: EROFS comes from bwrap's read-only mounts (a `read`
    rule, a mask); under Landlock every refused path gives EACCES (a `read` rule refuses
    writes, a mask or `tmpfs` everything). EACCES under bwrap is the host's own file
    permissions, except on a masked path."""
    for line, read_only in scan.denials:
        # The path whose rule is the deepest: a line often starts with the program's own
        # path ("/usr/bin/sh: 1: cannot create /p/x: Permission denied"), which a broad
        # rule such as `read /` covers; the path the error is about has the nearer rule.
        check, depth = None, -1
        for path in _paths_in(line):
            c = deepest_check(checks, path)
            d = -1 if c is None else (0 if c[0] == "/" else c[0].count("/"))
            if d >= depth and c is not None:
                check, depth = c, d
        if check is not None:
            access = check[2]
            if read_only:
                ok = access in ("read", "mask", "none")
            elif landlock:
                ok = access in ("read", "mask", "none", "tmpfs")
            else:
                ok = access in ("mask", "none")
            if not ok or access not in _DENIAL_TEXT:
                continue
            written = check[4] if len(check) > 4 and isinstance(check[4], str) else check[0]
            where = check[3] if len(check) > 3 and isinstance(check[3], str) and check[3] else "implied by sbxc"
            return _DENIAL_TEXT[access].format(rule=_printable(f"{access} {written}"), where=_printable(where))
    return ""


def _printable(text: str) -> str:
    """The plan's text on one line, without control characters (a policy's path may hold any)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:300]
