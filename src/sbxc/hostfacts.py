"""Facts about a host that a compiled plan assumes. Pure data: probing lives in runtime/.

Backends take these as input, so golden tests can lower a plan for any host.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict

# Defined in the leaf without dataclasses: a cached Landlock run checks listings with it.
from .landlock_abi import listing_digest  # noqa: F401


@dataclass(frozen=True, slots=True)
class HostFacts:
    platform: str = "linux"
    """``linux`` or ``darwin``."""
    arch: str = "x86_64"
    uid: int = 1000
    gid: int = 1000
    home: str = "/home/user"
    landlock_abi: int = 0
    """0 when Landlock is missing or disabled."""
    bwrap: str = ""
    """Absolute path of bwrap, empty when not installed."""
    bwrap_version: str = ""
    userns: bool = False
    """Unprivileged user namespaces work (bwrap can run)."""
    seccomp: bool = False
    private_mounts: bool = False
    """bwrap can run inside a mount namespace whose mounts are private (``unshare(1)``, with a
    user namespace of the caller's own when not root): a mount the host makes during a run
    then stays out of the sandbox (bwrap alone keeps its mounts slaves of the host's)."""
    listings: tuple = ()
    """``((folder, ((name, kind), ...)), ...)``: entries of the folders the Landlock lowering
    splits (a granting rule with a stricter one beneath); empty for other backends."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HostFacts":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
