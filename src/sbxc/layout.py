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

BACKENDS = ("bwrap", "landlock", "sandbox-exec", "oci")
"""Every backend, in the order reports list them."""
BACKEND_CHOICES = ("auto",) + BACKENDS
"""What ``backend:`` and ``--backend`` accept."""

CACHE_ROOT_TEMPLATE = "/var/tmp/sbxc-{uid}"
"""The default cache root; ``{uid}`` is the caller's uid. It also holds the plan cache."""
PLANS_SUBDIR = "plans"
"""The plan cache folder under the default cache root (0700, out of every sandbox's reach)."""
RUN_DIR_PREFIX = "sbxc-run-"
"""Per-run private folders (Landlock's ``tmpfs`` stand-ins, OCI bundles) start with this."""
RUNS_SUBDIR = "runs"
"""In the plan cache folder: the OCI runs' bundles, one per-run folder each (0700). Apart
from the plans, so that reaping stale ones lists a few entries, not every cached plan."""
CACHE_MARKER_SUFFIX = ".project"
"""Beside each project's cache folder in the root: ``<project-id>.project`` names the project."""


BWRAP_EMPTY_FD = "@fd:empty"
"""In a bwrap plan's argv: a fresh descriptor of an empty file goes here (masked files)."""

PACKAGE_DIR = __file__.rpartition("/")[0]
"""The installed package's folder (a module's ``__file__`` is absolute)."""


def builtin_policy_path(name: str) -> str:
    """The file of ``builtin:NAME`` (shipped in the package's ``policies/``)."""
    return f"{PACKAGE_DIR}/policies/{name}.yaml"


ROOT_ENV = "SBXC_ROOT"
"""Names another default cache root (and so another plans folder). The command line checks
once, before any command runs, that a value set is a normal absolute path; test suites and
throwaway environments use it so they never touch the caller's real root."""


def default_cache_root(uid: int, environ=None) -> str:
    """The default cache root: ``$SBXC_ROOT`` from ``environ`` when set, else
    ``/var/tmp/sbxc-{uid}``."""
    if environ is not None:
        root = environ.get(ROOT_ENV)
        if root:
            return root
    return CACHE_ROOT_TEMPLATE.replace("{uid}", str(uid))


def plans_dir(uid: int, environ=None) -> str:
    return default_cache_root(uid, environ) + "/" + PLANS_SUBDIR


def root_env_problem(environ) -> str | None:
    """Why ``$SBXC_ROOT`` cannot be used, or None when it is unset or a normal absolute path."""
    root = environ.get(ROOT_ENV)
    if root is None:
        return None
    parts = root.split("/")
    if (not root.startswith("/") or root == "/" or root.endswith("/") or "//" in root
            or "." in parts or ".." in parts or "\0" in root):
        return f"{ROOT_ENV}={root!r} is not a normal absolute path"
    return None


MAX_POLICY_BYTES = 1 << 20
"""The largest policy file the compiler reads; the runtime hashes none larger."""
