"""normalize: merged policy settings -> the Plan IR.

Expands variables, resolves every path to its real path through one ``HostPaths``
resolver (faked in tests), applies the precedence rule on the same path, adds the rules
the ``home:`` and ``cache:`` keys imply, and reports what it finds as diagnostics. The
only I/O is through the resolver; host facts and the environment are passed in.
"""
from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat as statmod
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .diagnostics import Related, diag, suggest
from .merge import Merged, Setting
from .plan import (BUILTIN_SPAN, KIND_DIR, KIND_FILE, KIND_MISSING, KIND_OTHER, KIND_SOCKET, MASK, NET_OFF,
                   NET_ON, NET_RULES, READ, STRICTNESS, TMPFS, WRITE, CachePlan, EnvPlan, LandlockPlan,
                   NetRule, Network, PathRule, Plan, SkippedRule, Span, SyscallPlan, fs_sort_key, is_within,
                   stricter)
from .rules import FsRuleAst, NetRuleAst, PathAst

VARIABLES = ("project", "home", "uid", "cache", "tmp")
HOME_ACCESS = {"read-only": READ, "hidden": MASK, "writable": WRITE}
MAX_SYMLINKS = 40
# Names of variables that commonly hold credentials; a glob in env.pass that matches one of
# them would hand such a secret to the command without the policy naming it.
SECRET_LOOKING = ("GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
                  "DOCKER_AUTH_CONFIG", "PGPASSWORD", "VAULT_TOKEN", "CI_JOB_TOKEN", "PYPI_PASSWORD")  # the kernel's own limit on links followed in one lookup


# ---------------------------------------------------------------- the path resolver

@dataclass(frozen=True, slots=True)
class PathStat:
    kind: str
    """``dir``, ``file``, ``socket``, ``other`` or ``symlink`` (never followed)."""
    uid: int = 0
    mode: int = 0


class HostPaths:
    """Filesystem facts the compiler needs: lstat and readlink. Tests pass a fake."""

    def lstat(self, path: str) -> Optional[PathStat]:
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        m = st.st_mode
        if statmod.S_ISLNK(m):
            kind = "symlink"
        elif statmod.S_ISDIR(m):
            kind = KIND_DIR
        elif statmod.S_ISREG(m):
            kind = KIND_FILE
        elif statmod.S_ISSOCK(m):
            kind = KIND_SOCKET
        else:
            kind = KIND_OTHER
        return PathStat(kind, st.st_uid, m)

    def readlink(self, path: str) -> str:
        try:
            return os.readlink(path)
        except (OSError, ValueError):
            return ""

    # ---- derived: the same logic for the real resolver and a fake one

    def realpath(self, path: str) -> str:
        """Like os.path.realpath, through ``lstat``/``readlink`` only. Missing tails stay as written."""
        parts = [p for p in path.split("/") if p and p != "."]
        resolved = "/"
        links = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                resolved = posixpath.dirname(resolved) or "/"
                continue
            cand = posixpath.join(resolved, part)
            st = self.lstat(cand)
            if st is not None and st.kind == "symlink":
                links += 1
                if links > MAX_SYMLINKS:
                    return posixpath.join(cand, *parts)
                target = self.readlink(cand)
                if target.startswith("/"):
                    resolved = "/"
                parts = [p for p in target.split("/") if p and p != "."] + parts
                continue
            resolved = cand
        return resolved

    def kind(self, real: str) -> str:
        st = self.lstat(real)
        return KIND_MISSING if st is None else st.kind

    def symlink_on_way(self, path: str, user_dirs=()) -> Optional[tuple[str, str]]:
        """The first component of ``path`` (lexically normal) that is an untrusted symlink: (link, target).

        ``user_dirs`` (project, home): links inside them are never trusted, whoever owns them.
        """
        cur = ""
        for part in [p for p in path.split("/") if p]:
            cur = cur + "/" + part
            st = self.lstat(cur)
            if st is None:
                return None
            if st.kind == "symlink" and not self._trusted_link(cur, st, user_dirs):
                return cur, self.realpath(cur)
        return None

    def _trusted_link(self, link: str, st: PathStat, user_dirs) -> bool:
        # A link only root can change (owned by root, in a folder owned by root that no one
        # else can write) is part of the system layout, e.g. macOS /tmp -> private/tmp or
        # Debian's /var/run -> /run: it cannot be pointed at the host by the command. Inside
        # the project or the home folder a link is content (a cloned repository can carry
        # one), so it is never trusted there, even when the caller is root.
        if st.uid != 0 or any(is_within(link, d) for d in user_dirs if d):
            return False
        parent = self.lstat(posixpath.dirname(link) or "/")
        return parent is not None and parent.kind == KIND_DIR and parent.uid == 0 and not (parent.mode & 0o022)


