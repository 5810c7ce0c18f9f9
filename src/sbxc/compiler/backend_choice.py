"""Which backend ``backend: auto`` means on a host: a pure function of the host facts."""
from __future__ import annotations

from ..hostfacts import HostFacts


def choose_backend(requested: str, host: HostFacts) -> tuple[str, str]:
    """Resolve ``auto``: bwrap where it works here, else Landlock, else sandbox-exec on macOS.

    Returns (backend, reason). An explicit choice is kept as it is; whether it can run here
    is the runtime's question (it refuses with 125 when it cannot).
    """
    if requested != "auto":
        return requested, "chosen by the policy or the command line"
    if host.platform == "darwin":
        return "sandbox-exec", "macOS"
    if host.bwrap and host.userns:
        return "bwrap", f"bwrap {host.bwrap_version or ''} works here (user namespaces allowed)".replace("  ", " ")
    if host.landlock_abi > 0:
        why = "bwrap is not installed" if not host.bwrap else "bwrap cannot create user namespaces here"
        return "landlock", f"{why}; Landlock ABI {host.landlock_abi} is available"
    return "bwrap", "neither bwrap with user namespaces nor Landlock works here (a run will refuse)"
