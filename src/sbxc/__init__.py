"""sbxc: a declarative sandbox policy compiler for Linux and macOS."""
from .layout import VERSION as __version__  # noqa: F401
