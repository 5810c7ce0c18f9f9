"""Variables in policy paths: ``{project}``, ``{home}``, ``{uid}``, ``{cache}``, ``{tmp}``,
``~``, and the environment's ``${NAME}`` / ``${NAME:-default}``."""
from __future__ import annotations

import posixpath
import re
from typing import Optional

from .diagnostics import diag, suggest

VARIABLES = ("project", "home", "uid", "cache", "tmp")

SHELL_EQUIVALENTS = {
    "HOME": "{home}", "USERPROFILE": "{home}", "PWD": "{project}", "CD": "{project}", "UID": "{uid}",
    "TMPDIR": "{tmp}", "TMP": "{tmp}", "TEMP": "{tmp}",
}
"""Host variables people reach for that sbxc has a variable of its own for: ``{home}``
works with HOME unset, ``{uid}`` where bash's UID is not exported, ``{project}`` is the
project root (what ``$PWD`` usually means in a policy, though not always the same folder)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WINDOWS_VAR = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)%")


def did_you_mean(name: str) -> str:
    """The spelling sbxc expands for a host variable NAME written some other way."""
    return SHELL_EQUIVALENTS.get(name.upper(), "${" + name + "}")


def _slip_hint(name: str) -> str:
    better = did_you_mean(name)
    if better.startswith("${"):
        return f"{better} is the host's ${name}; ${{{name}:-DEFAULT}} when it may be unset"
    return (f"{better} is sbxc's own variable; ${{{name}}} reads the host's ${name} instead"
            + ("; {project} is the project root, ${PWD} the folder sbxc started in" if better == "{project}" else ""))


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
        elif self._tilde_slip(text, at):
            return None
        while i < n:
            c = text[i]
            if c == "$" and text.startswith("${", i):
                j = text.find("}", i)
                if j < 0:
                    self.ctx.diags.append(diag("SBX032", at(i, n - i), why="\"${\" without a closing \"}\""))
                    return None
                v = self._environment(text[i + 2:j], at, i, j - i + 1)
            elif c == "$" and text.startswith("$$", i):
                out.append("$")  # the one way to write a literal $ before a name
                i += 2
                continue
            elif c == "$" and i + 1 < n and (text[i + 1] == "(" or _NAME.match(text, i + 1)):
                self._dollar_slip(text, i, at)
                return None
            elif c == "{":
                j = text.find("}", i)
                name = text[i + 1:j] if j > 0 else ""
                if text.startswith("{{", i):
                    self._template_slip(text, i, at)
                    return None
                if j < 0 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name):
                    self.ctx.diags.append(diag("SBX032", at(i, 1), why="\"{\" that does not start a {variable}",
                                               hint="variables are " + ", ".join("{" + v + "}" for v in VARIABLES)))
                    return None
                v = self._variable(name, allowed, at, i, j - i + 1)
            elif c == "%" and (m := _WINDOWS_VAR.match(text, i)):
                # A file name may hold %, and % means nothing to sbxc: keep the text, but say
                # that a Windows variable was not expanded (the path is then rarely the one meant).
                self.ctx.diags.append(diag("SBX028", at(i, m.end() - i), written=m.group(),
                                           suggest=f"; did you mean \"{did_you_mean(m.group(1))}\"?",
                                           hint=_slip_hint(m.group(1))))
                out.append(m.group())
                i = m.end()
                continue
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

    def _tilde_slip(self, text: str, at) -> bool:
        """``~user``, ``~+``, ``~-`` at the start: a shell's; sbxc knows only the caller's home."""
        m = re.match(r"~([A-Za-z_][A-Za-z0-9_.-]*|[+-])", text)
        if not m:
            return False
        self.ctx.diags.append(diag(
            "SBX029", at(0, m.end()), written=m.group(), what="shell syntax",
            suggest="; did you mean \"{project}\"?" if m.group(1) == "+" else "",
            hint="~ alone (or ~/...) is your home folder; write another user's home as an absolute path"))
        return True

    def _template_slip(self, text: str, i: int, at) -> None:
        """``{{name}}``: a template engine's braces, one pair too many."""
        inner = re.match(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}", text[i:])
        self.ctx.diags.append(diag(
            "SBX032", at(i, inner.end() if inner else 2), why="\"{{\" is template syntax",
            hint=(f"did you mean \"{{{inner.group(1)}}}\"? " if inner else "")
            + "variables take one pair of braces: " + ", ".join("{" + v + "}" for v in VARIABLES)))

    def _dollar_slip(self, text: str, i: int, at) -> None:
        """``$NAME``, ``$env:NAME`` or ``$(...)``: shell spellings sbxc does not expand."""
        if text[i + 1] == "(":
            j = text.find(")", i)
            self.ctx.diags.append(diag("SBX029", at(i, (j - i + 1) if j > 0 else 2), written=text[i:j + 1] if j > 0 else "$(",
                                       what="command substitution", suggest="",
                                       hint="sbxc runs no commands to read a policy; write the path, or use "
                                            + ", ".join("{" + v + "}" for v in VARIABLES) + " or ${NAME}"))
            return
        m = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)").match(text, i + 1) or _NAME.match(text, i + 1)
        name = m.group(1) if m.re.pattern.startswith("env:") else m.group()
        what = "PowerShell syntax" if m.re.pattern.startswith("env:") else "shell syntax"
        self.ctx.diags.append(diag("SBX029", at(i, m.end() - i), written=text[i:m.end()], what=what,
                                   suggest=f"; did you mean \"{did_you_mean(name)}\"?",
                                   hint=_slip_hint(name) + "; write $$ for a literal $"))

    def _environment(self, body: str, at, offset: int, length: int) -> Optional[str]:
        """The value of ``${body}``; None after a diagnostic."""
        name, sep, default = body.partition(":-")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-=?+])(.*)", body, re.S)
            better = f"; did you mean \"${{{m.group(1)}:-{m.group(3)}}}\"?" if m else ""
            self.ctx.diags.append(diag("SBX032", at(offset, length),
                                       why=f"\"${{{body}}}\" is not ${{NAME}} or ${{NAME:-default}}{better}",
                                       hint="sbxc knows one default form, ${NAME:-default} (used when NAME is "
                                            "unset or empty)" if m else ""))
            return None
        v = self.ctx.getenv(name)
        if v is None or (sep and v == ""):
            if not sep:
                own = "{" + name.lower() + "}" if name.lower() in VARIABLES else SHELL_EQUIVALENTS.get(name.upper(), "")
                self.ctx.diags.append(diag("SBX031", at(offset, length), name=name,
                                           hint=(f"did you mean {own}, sbxc's own variable? " if own else "")
                                           + f"set it, or write ${{{name}:-DEFAULT}}"))
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
                self.ctx.diags.append(diag("SBX030", at(offset, length), name=name,
                                           suggest=self._braced_suggestion(name),
                                           hint="sbxc's variables are lower case: " + ", ".join(
                                               "{" + v + "}" for v in VARIABLES) + "; ${NAME} reads the host's $NAME"))
            return None
        return self.values[name]


    @staticmethod
    def _braced_suggestion(name: str) -> str:
        """``{HOME}`` -> ``{home}``, ``{PWD}`` -> ``{project}``, ``{USER}`` -> ``${USER}``,
        ``{hom}`` -> ``{home}``."""
        if name.lower() in VARIABLES:
            return f"; did you mean \"{{{name.lower()}}}\"?"
        if name.isupper() or name.upper() in SHELL_EQUIVALENTS:
            return f"; did you mean \"{did_you_mean(name)}\"?"
        sugg = suggest(name, VARIABLES, quote="")
        return sugg.replace("mean ", "mean \"{").replace("?", "}\"?") if sugg else ""


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