# ---------------------------------------------------------------- context

@dataclass(slots=True)
class Context:
    environ: Mapping[str, str]
    uid: int
    home_fallback: str
    """The password database's home, used only when HOME is unset (HostFacts.home)."""
    cwd: str
    paths: HostPaths
    env_used: dict = field(default_factory=dict)
    diags: list = field(default_factory=list)

    def getenv(self, name: str) -> Optional[str]:
        v = self.environ.get(name)
        self.env_used[name] = v
        return v


class _Expander:
    def __init__(self, ctx: Context, values: dict):
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
                body = text[i + 2:j]
                name, sep, default = body.partition(":-")
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    self.ctx.diags.append(diag("SBX032", at(i, j - i + 1), why=f"\"${{{body}}}\" is not ${{NAME}} or ${{NAME:-default}}"))
                    ok = False
                else:
                    v = self.ctx.getenv(name)
                    if v is None or (sep and v == ""):
                        if sep:
                            v = default
                            if not v:
                                self.empty_default = name
                        else:
                            self.ctx.diags.append(diag("SBX031", at(i, j - i + 1), name=name,
                                                       hint=f"set it, or write ${{{name}:-DEFAULT}}"))
                            ok = False
                            v = ""
                    out.append(v)
                i = j + 1
                continue
            if c == "{":
                j = text.find("}", i)
                name = text[i + 1:j] if j > 0 else ""
                if j < 0 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name):
                    self.ctx.diags.append(diag("SBX032", at(i, 1), why="\"{\" that does not start a {variable}",
                                               hint="variables are " + ", ".join("{" + v + "}" for v in VARIABLES)))
                    return None
                if name == "cache" and name in allowed and not self.values.get("cache"):
                    self.ctx.diags.append(diag("SBX032", at(i, j - i + 1), why="{cache} is used but the cache is off",
                                               hint="name at least one tool in cache.tools"))
                    ok = False
                elif name not in allowed:
                    sugg = suggest(name, VARIABLES, quote="")
                    if name in VARIABLES:
                        self.ctx.diags.append(diag("SBX032", at(i, j - i + 1), why=f"{{{name}}} cannot be used here"))
                    else:
                        self.ctx.diags.append(diag("SBX030", at(i, j - i + 1), name=name,
                                                   suggest=sugg.replace("mean ", "mean {").replace("?", "}?") if sugg else ""))
                    ok = False
                else:
                    out.append(self.values[name])
                i = j + 1
                continue
            if c == "}":
                self.ctx.diags.append(diag("SBX032", at(i, 1), why="\"}\" without an opening \"{\""))
                return None
            out.append(c)
            i += 1
        return "".join(out) if ok else None


def _lexical(path: str) -> str:
    p = posixpath.normpath(path)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    return p


def _span_of(s: Optional[Setting]) -> Span:
    if s is None or s.span is None:
        return BUILTIN_SPAN
    return s.span


def tmp_dir(ctx: Context) -> str:
    """``{tmp}``: the host's temporary folder, ``$TMPDIR`` when absolute, else ``/tmp``."""
    t = ctx.getenv("TMPDIR")
    if t and t.startswith("/"):
        return _lexical(t)
    return "/tmp"


# ---------------------------------------------------------------- normalize

@dataclass(slots=True)
class _Cand:
    path: str
    access: str
    kind: str
    span: Span
    written: str
    origin: str
    quiet: bool = False
    lexical: str = ""


