"""Policy source files and positions inside them.

A ``SourceFile`` is the decoded text of one policy file plus what a diagnostic needs to
show it: a display name, line lookup, and the sha256 of the bytes as read (for the plan's
``sources`` and the plan cache key).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .plan import Span


@dataclass(slots=True)
class SourceFile:
    path: str
    """Absolute path, or ``builtin:NAME`` for a builtin profile."""
    text: str
    sha256: str
    lines: list[str] = field(default_factory=list)

    @classmethod
    def from_bytes(cls, path: str, data: bytes, text: str) -> "SourceFile":
        return cls(path, text, hashlib.sha256(data).hexdigest(), text.splitlines())

    def line_text(self, line: int) -> str:
        """The 1-based line, or "" when out of range."""
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1]
        return ""

    def span(self, line: int, col: int, end_line: int = 0, end_col: int = 0) -> Span:
        return Span(self.path, line, col, end_line or line, end_col or col + 1)


def point(file: str, line: int, col: int, length: int = 1) -> Span:
    return Span(file, line, col, line, col + max(1, length))
