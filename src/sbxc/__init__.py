"""sbxc: a declarative sandbox policy compiler for Linux and macOS."""
from .layout import VERSION as __version__  # noqa: F401


def __getattr__(name):
    # Loaded on first use only: `import sbxc` (and every `sbxc exec`) stays as cheap as before.
    if name in ("Session", "SessionError", "RunResult"):
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module 'sbxc' has no attribute {name!r}")
