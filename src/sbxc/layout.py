"""Names and folder layout shared by every layer: a leaf that imports nothing.

The ``exec`` hot path uses these too, so this module must stay free of imports (each
import on that path costs start-up time on every run); other modules take the values
from here instead of writing them again.
"""

VERSION = "0.1.0"

PLAN_FORMAT = "sbxc-plan/1"
"""The ``format`` field of a plan file (sbxc.planfile)."""

POLICY_NAME = "sandbox.policy.yaml"
"""The policy file discovery looks for, in the current folder and each parent."""
DEFAULT_POLICY = "builtin:default"
"""What applies when discovery finds no policy file."""
BUILTIN_PREFIX = "builtin:"

INTERNAL_ERROR = 3
"""Exit status of a command other than ``exec`` when sbxc itself broke (a bug), as opposed to
1 for a policy with errors (docs/decisions.md)."""

BACKENDS = ("bwrap", "landlock", "sandbox-exec")
"""Every backend, in the order reports list them."""
BACKEND_CHOICES = ("auto",) + BACKENDS
"""What ``backend:`` and ``--backend`` accept."""

CACHE_ROOT_TEMPLATE = "/var/tmp/sbxc-{uid}"
"""The default cache root; ``{uid}`` is the caller's uid. It also holds the plan cache."""
PLANS_SUBDIR = "plans"
"""The plan cache folder under the default cache root (0700, out of every sandbox's reach)."""
RUN_DIR_PREFIX = "sbxc-run-"
CACHE_MARKER_SUFFIX = ".project"
"""Beside each project's cache folder in the root: ``<project-id>.project`` names the project."""
"""Per-run private folders (Landlock's ``tmpfs`` stand-ins) start with this."""


BWRAP_EMPTY_FD = "@fd:empty"
"""In a bwrap plan's argv: a fresh descriptor of an empty file goes here (masked files)."""

PACKAGE_DIR = __file__.rpartition("/")[0]
"""The installed package's folder (a module's ``__file__`` is absolute)."""


def builtin_policy_path(name: str) -> str:
    """The file of ``builtin:NAME`` (shipped in the package's ``policies/``)."""
    return f"{PACKAGE_DIR}/policies/{name}.yaml"


def default_cache_root(uid: int) -> str:
    return CACHE_ROOT_TEMPLATE.replace("{uid}", str(uid))


def plans_dir(uid: int) -> str:
    return default_cache_root(uid) + "/" + PLANS_SUBDIR


MAX_POLICY_BYTES = 1 << 20
"""The largest policy file the compiler reads; the runtime hashes none larger."""
