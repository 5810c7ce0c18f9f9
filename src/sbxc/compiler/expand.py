"""Variables in policy paths: ``{project}``, ``{home}``, ``{uid}``, ``{cache}``, ``{tmp}``,
``~``, and the environment's ``${NAME}`` / ``${NAME:-default}``."""
from __future__ import annotations

import posixpath
import re
from typing import Optional

from .diagnostics import diag, suggest

VARIABLES = ("project", "home", "uid", "cache", "tmp")


class Expander:
    """Expands one string at a time; ``ctx`` records the environment read and the diagnostics."""

    def __init__(self, ctx, values: dict):
        self.ctx = ctx
        self.values = values
        self.empty_default = ""
        """Name of a ``${NAME:-}`` that expanded to nothing in the last call (optional rules skip)."""

    def expand(self, text: str, at, allowed=VARIABLES) -> Optional[str]:
        """Expand variables in ``text``; ``at(offset, length)`` gives the span for a diagnostic."""
        out = []
        i, n = 0, len(text)
        ok = True
        self.empty_default = ""
        if text == "~" or text.startswith("~/"):
            out.append(self.values["home"])
            i = 1
        while i < n:
            c = text[i]
            if c == "$" and text.startswith("${", i):
                j = text.find("}", i)
                if j < 0:
                    self.ctx.diags.append(diag("SBX032", at(i, n - i), why="\"${\" without a closing \"}\""))
                    return None
                v = self._environment(text[i + 2:j], at, i, j - i + 1)
            elif c == "{":
                j = text.find("}", i)
                name = text[i + 1:j] if j > 0 else ""
                if j < 0 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name):
                    self.ctx.diags.append(diag("SBX032", at(i, 1), why="\"{\" that does not start a {variable}",
                                               hint="variables are " + ", ".join("{" + v + "}" for v in VARIABLES)))
                    return None
                v = self._variable(name, allowed, at, i, j - i + 1)
            elif c == "}":
                self.ctx.diags.append(diag("SBX032", at(i, 1), why="\"}\" without an opening \"{\""))
                return None
            else:
                out.append(c)
                i += 1
                continue
            if v is None:
                ok = False
            else:
                out.append(v)
            i = j + 1
        return "".join(out) if ok else None

    def _environment(self, body: str, at, offset: int, length: int) -> Optional[str]:
        """The value of ``${body}``; None after a diagnostic."""
        name, sep, default = body.partition(":-")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            self.ctx.diags.append(diag("SBX032", at(offset, length),
                                       why=f"\"${{{body}}}\" is not ${{NAME}} or ${{NAME:-default}}"))
            return None
        v = self.ctx.getenv(name)
        if v is None or (sep and v == ""):
            if not sep:
                self.ctx.diags.append(diag("SBX031", at(offset, length), name=name,
                                           hint=f"set it, or write ${{{name}:-DEFAULT}}"))
                return None
            v = default
            if not v:
                self.empty_default = name
        return v

    def _variable(self, name: str, allowed, at, offset: int, length: int) -> Optional[str]:
        """The value of ``{name}``; None after a diagnostic."""
        if name == "cache" and name in allowed and not self.values.get("cache"):
            self.ctx.diags.append(diag("SBX032", at(offset, length), why="{cache} is used but the cache is off",
                                       hint="name at least one tool in cache.tools"))
            return None
        if name not in allowed:
            if name in VARIABLES:
                self.ctx.diags.append(diag("SBX032", at(offset, length), why=f"{{{name}}} cannot be used here"))
            else:
                sugg = suggest(name, VARIABLES, quote="")
                self.ctx.diags.append(diag("SBX030", at(offset, length), name=name,
                                           suggest=sugg.replace("mean ", "mean {").replace("?", "}?") if sugg else ""))
            return None
        return self.values[name]


def lexical(path: str) -> str:
    p = posixpath.normpath(path)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    return p


def tmp_dir(ctx) -> str:
    """``{tmp}``: the host's temporary folder, ``$TMPDIR`` when absolute, else ``/tmp``."""
    t = ctx.getenv("TMPDIR")
    if t and t.startswith("/"):
        return lexical(t)
    return "/tmp"
