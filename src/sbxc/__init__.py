"""sbxc: a declarative sandbox policy compiler for Linux and macOS."""
__version__ = "0.1.0"
