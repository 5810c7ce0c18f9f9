"""A small evaluator for the subset of SBPL that ``sbxc.backends.sbpl`` emits.

It exists so the macOS backend can be checked where no Mac runs: parse the profile the way
a Scheme reader does, then answer "is operation OP on PATH allowed?" with Seatbelt's rule
"the last matching rule wins; otherwise the default". Anything outside the subset (an
unknown form, filter, escape or parameter) is a ``ProfileError``, never silently skipped:
a test that meets something it does not understand must fail, not pass.

What it does not model is listed in docs/macos.md (symlink resolution, vnode types,
sandbox extensions, Seatbelt's own compiler quirks, operations the backend never emits).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from sbxc.compiler.decide import decide


class ProfileError(ValueError):
    """The text is not in the SBPL subset this evaluator understands."""


class Str(str):
    """A string literal (as opposed to a symbol)."""


class Regex(str):
    """A ``#"..."`` regular-expression literal."""


class Sym(str):
    """A symbol (operation names, filter names, ``allow``/``deny``)."""


Node = Union[Str, Regex, Sym, int, list]

# Parentheses as tokens of their own type, so a string "(" can never be taken for one.
LPAREN = object()
RPAREN = object()


def tokenize(text: str) -> list:
    out: list = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\f":
            i += 1
        elif c == ";":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("#|", i):
            # Block comments nest in Scheme.
            depth, i = 1, i + 2
            while depth:
                if i >= n:
                    raise ProfileError("unterminated #| comment")
                if text.startswith("#|", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("|#", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in "()":
            out.append(LPAREN if c == "(" else RPAREN)
            i += 1
        elif c == '"':
            buf, i = [], i + 1
            while True:
                if i >= n:
                    raise ProfileError("unterminated string")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\":
                    if i + 1 >= n:
                        raise ProfileError("unterminated string")
                    nxt = text[i + 1]
                    # The backend escapes only these two; any other escape would mean the
                    # emitter produced something a real reader might read differently.
                    if nxt not in '\\"':
                        raise ProfileError(f"escape \\{nxt} is outside the emitted subset")
                    buf.append(nxt)
                    i += 2
                    continue
                buf.append(c)
                i += 1
            out.append(Str("".join(buf)))
        elif text.startswith('#"', i):
            j = text.find('"', i + 2)
            if j < 0:
                raise ProfileError("unterminated regex literal")
            out.append(Regex(text[i + 2:j]))
            i = j + 1
        else:
            j = i
            while j < n and text[j] not in ' \t\r\n\f()";':
                j += 1
            atom = text[i:j]
            if atom.startswith("#"):
                raise ProfileError(f"reader syntax {atom!r} is outside the emitted subset")
            out.append(int(atom) if atom.isdigit() else Sym(atom))
            i = j
    return out


def parse(text: str) -> list[Node]:
    tokens = tokenize(text)
    pos = 0

    def read() -> Node:
        nonlocal pos
        if pos >= len(tokens):
            raise ProfileError("unexpected end of profile")
        t = tokens[pos]
        pos += 1
        if t is LPAREN:
            items = []
            while True:
                if pos >= len(tokens):
                    raise ProfileError("unbalanced parentheses")
                if tokens[pos] is RPAREN:
                    pos += 1
                    return items
                items.append(read())
        if t is RPAREN:
            raise ProfileError("unexpected )")
        return t

    forms = []
    while pos < len(tokens):
        forms.append(read())
    return forms


# ---------------------------------------------------------------------------------------
# Filters, after parameters are substituted.

@dataclass(frozen=True)
class Filter:
    kind: str
    """``literal``, ``subpath``, ``regex``, ``require-any``, ``require-all``, ``require-not``,
    ``remote``, ``local``, ``target``, ``global-name``."""
    value: str = ""
    proto: str = ""
    children: tuple = ()


@dataclass(frozen=True)
class Rule:
    action: str
    ops: tuple[str, ...]
    filters: tuple[Filter, ...]
    """Any one matching is enough (SBPL lists filters as alternatives); empty: always."""


@dataclass(frozen=True)
class Request:
    op: str
    """A concrete operation, e.g. ``file-read-data``, ``network-outbound``."""
    path: Optional[str] = None
    """The file (or Unix socket) path, for file operations and Unix-socket connects."""
    proto: str = ""
    """``tcp``/``udp`` for an IP network request."""
    host: str = ""
    """``localhost`` or another address, for IP requests."""
    port: int = 0


_PATH_FILTERS = ("literal", "subpath", "regex")
_SUPPORTED_REGEX = re.compile(r"^[\^$A-Za-z0-9/\[\]\-+*?._]*$")


def _string(node, params: Mapping[str, str]) -> str:
    if isinstance(node, Str):
        return str(node)
    if (isinstance(node, list) and len(node) == 2 and isinstance(node[0], Sym)
            and node[0] == "param" and isinstance(node[1], Str)):
        if node[1] not in params:
            raise ProfileError(f"parameter {node[1]!r} is not given")
        return params[node[1]]
    raise ProfileError(f"expected a string or (param ...), got {node!r}")


def _filter(node, params) -> Filter:
    if not isinstance(node, list) or not node or not isinstance(node[0], Sym):
        raise ProfileError(f"not a filter: {node!r}")
    head, args = str(node[0]), node[1:]
    if head in ("literal", "subpath"):
        if len(args) != 1:
            raise ProfileError(f"({head} ...) takes one path")
        return Filter(head, _string(args[0], params))
    if head == "regex":
        if len(args) != 1 or not isinstance(args[0], Regex):
            raise ProfileError("(regex ...) takes one #\"...\" literal")
        if not _SUPPORTED_REGEX.match(args[0]):
            raise ProfileError(f"regex {args[0]!r} is outside the supported subset")
        return Filter("regex", str(args[0]))
    if head in ("require-any", "require-all"):
        return Filter(head, children=tuple(_filter(a, params) for a in args))
    if head == "require-not":
        if len(args) != 1:
            raise ProfileError("(require-not ...) takes one filter")
        return Filter(head, children=(_filter(args[0], params),))
    if head in ("remote", "local"):
        if not args or not isinstance(args[0], Sym) or args[0] not in ("tcp", "udp", "ip") or len(args) > 2:
            raise ProfileError(f"({head} tcp|udp|ip [\"host:port\"]) expected, got {node!r}")
        value = _string(args[1], params) if len(args) == 2 else "*:*"
        host, _, port = value.rpartition(":")
        if host not in ("*", "localhost") or not (port == "*" or port.isdigit()):
            raise ProfileError(f"address {value!r}: host must be * or localhost, port a number or *")
        return Filter(head, value, proto=str(args[0]))
    if head in ("target", "global-name"):
        if len(args) != 1:
            raise ProfileError(f"({head} ...) takes one argument")
        return Filter(head, str(args[0]))
    raise ProfileError(f"filter {head!r} is outside the emitted subset")


def _op_matches(rule_op: str, op: str) -> bool:
    if rule_op.endswith("*"):
        return op.startswith(rule_op[:-1])
    return rule_op == op


def _filter_matches(f: Filter, req: Request) -> bool:
    k = f.kind
    if k in _PATH_FILTERS:
        if req.path is None:
            return False
        if k == "literal":
            return req.path == f.value
        if k == "subpath":
            base = f.value.rstrip("/")
            return req.path == f.value or req.path == base or req.path.startswith(base + "/")
        return re.search(f.value, req.path) is not None
    if k == "require-any":
        return any(_filter_matches(c, req) for c in f.children)
    if k == "require-all":
        return all(_filter_matches(c, req) for c in f.children)
    if k == "require-not":
        return not _filter_matches(f.children[0], req)
    if k in ("remote", "local"):
        if not req.proto:
            return False
        if f.proto != "ip" and f.proto != req.proto:
            return False
        host, _, port = f.value.rpartition(":")
        if host == "localhost" and req.host not in ("localhost", "127.0.0.1", "::1"):
            return False
        return port == "*" or int(port) == req.port
    # target / global-name: requests about processes and Mach services are not modelled;
    # they never match a file or network request.
    return False


@dataclass
class Profile:
    default: str
    rules: list[Rule] = field(default_factory=list)

    def decide(self, req: Request) -> str:
        """``allow`` or ``deny``: the last matching rule wins, otherwise the default."""
        result = self.default
        for rule in self.rules:
            if any(_op_matches(o, req.op) for o in rule.ops) and (
                    not rule.filters or any(_filter_matches(f, req) for f in rule.filters)):
                result = rule.action
        return result

    def allows(self, op: str, path: Optional[str] = None, **kw) -> bool:
        return self.decide(Request(op, path, **kw)) == "allow"


def load(text: str, params: Optional[Mapping[str, str]] = None) -> Profile:
    """Parse ``text`` into a Profile, substituting ``(param "NAME")`` from ``params``."""
    params = params or {}
    forms = parse(text)
    first = forms[0] if forms else None
    if not (isinstance(first, list) and len(first) == 2 and isinstance(first[0], Sym)
            and first[0] == "version" and first[1] == 1 and type(first[1]) is int):
        raise ProfileError("a profile starts with (version 1)")
    default: Optional[str] = None
    rules: list[Rule] = []
    for form in forms[1:]:
        if (not isinstance(form, list) or len(form) < 2 or not isinstance(form[0], Sym)
                or form[0] not in ("allow", "deny")):
            raise ProfileError(f"not a rule: {form!r}")
        action = str(form[0])
        ops, filters = [], []
        for item in form[1:]:
            if isinstance(item, Sym):
                if filters:
                    raise ProfileError("operations come before filters")
                ops.append(str(item))
            else:
                filters.append(_filter(item, params))
        if ops == ["default"]:
            if filters or default is not None or rules:
                raise ProfileError("(deny default) comes once, before the rules, without filters")
            default = action
            continue
        if "default" in ops:
            raise ProfileError("default mixed with other operations")
        rules.append(Rule(action, tuple(ops), tuple(filters)))
    if default is None:
        raise ProfileError("no (deny default)")
    return Profile(default, rules)


# ---------------------------------------------------------------------------------------
# Comparing a lowered profile with the decision model (sbxc.compiler.decide).

# Each operation of the decision model as the Seatbelt requests it causes; the operation
# is allowed only when every one of them is (exec needs both the exec check and dyld's
# executable mapping).
DECIDE_OPS = {
    "read": ("file-read-data",),
    "list": ("file-read-data",),  # readdir is a data read of the folder
    "exec": ("process-exec", "file-map-executable"),
    "write": ("file-write-data",),
    "create": ("file-write-create",),
    "delete": ("file-write-unlink",),
    "connect": ("network-outbound",),  # to a Unix socket at the path
}


def profile_allows(profile: Profile, path: str, op: str) -> bool:
    return all(profile.allows(o, path) for o in DECIDE_OPS[op])


def runtime_params(data: dict, run_tmp: str = "/private/var/folders/zz/sbxc-run-test") -> dict:
    """Parameter values as the runner would pass them when nothing is relocated."""
    out = {}
    for p in data.get("params", ()):
        if "value" in p:
            out[p["name"]] = p["value"]
        elif p.get("source") == "run-tmp":
            out[p["name"]] = run_tmp
        else:
            out[p["name"]] = p["default"]
    return out


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def disagreement(plan, data: dict, verdicts, profile: Profile, path: str, op: str,
                 params: Optional[Mapping[str, str]] = None) -> str:
    """Why the profile's answer for (path, op) differs from ``decide`` without being
    declared; empty when they agree or the difference is declared.

    Declared towards more access: the start-up baseline the backend reports (system
    libraries, device nodes). Declared towards less: a rule whose verdict is ``narrowed``
    or ``partial`` (tmpfs on Seatbelt; rename/delete of folders above a denying rule).
    """
    d = decide(plan, path)
    want = d.allows(op)
    got = profile_allows(profile, path, op)
    if want == got:
        return ""
    base = data.get("baseline", {})
    if got and not want:
        if op in ("read", "list", "exec") and any(_under(path, b) for b in base.get("read", ())):
            return ""
        if op == "connect" and path in base.get("connect", ()):
            return ""
        # The per-run folder standing in for tmpfs: new and empty, nothing of the host.
        run_tmp = (params or {}).get("SBXC_RUN_TMP")
        if run_tmp and _under(path, run_tmp):
            return ""
        for dev, subtree, writable in base.get("devices", ()):
            if (path == dev or (subtree and _under(path, dev))) and (
                    op in ("read", "list") or (writable and op == "write")):
                return ""
        return f"profile allows {op} on {path!r}, decide says {d.access}"
    # The profile gives less: fine only where the report says so.
    if d.rule is not None and d.access == "tmpfs":
        if any(v.span == d.rule.span and v.status in ("narrowed", "partial") for v in verdicts):
            return ""
    if op == "delete" and path in data.get("protect", ()):
        return ""
    if op == "connect" and path in data.get("deny_connect", ()):
        return ""
    return f"profile denies {op} on {path!r}, decide says {d.access} (not declared narrowed)"