def normalize(m: Merged, ctx: Context, root_dir: str) -> Optional[Plan]:
    """Build the Plan; diagnostics go to ``ctx.diags``. None when it cannot be built."""
    from .. import cache as cachemod
    from ..backends.seccomp import BUILTIN_DENY

    s = m.settings
    diags = ctx.diags
    home = ctx.environ.get("HOME")
    ctx.env_used["HOME"] = home
    if not home:
        home = ctx.home_fallback
    home = _lexical(home) if home.startswith("/") else home
    values = {"home": home, "uid": str(ctx.uid), "tmp": tmp_dir(ctx)}
    ex = _Expander(ctx, values)

    # project
    ps = s.get("project")
    project = None
    if ps is not None:
        p = ex.expand(ps.value, lambda o, n: ps.span, allowed=("home", "uid", "tmp"))
        if p is not None:
            project = _lexical(posixpath.join(ps.base_dir or ctx.cwd, p))
    else:
        project = root_dir
    project_real = ""
    if project is not None:
        project_real = ctx.paths.realpath(project)
        k = ctx.paths.kind(project_real)
        if k != KIND_DIR:
            diags.append(diag("SBX037", _span_of(ps) if ps else None, path=project,
                              why="does not exist" if k == KIND_MISSING else "is not a folder"))
    # After a project error, rules still expand (for their own diagnostics) against a
    # path that cannot exist, so they add no "does not exist" noise of their own.
    values["project"] = project_real or "/nonexistent"
    home_real = ctx.paths.realpath(home) if home.startswith("/") else home

    # cache
    tools_s = s.get("cache.tools")
    tools = list(cachemod.DEFAULT_TOOLS)
    if tools_s is not None:
        named = {loc.value for loc in tools_s.value}
        tools = [t for t in cachemod.TOOLS if t in named]
    root_s = s.get("cache.root")
    root_written = root_s.value if root_s else cachemod.ROOT_TEMPLATE
    root = ex.expand(root_written, lambda o, n: _span_of(root_s), allowed=("home", "uid", "tmp"))
    cache_dir = ""
    cache_root = ""
    if root is not None:
        why = cachemod.root_problem(root, home) or (cachemod.root_problem(root, home_real) if home_real != home else "")
        if why:
            diags.append(diag("SBX036", _span_of(root_s), why=why))
        elif project_real:
            root_n = _lexical(root)
            # The root's own name is kept as written (the runtime checks it is no symlink);
            # the folders above it are the system's and are resolved like any rule path.
            cache_root = posixpath.join(ctx.paths.realpath(posixpath.dirname(root_n)), posixpath.basename(root_n))
            cache_dir = cachemod.project_dir(cache_root, project_real)
    values["cache"] = cache_dir if (tools and cache_dir) else ""
    cache_enabled = bool(tools) and bool(cache_dir)
    req_s = s.get("cache.required")
    cache_plan = CachePlan(
        enabled=cache_enabled, root=cache_root, dir=cache_dir, tools=tuple(tools),
        env=cachemod.cache_env(tools, cache_dir) if cache_enabled else (),
        required=bool(req_s.value) if req_s else False,
        span=_span_of(root_s) if root_s else _span_of(tools_s))

    # filesystem rules -> candidates
    cands: list[_Cand] = []
    skipped: list[SkippedRule] = []
    home_s = s.get("home")
    home_mode = home_s.value if home_s else "read-only"
    if home_real.startswith("/"):
        cands.append(_Cand(home_real, HOME_ACCESS[home_mode], ctx.paths.kind(home_real), _span_of(home_s),
                           "{home}", "home"))
    if cache_enabled:
        for path, access in cachemod.cache_rules(cache_root, cache_dir):
            cands.append(_Cand(path, access, ctx.paths.kind(path), cache_plan.span, path, "cache"))
    # The default root holds the plan cache (plans/, with environment values expansion
    # read) and the caches of projects that keep the default: hidden whatever cache.root
    # says, and with the cache off too.
    droot = _lexical(cachemod.default_root(ctx.uid))
    droot = posixpath.join(ctx.paths.realpath(posixpath.dirname(droot)), posixpath.basename(droot))
    dkind = ctx.paths.kind(droot)
    if cache_enabled and droot == cache_root:
        pass
    elif dkind in (KIND_MISSING, KIND_DIR):
        cands.append(_Cand(droot, MASK, dkind, cache_plan.span, cachemod.default_root_label(droot), "cache"))
    else:
        # A symlink or a file there is someone else's (the runtime keeps nothing in what is
        # not a real folder of the caller's), so nothing of the caller's is there to hide;
        # and bwrap would mount the mask wherever the link points.
        skipped.append(SkippedRule(droot, MASK, cache_plan.span,
                                   f"{droot} is a {dkind}, not a folder sbxc made: no plan or cache is kept there"))

    fs_s = s.get("filesystem")
    rules: list[FsRuleAst] = list(fs_s.value) if fs_s else []
    expanded: list[tuple[FsRuleAst, PathAst, str]] = []
    for rule in rules:
        for pa in rule.paths:
            v = ex.expand(pa.text, pa.span_at)
            if v is None:
                continue
            if ex.empty_default and rule.optional:
                skipped.append(SkippedRule(pa.text, rule.verb, pa.span, f"${ex.empty_default} is not set"))
                continue
            if "\x00" in v or "\n" in v:
                diags.append(diag("SBX038", pa.span))
                continue
            if not v.startswith("/"):
                diags.append(diag("SBX033", pa.span, path=v,
                                  hint="start it with /, ~/, {project}, {home} or another variable"))
                continue
            expanded.append((rule, pa, _lexical(v)))

    # Writable rules naming a path with no symlink on the way: a symlinked rule that
    # resolves onto one of these adds nothing the policy did not already grant by name.
    user_dirs = (project or "", home, project_real, home_real)
    named_targets = {(rule.verb, lex) for rule, pa, lex in expanded
                     if rule.verb in (WRITE, TMPFS) and ctx.paths.symlink_on_way(lex, user_dirs) is None}
    for rule, pa, lex in expanded:
        quiet = False
        if rule.verb in (WRITE, TMPFS):
            hit = ctx.paths.symlink_on_way(lex, user_dirs)
            if hit is not None:
                link, target = hit
                real = ctx.paths.realpath(lex)
                if (rule.verb, real) in named_targets:
                    quiet = True
                else:
                    diags.append(diag("SBX035", pa.span, verb=rule.verb, path=lex, link=link, target=target,
                                      hint=f"name the real path instead: {rule.verb} {real}"))
                    continue
        real = ctx.paths.realpath(lex)
        kind = ctx.paths.kind(real)
        if kind == KIND_MISSING:
            if rule.optional:
                skipped.append(SkippedRule(real, rule.verb, pa.span, f"{real} does not exist"))
                continue
            if rule.verb != MASK:
                diags.append(diag("SBX034", pa.span, path=real if real == lex else f"{lex} (resolved to {real})",
                                  hint=f"write \"{rule.verb}? ...\" if the path may be missing"))
                continue
        if rule.verb == TMPFS and kind not in (KIND_DIR, KIND_MISSING):
            diags.append(diag("SBX039", pa.span, path=real, kind=kind,
                              hint="tmpfs makes an empty private folder; use mask to hide a file"))
            continue
        cands.append(_Cand(real, rule.verb, kind, pa.span, pa.text, "filesystem", quiet, lex))

    # one rule per path: the stricter wins; pairs are reported
    by_path: dict[str, _Cand] = {}
    for c in cands:
        prev = by_path.get(c.path)
        if prev is None:
            by_path[c.path] = c
            continue
        # Two spellings of one file (/var/run/x and /run/x) with the same verb are how a
        # policy covers hosts where the link is absent: not a mistake worth a warning.
        alias = prev.access == c.access and prev.lexical and c.lexical and prev.lexical != c.lexical
        if not (c.quiet or prev.quiet or alias):
            if prev.access == c.access:
                diags.append(diag("SBX040", c.span, subject=f"{c.access} {c.path}",
                                  related=[Related(prev.span, "first given here" if prev.origin == "filesystem"
                                                   else f"implied by the {prev.origin} setting")]))
            else:
                win = stricter(prev.access, c.access)
                diags.append(diag("SBX041", c.span, path=c.path, a=f"{prev.access} ({prev.origin})",
                                  b=f"{c.access} ({c.origin})", winner=win,
                                  related=[Related(prev.span, f"{prev.access} given here" if prev.origin == "filesystem"
                                                   else f"{prev.access} implied by the {prev.origin} setting")]))
        if STRICTNESS[c.access] < STRICTNESS[prev.access]:
            by_path[c.path] = c
    fs = tuple(sorted((PathRule(c.path, c.access, c.kind, c.span, c.written, c.origin) for c in by_path.values()),
                      key=fs_sort_key))

    # a mask of a missing path under a writable parent can be undone by creating the path
    by_real = {r.path: r for r in fs}
    for r in fs:
        if r.access == MASK and r.kind == KIND_MISSING and r.origin == "filesystem":
            owner = None
            parent = r.path
            while parent != "/" and owner is None:
                parent = posixpath.dirname(parent)
                owner = by_real.get(parent)
            if owner is not None and owner.access == WRITE:
                diags.append(diag("SBX042", r.span, path=r.path,
                                  related=[Related(owner.span, f"{owner.access} {owner.path} given here")]
                                  if owner.span.line else ()))

    # network
    net_s = s.get("network")
    network = Network(NET_ON, (), BUILTIN_SPAN)
    if net_s is not None:
        span = _span_of(net_s)
        if isinstance(net_s.value, bool):
            network = Network(NET_ON if net_s.value else NET_OFF, (), span)
        else:
            seen: list[NetRuleAst] = []
            out: list[NetRule] = []
            for r in net_s.value:
                dup = next((x for x in seen if x.op == r.op and x.proto == r.proto
                            and x.port_lo <= r.port_lo and r.port_hi <= x.port_hi), None)
                if dup is not None:
                    diags.append(diag("SBX043", r.span, rule=r.text, related=[Related(dup.span, f"{dup.text} given here")]))
                    continue
                seen.append(r)
                out.append(NetRule(r.op, r.proto, r.port_lo, r.port_hi, r.span))
            out.sort(key=lambda n: (n.op, n.proto, n.port_lo, n.port_hi))
            network = Network(NET_RULES if out else NET_OFF, tuple(out), span)

    # env
    pass_s = s.get("env.pass")
    passed = tuple(sorted({loc.value for loc in pass_s.value})) if pass_s else ()
    for loc in (pass_s.value if pass_s else ()):
        if any(ch in loc.value for ch in "*?"):
            leaked = [n for n in SECRET_LOOKING if fnmatch.fnmatchcase(n, loc.value)]
            if leaked:
                diags.append(diag("SBX044", loc.span, glob=loc.value, example=leaked[0],
                                  hint="name the variables one by one, or narrow the glob"))
    env_set = tuple(sorted((k, v.value) for k, v in m.env_set.items()))

    # syscalls
    deny_s = s.get("syscalls.deny")
    deny = set(BUILTIN_DENY)
    if deny_s:
        deny |= {loc.value for loc in deny_s.value}
    aus = s.get("syscalls.allow_unix_sockets")
    syscalls = SyscallPlan(tuple(sorted(deny)), bool(aus.value) if aus else False)

    mina = s.get("landlock.min_abi")
    be = s.get("landlock.best_effort")
    landlock = LandlockPlan(mina.value if mina else 1, bool(be.value) if be else False,
                            (mina or be).span if (mina or be) and (mina or be).span else BUILTIN_SPAN)
    workspace = tuple(sorted((k.split(".", 1)[1], v.value) for k, v in s.items() if k.startswith("workspace.")))
    for k, v in sorted(s.items()):
        if k.startswith("workspace."):
            # The quotas are kept in the plan, but nothing runs sessions yet: say so
            # rather than let a quota look enforced.
            diags.append(diag("SBX045", v.span, key=k))
    backend_s = s.get("backend")

    if any(d.severity == "error" for d in diags):
        return None
    return Plan(
        project=project_real,
        home=home_real,
        home_mode=home_mode,
        uid=ctx.uid,
        backend=backend_s.value if backend_s else "auto",
        fs=fs,
        skipped=tuple(sorted(skipped, key=lambda k: (k.path, k.access, k.span))),
        network=network,
        env=EnvPlan(passed, env_set),
        cache=cache_plan,
        syscalls=syscalls,
        landlock=landlock,
        sources=tuple((src.path, src.sha256) for src in m.sources),
        workspace=workspace,
    )
