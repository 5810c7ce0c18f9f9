"""The one place that words a refusal: ``sbxc: <cause>; <fix>``, and maps bwrap's own
failure messages to a cause and a fix.

Imported on the ``exec`` hot path: no ``re``, no ``json``, nothing heavy.
"""
REFUSED = 125
"""Exit status when sbxc refused or failed before the command ran (SPEC §4)."""


class Refusal(Exception):
    """Raised anywhere before the command starts; ``exec_main`` prints it and exits 125."""

    def __init__(self, cause: str, fix: str):
        super().__init__(cause, fix)
        self.cause = cause
        self.fix = fix

    def line(self) -> str:
        return refusal_line(self.cause, self.fix)


class NotStartable(Exception):
    """Raised by a runner before the command starts when the command cannot be started (a
    file that cannot be executed, a missing interpreter): the core prints sbxc's line and
    exits ``code`` (126 or 127), as a shell would; nothing ran."""

    def __init__(self, code: int, what: str):
        super().__init__(code, what)
        self.code = code
        self.what = what

    def line(self) -> str:
        return f"sbxc: {one_line(self.what, 200)}: {'command not found' if self.code == 127 else 'cannot execute'}"


class PlanOutdated(Exception):
    """A check made after the runner prepared the run found the cached plan made by other
    compiler code: nothing of the command ran; the caller compiles again and runs anew."""


def refusal_line(cause: str, fix: str) -> str:
    return f"sbxc: {one_line(cause)}; {one_line(fix)}"


def one_line(text: str, limit: int = 400) -> str:
    """Printable, single line, bounded: text from bwrap or a path may hold anything."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in "\n\r\t":
            out.append(" ")
        elif o < 32 or o == 127 or 0x80 <= o < 0xA0:
            out.append("?")
        else:
            out.append(ch)
    s = "".join(out).strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


_USERNS_FIX = (
    "allow unprivileged user namespaces on this host (sysctl user.max_user_namespaces>0, "
    "kernel.unprivileged_userns_clone=1, or the AppArmor profile for bwrap on Ubuntu), "
    "or run with --backend landlock"
)

# (substring of bwrap's stderr, cause, fix), first match wins. bwrap prefixes its own
# messages with "bwrap: "; these are the ones it prints before the command starts.
BWRAP_FAILURES: tuple[tuple[str, str, str], ...] = (
    # bwrap before 0.5 said "creating"; 0.5 and later (Debian 12's 0.8.0) say "create".
    ("No permissions to create new namespace", "the kernel refused bwrap a new user namespace", _USERNS_FIX),
    ("No permissions to creating new namespace", "the kernel refused bwrap a new user namespace", _USERNS_FIX),
    ("Creating new namespace failed", "the kernel refused bwrap a new namespace", _USERNS_FIX),
    ("setting up uid map", "bwrap could not map the caller's uid in the new user namespace", _USERNS_FIX),
    ("setting up gid map", "bwrap could not map the caller's gid in the new user namespace", _USERNS_FIX),
    ("unshare user ns", "the kernel refused bwrap a nested user namespace", _USERNS_FIX),
    (
        "loopback:",
        "bwrap could not set up loopback in a new network namespace (network is off), the kernel or an outer sandbox refused it",
        "run where network namespaces are allowed, or use --backend landlock; sbxc never falls back to a run with the network on",
    ),
    (
        "Failed to make / slave",
        "bwrap could not make a private mount namespace (an outer sandbox or container forbids it)",
        "run outside that sandbox, give the container CAP_SYS_ADMIN in its user namespace, or use --backend landlock",
    ),
    (
        "Failed to mount tmpfs",
        "bwrap could not mount its root tmpfs (mounting is refused here)",
        "run outside that sandbox or use --backend landlock",
    ),
    (
        "Can't mount proc",
        "the kernel refused bwrap a fresh /proc (an outer sandbox or container hides parts of its /proc)",
        "run outside that sandbox, or use --backend landlock",
    ),
    (
        "Can't find source path",
        "a path in the plan is gone since it was compiled",
        "recompile the plan (sbxc compile -o PLAN) or use --policy",
    ),
    (
        "Can't create file at",
        "bwrap could not create a mount point the plan needs",
        "recompile the plan; check that the paths in the policy still exist",
    ),
    (
        "Can't mkdir",
        "bwrap could not create a mount point the plan needs",
        "recompile the plan; check that the paths in the policy still exist",
    ),
    (
        "Creating root mountpoint failed",
        "bwrap could not create its private root under /run/user or /tmp",
        "check that /tmp is writable on the host",
    ),
    (
        "Can't chdir",
        "the current folder vanished before the command could start in it",
        "run sbxc from an existing folder the policy shows",
    ),
    (
        # bwrap 0.8: "Unable to set up system call filtering as requested: prctl(PR_SET_SECCOMP) ..."
        "system call filtering",
        "the kernel refused to load the plan's seccomp filter",
        "check that seccomp is enabled (sbxc doctor), or recompile the plan on this host",
    ),
    (
        "prctl(PR_SET_SECCOMP)",
        "the kernel refused to load the plan's seccomp filter",
        "check that seccomp is enabled (sbxc doctor)",
    ),
    (
        "seccomp",
        "bwrap could not load the plan's seccomp filter",
        "recompile the plan on this host (sbxc compile -o PLAN)",
    ),
    (
        "Unknown option",
        "this bwrap does not understand an option in the plan",
        "install bwrap 0.8 or newer, or recompile the plan on this host",
    ),
)


def bwrap_failure(stderr_text: str) -> tuple[str, str]:
    """(cause, fix) for bwrap failing before the command ran; ``stderr_text`` is its stderr."""
    lines = [ln for ln in stderr_text.splitlines() if ln.strip()]
    # A bare "bwrap: " (a message whose text was cut off) names nothing.
    own = [ln for ln in lines if ln.startswith("bwrap: ") and ln[7:].strip()] or lines
    msg = own[-1] if own else ""
    for needle, cause, fix in BWRAP_FAILURES:
        if needle in msg:
            return f"{cause} (bwrap: {msg[7:] if msg.startswith('bwrap: ') else msg})", fix
    if msg:
        return f"bwrap failed before the command started ({msg})", "see `sbxc doctor` for what this host can enforce"
    return (
        "bwrap failed before the command started (its message is above, or it gave none)",
        "see `sbxc doctor` for what this host can enforce",
    )


def shown(name: str) -> str:
    """A path the session's command chose, as text that cannot pass for anything else on a
    terminal or in a listing (``sbxc.printable.escaped``, the backslash included)."""
    from ..printable import escaped

    return escaped(name)
