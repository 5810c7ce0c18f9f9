"""Per-project dependency caches, compile side (SPEC §6): names, paths and variables.

Nothing here touches the disk. ``normalize`` turns the policy's ``cache:`` key into a
``CachePlan`` with these functions; the run-time checks, creation and the throwaway
fallback live in ``sbxc.runtime.cachedir`` (on the ``exec`` hot path, so it does not
import this module).

Layout on the host::

    {root}/                      the cache root, 0700, owned by the caller
    {root}/{project-id}/         one project's cache: the only part the sandbox can write
    {root}/{project-id}.project  marker: the project's real path, written by sbxc (not by
                                 the sandbox), read by ``sbxc doctor``
"""
import hashlib
import os

from .layout import CACHE_MARKER_SUFFIX as MARKER_SUFFIX, CACHE_ROOT_TEMPLATE as ROOT_TEMPLATE  # noqa: F401
from .layout import default_cache_root

# Tool name (as written in ``cache.tools``) -> the variables that point it at its cache.
# Each variable gets its own subfolder of the project's cache (``SUBDIRS``), so two tools
# never share a folder layout they did not agree on.
#
# ``pip`` also sets ``UV_CACHE_DIR``: uv is a drop-in installer for the same packages and
# a project moves between the two freely; one name for "Python packages" keeps the tool
# list the one the contract shows. uv keeps its own subfolder (its format differs).
TOOLS: dict[str, tuple[str, ...]] = {
    "pip": ("PIP_CACHE_DIR", "UV_CACHE_DIR"),
    "npm": ("npm_config_cache",),
    "go": ("GOMODCACHE", "GOCACHE"),
    "cargo": ("CARGO_HOME",),
    "gradle": ("GRADLE_USER_HOME",),
    "playwright": ("PLAYWRIGHT_BROWSERS_PATH",),
    "xdg": ("XDG_CACHE_HOME",),
}

# Variable -> subfolder of the project's cache folder.
SUBDIRS: dict[str, str] = {
    "PIP_CACHE_DIR": "pip",
    "UV_CACHE_DIR": "uv",
    "npm_config_cache": "npm",
    "GOMODCACHE": "go/mod",
    "GOCACHE": "go/build",
    "CARGO_HOME": "cargo",
    "GRADLE_USER_HOME": "gradle",
    "PLAYWRIGHT_BROWSERS_PATH": "playwright",
    "XDG_CACHE_HOME": "xdg",
}

DEFAULT_TOOLS: tuple[str, ...] = tuple(TOOLS)
"""What ``cache.tools`` means when the policy does not set it: every tool."""

# Readable part of a project id: at most this many characters of the folder's name.
_NAME_MAX = 40
_HASH_CHARS = 16  # 64 bits of sha256: collisions need ~2^32 projects under one root
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def default_root(uid: int, environ=None) -> str:
    """The default cache root: ``/var/tmp/sbxc-{uid}`` (``$SBXC_ROOT`` from ``environ`` when set).

    Outside the home folder (which stays read-only in the sandbox) and on disk rather than
    in a RAM-backed ``/tmp``. ``/var/tmp`` is world-writable and sticky: another user can
    pre-create this name, which the runtime detects (owner check) before using it.
    """
    return default_cache_root(uid, environ)


def project_id(real_path: str) -> str:
    """A stable folder name for the project at ``real_path`` (already symlink-resolved).

    ``<name>-<hash>``: the last path component, reduced to ``[A-Za-z0-9._-]`` so a listing
    is readable and no name can carry ``/``, control characters or a leading dot; then 16
    hex digits of the SHA-256 of the whole real path, which alone makes the id unique:
    names that sanitise alike (``/x/a b`` and ``/y/a_b``) still differ in the hash.
    """
    if not real_path.startswith("/"):
        raise ValueError(f"project path must be absolute: {real_path!r}")
    norm = os.path.normpath(real_path)
    if norm.startswith("//"):  # POSIX keeps a leading "//"; it is the same folder as "/"
        norm = "/" + norm.lstrip("/")
    tail = os.path.basename(norm) or "root"
    name = "".join(c if c in _SAFE else "_" for c in tail)[:_NAME_MAX]
    name = "_" + name[1:] if name.startswith(".") else name
    digest = hashlib.sha256(norm.encode("utf-8", "surrogateescape")).hexdigest()[:_HASH_CHARS]
    return f"{name}-{digest}"


def project_dir(root: str, real_path: str) -> str:
    """``{root}/{project-id}``. ``root`` is used as written (normalized, not resolved):
    the runtime checks that it is no symlink; resolving it here would follow one."""
    return os.path.join(os.path.normpath(root), project_id(real_path))


def marker_path(root: str, pid: str) -> str:
    return os.path.join(os.path.normpath(root), pid + MARKER_SUFFIX)


def cache_env(tools, cache_dir: str) -> tuple[tuple[str, str], ...]:
    """The variables for ``tools``, each pointing at its own subfolder of ``cache_dir``.

    Sorted by name, deterministic. Unknown tool names raise ``KeyError`` (validation
    reports them to the user first, with a "did you mean").
    """
    out = {}
    for tool in tools:
        for var in TOOLS[tool]:
            out[var] = os.path.join(cache_dir, SUBDIRS[var])
    return tuple(sorted(out.items()))


def root_problem(root: str, home: str) -> str:
    """Why ``root`` cannot be a cache root (empty when it can), for validation.

    The root must be absolute and outside the home folder: the home stays read-only
    (or hidden) in the sandbox, and a cache there would be one the user's own unsandboxed
    tools also read.
    """
    if not root.startswith("/"):
        return "the cache root must be an absolute path"
    r = os.path.normpath(root)
    h = os.path.normpath(home) if home else ""
    if h and h != "/" and (r == h or r.startswith(h + "/")):
        return f"the cache root {root} lies inside the home folder {home}; use a folder outside it, e.g. /var/tmp/sbxc-{{uid}}"
    if r == "/":
        return "the cache root cannot be /"
    return ""


def default_root_label(path: str) -> str:
    """How reports show the implied mask of the default root when the policy chose another:
    it is there for the plan cache and the other projects' caches."""
    return f"{path} (default cache root: plan cache, other projects' caches)"


def cache_rules(root: str, cache_dir: str) -> tuple[tuple[str, str], ...]:
    """The filesystem rules the cache implies, as (path, access), parents first.

    ``mask {root}`` hides the other projects' caches (a ``read /`` would show them) and the
    markers; ``write {cache_dir}`` is this project's folder. Both paths are unresolved and
    may not exist at compile time (kind ``missing``): the runtime creates and checks them,
    and must not have them re-checked as ordinary rules (a fallback is not a refusal).

    ``normalize`` adds one more, always: ``mask`` of the default root
    (``default_root(uid)``), which holds the plan cache (``plans/``) and the caches of
    projects that keep the default, when ``root`` is another folder or the cache is off.
    The runtime makes that folder on every ``exec`` (the plan cache lives there).
    """
    return ((os.path.normpath(root), "mask"), (cache_dir, "write"))
