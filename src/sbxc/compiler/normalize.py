"""normalize: the resolved settings -> the Plan IR, in named steps.

Expands variables, resolves every path to its real path through one ``HostPaths``
resolver (faked in tests), applies the precedence rule on the same path, adds the rules
the ``home:`` and ``cache:`` keys imply, and reports what it finds as diagnostics. The
only I/O is through the resolver; host facts and the environment are passed in.
"""
from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

from .. import cache as cachemod
from ..denylist import BUILTIN_DENY
from ..layout import ROOT_ENV
from .diagnostics import Related, diag
from .expand import Expander, lexical, tmp_dir
from .hostpaths import HostPaths
from .plan import (BUILTIN_SPAN, DEFAULT_HOST_PORTS, KIND_DIR, KIND_MISSING, MASK, NET_HOSTS, NET_OFF, NET_ON,
                   NET_RULES, READ, STRICTNESS, TMPFS, WRITE, CachePlan, EnvPlan, HostRule, LandlockPlan, NetRule,
                   Network, PathRule, Plan, SkippedRule, Span,
                   SyscallPlan, fs_sort_key, parent_rule, stricter)
from .rules import FsRuleAst, HostRuleAst, NetRuleAst, PathAst
from .yamltree import shorten
from .settings import (CacheSettings, EnvSettings, LandlockSettings, Settings, SyscallSettings, Value,
                       WorkspaceSettings)

HOME_ACCESS = {"read-only": READ, "hidden": MASK, "writable": WRITE}
# Names of variables that commonly hold credentials; a glob in env.pass that matches one of
# them would hand such a secret to the command without the policy naming it.
SECRET_LOOKING = ("GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
                  "DOCKER_AUTH_CONFIG", "PGPASSWORD", "VAULT_TOKEN", "CI_JOB_TOKEN", "PYPI_PASSWORD")


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
    group_reader: object = None
    """Reads ``from TOOL`` group items (compiler/hostgroups.Reader); None: the real one."""

    def getenv(self, name: str) -> Optional[str]:
        v = self.environ.get(name)
        self.env_used[name] = v
        return v


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


def _at(v: Value) -> Span:
    return v.span or BUILTIN_SPAN


def normalize(st: Settings, ctx: Context, root_dir: str, sources: tuple = ()) -> Optional[Plan]:
    """Build the Plan; diagnostics go to ``ctx.diags``. None when it cannot be built.

    ``sources`` is (path, sha256) of every policy file the settings came from."""
    home = _home(ctx)
    values = {"home": home, "uid": str(ctx.uid), "tmp": tmp_dir(ctx)}
    ex = Expander(ctx, values)
    project, project_real = _project(st.project, ex, ctx, root_dir)
    # After a project error, rules still expand (for their own diagnostics) against a
    # path that cannot exist, so they add no "does not exist" noise of their own.
    values["project"] = project_real or "/nonexistent"
    home_real = ctx.paths.realpath(home) if home.startswith("/") else home
    cache_plan = _cache(st.cache, ex, ctx, (home, home_real), project_real)
    values["cache"] = cache_plan.dir if cache_plan.enabled else ""

    skipped: list[SkippedRule] = []
    cands = _home_candidates(st.home, ctx, home_real) + _cache_candidates(cache_plan, ctx, skipped)
    expanded = _expand_rules(st.filesystem, ex, ctx.diags, skipped)
    user_dirs = (project or "", home, project_real, home_real)
    cands += _rule_candidates(expanded, ctx, user_dirs, skipped)
    fs = _one_rule_per_path(cands, ctx.diags)
    _check_links_past_hiding(cands, fs, ctx.diags, ctx.paths.links_on_way)
    _check_undoable_masks(fs, ctx.diags)
    links = _links(cands, home, ctx)
    network = _network(st.network, ctx.diags, st.host_groups, lambda: _group_reader(ctx, home_real, project_real))
    env = _env(st.env, ctx.diags)
    syscalls = _syscalls(st.syscalls)
    landlock = _landlock(st.landlock)
    workspace = _workspace(st.workspace, ex, ctx.diags)

    if any(d.severity == "error" for d in ctx.diags):
        return None
    return Plan(
        project=project_real,
        home=home_real,
        home_mode=st.home.value,
        uid=ctx.uid,
        backend=st.backend.value,
        fs=fs,
        skipped=tuple(sorted(skipped, key=lambda k: (k.path, k.access, k.span))),
        network=network,
        env=env,
        cache=cache_plan,
        syscalls=syscalls,
        landlock=landlock,
        sources=tuple(sources),
        links=links,
        workspace=workspace,
    )


def _links(cands: list[_Cand], home: str, ctx: Context) -> tuple[tuple[str, str, Span], ...]:
    """The symlinks on the way to each non-mask rule's path as written (and to $HOME, which
    the command uses by name), with the first rule that met each: ``Plan.links``."""
    found: dict[str, tuple[str, Span]] = {}
    for c in cands:
        spelled = c.lexical or (lexical(home) if c.origin == "home" and home.startswith("/") else "")
        if c.access == MASK or not spelled:
            continue
        for link, target in ctx.paths.links_on_way(spelled):
            found.setdefault(link, (target, c.span))
    return tuple((link, target, span) for link, (target, span) in sorted(found.items()))


# ---------------------------------------------------------------- home, project, cache

def _home(ctx: Context) -> str:
    home = ctx.environ.get("HOME")
    ctx.env_used["HOME"] = home
    if not home:
        home = ctx.home_fallback
    return lexical(home) if home.startswith("/") else home


def _project(ps: Value, ex: Expander, ctx: Context, root_dir: str) -> tuple[Optional[str], str]:
    """(the project folder as written and expanded, its real path; "" when it is not a folder)."""
    project = root_dir
    if ps.value is not None:
        p = ex.expand(ps.value, lambda o, n: ps.span, allowed=("home", "uid", "tmp"))
        project = lexical(posixpath.join(ps.base_dir or ctx.cwd, p)) if p is not None else None
    if project is None:
        return None, ""
    project_real = ctx.paths.realpath(project)
    k = ctx.paths.kind(project_real)
    if k != KIND_DIR:
        ctx.diags.append(diag("SBX037", ps.span, path=project,
                              why="does not exist" if k == KIND_MISSING else "is not a folder"))
    return project, project_real


def _cache(cs: CacheSettings, ex: Expander, ctx: Context, homes: tuple[str, str], project_real: str) -> CachePlan:
    named = set(cs.tools.value)
    tools = [t for t in cachemod.TOOLS if t in named]
    raw = cs.root.value
    if raw == cachemod.ROOT_TEMPLATE and ctx.environ.get(ROOT_ENV):
        # $SBXC_ROOT moves the default root (the command line checked it is a normal
        # absolute path); a root the policy names stays where it says.
        raw = ctx.environ[ROOT_ENV]
    root = ex.expand(raw, lambda o, n: _at(cs.root), allowed=("home", "uid", "tmp"))
    cache_dir = cache_root = ""
    if root is not None:
        home, home_real = homes
        why = cachemod.root_problem(root, home) or (cachemod.root_problem(root, home_real) if home_real != home else "")
        if why:
            ctx.diags.append(diag("SBX036", _at(cs.root), why=why))
        elif project_real:
            root_n = lexical(root)
            # The root's own name is kept as written (the runtime checks it is no symlink);
            # the folders above it are the system's and are resolved like any rule path.
            cache_root = posixpath.join(ctx.paths.realpath(posixpath.dirname(root_n)), posixpath.basename(root_n))
            cache_dir = cachemod.project_dir(cache_root, project_real)
    enabled = bool(tools) and bool(cache_dir)
    return CachePlan(
        enabled=enabled, root=cache_root, dir=cache_dir, tools=tuple(tools),
        env=cachemod.cache_env(tools, cache_dir) if enabled else (),
        required=bool(cs.required.value),
        span=cs.root.span or cs.tools.span or BUILTIN_SPAN)


# ---------------------------------------------------------------- filesystem

def _home_candidates(hs: Value, ctx: Context, home_real: str) -> list[_Cand]:
    if not home_real.startswith("/"):
        return []
    return [_Cand(home_real, HOME_ACCESS[hs.value], ctx.paths.kind(home_real), _at(hs), "{home}", "home")]


def _cache_candidates(cache_plan: CachePlan, ctx: Context, skipped: list[SkippedRule]) -> list[_Cand]:
    cands = []
    if cache_plan.enabled:
        for path, access in cachemod.cache_rules(cache_plan.root, cache_plan.dir):
            cands.append(_Cand(path, access, ctx.paths.kind(path), cache_plan.span, path, "cache"))
    # The default root holds the plan cache (plans/, with environment values expansion
    # read) and the caches of projects that keep the default: hidden whatever cache.root
    # says, and with the cache off too.
    # $SBXC_ROOT moves the default root for this run; the fixed one (/var/tmp/sbxc-{uid})
    # still holds what other runs, without it, keep there: both are hidden.
    def real(root: str) -> str:
        root = lexical(root)
        return posixpath.join(ctx.paths.realpath(posixpath.dirname(root)), posixpath.basename(root))

    used = real(cachemod.default_root(ctx.uid, ctx.environ))
    for droot in dict.fromkeys((used, real(cachemod.default_root(ctx.uid)))):
        dkind = ctx.paths.kind(droot)
        if cache_plan.enabled and droot == cache_plan.root:
            pass
        elif droot != used and dkind in (KIND_MISSING, KIND_DIR):
            # The fixed root under $SBXC_ROOT: the runtime makes only the root it uses, so
            # this is an ordinary mask, whose path the plan's checks watch. Missing, there
            # is nothing to hide and no mount point to make; a root made later makes the
            # plan stale, and it is masked then. There, a root removed later (cleared, aged
            # out of /var/tmp) makes the plan stale too, where a mask the runtime was
            # trusted to make would have had bwrap or runc make a mount point for it on
            # the host (a folder wider than the runtime's 0700), or fail every run.
            cands.append(_Cand(droot, MASK, dkind, cache_plan.span, cachemod.default_root_label(droot), "filesystem"))
        elif dkind in (KIND_MISSING, KIND_DIR):
            cands.append(_Cand(droot, MASK, dkind, cache_plan.span, cachemod.default_root_label(droot), "cache"))
        else:
            # A symlink or a file there is someone else's (the runtime keeps nothing in what
            # is not a real folder of the caller's), so nothing of the caller's is there to
            # hide; and bwrap would mount the mask wherever the link points.
            skipped.append(SkippedRule(droot, MASK, cache_plan.span,
                                       f"{droot} is a {dkind}, not a folder sbxc made: no plan or cache is kept there"))
    return cands


def _expand_rules(rules: tuple[FsRuleAst, ...], ex: Expander, diags: list,
                  skipped: list[SkippedRule]) -> list[tuple[FsRuleAst, PathAst, str]]:
    """(rule, path, lexically normal absolute path) for every path of every rule that expands."""
    expanded = []
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
            expanded.append((rule, pa, lexical(v)))
    return expanded


def _rule_candidates(expanded, ctx: Context, user_dirs: tuple, skipped: list[SkippedRule]) -> list[_Cand]:
    diags = ctx.diags
    # Writable rules naming a path with no symlink on the way: a symlinked rule that
    # resolves onto one of these adds nothing the policy did not already grant by name.
    named_targets = {(rule.verb, lex) for rule, pa, lex in expanded
                     if rule.verb in (WRITE, TMPFS) and ctx.paths.symlink_on_way(lex, user_dirs) is None}
    cands = []
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
        why = _per_process(lex) or ((_per_process(real) or any(_per_process(w) for w, _t in ctx.paths.links_on_way(lex)))
                                    and "it leads through a link into /proc/self, the /proc entry of whichever process "
                                        "reads it, so no rule can name it")
        if why:
            diags.append(diag("SBX056", pa.span, verb=rule.verb, path=lex if real == lex else f"{lex} (resolved to {real})",
                              why=why, hint="name a path that is the same for every process (a rule on /proc itself "
                                            "or on a kernel file such as /proc/cpuinfo), or drop the rule"))
            continue
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
    return cands


def _check_links_past_hiding(cands: list[_Cand], fs, diags: list, links_on_way) -> None:
    """A rule whose path, as written, leads through a symlink that lies in a writable
    folder (one a sandboxed command may have made or re-pointed: in the project, in the
    cache, an optional path that was missing) to a real path inside a mask or a tmpfs
    (the deepest rule decides, so it would win there), or inside no other rule: an error.
    The next compile would otherwise open a masked secret (``read? {project}/vendor/x``
    made a link to ``~/.ssh/id_ed25519``), the private /tmp's host folder, or anything the
    policy grants nothing of. A link the sandbox cannot write (the host's /bin -> usr/bin,
    one in a read-only home) is the person's own, and so is a rule that names the path
    itself: both work as written."""
    by_path = {r.path: r for r in fs}
    for c in cands:
        if c.access == MASK or not c.lexical or c.lexical == c.path:
            continue
        won = by_path.get(c.path)
        if won is None or won.access != c.access:
            continue  # a stricter rule on the same path decides there
        planted = [link for link, _t in links_on_way(c.lexical)
                   if (w := parent_rule(by_path, link)) is not None and w.access == WRITE]
        if not planted:
            continue
        outer = parent_rule(by_path, c.path)
        if outer is None:
            hider = f"where no other rule reaches, through {planted[0]} in a writable folder"
        elif outer.access in (MASK, TMPFS):
            hider = f"inside `{outer.access} {outer.written or outer.path}`, through {planted[0]} in a writable folder"
        else:
            continue
        diags.append(diag("SBX057", c.span, verb=c.access, path=c.lexical, real=c.path, hider=hider,
                          hint=f"name the real path if it is meant ({c.access} {c.path}), or remove the link"))


def _per_process(path: str) -> str:
    """Why ``path`` names one process's entry of /proc ('' when it does not). ``/proc/self``
    and ``/proc/thread-self`` are whichever process looks, and a pid is another process in
    each PID namespace: resolved here they would name the compiler's own process (or the
    host's pid N), never the command's. Links into them (``/proc/net``, ``/proc/mounts``,
    ``/dev/fd``, ``/dev/stdin``) resolve to the compiler's pid and land here too."""
    if not path.startswith("/proc/"):
        return ""
    first = path[6:].split("/", 1)[0]
    if first in ("self", "thread-self"):
        return f"/proc/{first} is the /proc entry of whichever process reads it, so no rule can name it"
    if first.isdigit():
        return (f"/proc/{first} is one process's entry, and a sandbox has its own PID namespace: "
                "the number names another process there, or none")
    return ""


def _one_rule_per_path(cands: list[_Cand], diags: list) -> tuple[PathRule, ...]:
    """The stricter rule wins on each path; duplicates and conflicts are reported."""
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
            diags.append(_same_path_diag(prev, c))
        if STRICTNESS[c.access] < STRICTNESS[prev.access]:
            by_path[c.path] = c
    return tuple(sorted((PathRule(c.path, c.access, c.kind, c.span, c.written, c.origin) for c in by_path.values()),
                        key=fs_sort_key))


def _same_path_diag(prev: _Cand, c: _Cand):
    if prev.access == c.access:
        return diag("SBX040", c.span, subject=f"{c.access} {c.path}",
                    related=[Related(prev.span, "first given here" if prev.origin == "filesystem"
                                     else f"implied by the {prev.origin} setting")])
    return diag("SBX041", c.span, path=c.path, a=f"{prev.access} ({prev.origin})",
                b=f"{c.access} ({c.origin})", winner=stricter(prev.access, c.access),
                related=[Related(prev.span, f"{prev.access} given here" if prev.origin == "filesystem"
                                 else f"{prev.access} implied by the {prev.origin} setting")])


def _check_undoable_masks(fs: tuple[PathRule, ...], diags: list) -> None:
    """A mask of a missing path under a writable parent can be undone by creating the path."""
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


# ---------------------------------------------------------------- network, env, syscalls, landlock, workspace

def _group_reader(ctx: Context, home: str, project: str):
    if ctx.group_reader is None:
        from .hostgroups import Reader

        ctx.group_reader = Reader(ctx.getenv, home, project)
    return ctx.group_reader


def _network(net: Value, diags: list, groups=(), reader=None) -> Network:
    span = _at(net)
    if isinstance(net.value, bool):
        return Network(NET_ON if net.value else NET_OFF, (), span)
    seen: list[NetRuleAst] = []
    out: list[NetRule] = []
    hosts, inputs = _host_rules([r for r in net.value if r.op == "allow"], dict(groups), reader, diags)
    for r in net.value:
        if r.op == "allow":
            continue
        dup = next((x for x in seen if x.op == r.op and x.proto == r.proto
                    and x.port_lo <= r.port_lo and r.port_hi <= x.port_hi), None)
        if dup is not None:
            diags.append(diag("SBX043", r.span, rule=r.text, related=[Related(dup.span, f"{dup.text} given here")]))
            continue
        seen.append(r)
        out.append(NetRule(r.op, r.proto, r.port_lo, r.port_hi, r.span))
    out.sort(key=lambda n: (n.op, n.proto, n.port_lo, n.port_hi))
    mode = NET_HOSTS if hosts else NET_RULES if out else NET_OFF
    return Network(mode, tuple(out), span, hosts, inputs)


_LOOPBACK_ADDRS = ("127.0.0.1", "[::1]")


def _group_host(host: str) -> tuple[str, str]:
    """A host a toolchain's configuration names, in the proxy's reading (as an ``allow``
    rule's, hostnames.parse_pattern), and "" ; or "" and why no rule may be made of it. A
    configured URL names one host: a ``*`` in it is no wildcard."""
    from .. import hostnames

    if "*" in host:
        return "", "a URL names one host, not a pattern"
    try:
        kind, value = hostnames.parse_pattern(host)
    except hostnames.BadTarget as e:
        return "", str(e)
    return (hostnames.display("addr", value) if kind == "addr" else value), ""


def _host_rules(rules: list[HostRuleAst], groups: dict, reader, diags: list) -> tuple[tuple[HostRule, ...], tuple]:
    """Host rules with groups expanded: one ``HostRule`` per host, duplicates reported."""
    from .diagnostics import suggest

    out: list[HostRule] = []
    where: dict[str, HostRuleAst] = {}
    used_reader = None
    for r in rules:
        if r.kind != "group":
            ports = (r.port,) if r.port else DEFAULT_HOST_PORTS
            prev = next((h for h in out if h.host == r.canonical and set(ports) <= set(h.ports) and not h.group), None)
            if prev is not None:
                diags.append(diag("SBX043", r.span, rule=r.text,
                                  related=[Related(prev.span, f"{prev.text} given here")]))
                continue
            if r.kind == "addr" and r.is_public_addr and not r.port:
                diags.append(diag("SBX049", r.target_span, rule=r.text,
                                  why="an address rule admits connections made to that address only; a command "
                                      "that connects by name needs a rule for the name",
                                  hint="write the host's name, e.g. `allow example.org`, or give the port"))
            out.append(HostRule(r.canonical, tuple(sorted(ports)), r.span, r.text))
            continue
        group = groups.get(r.canonical)
        if group is None:
            diags.append(diag("SBX047", r.target_span, name=r.canonical, suggest=suggest(r.canonical, groups),
                              hint="a group is defined under host_groups: (the builtin toolchain profiles define "
                                   "@python, @node, @rust, @go)"))
            continue
        before = len(out)
        for item in group.value:
            if item.kind == "from":
                if reader is not None:
                    used_reader = reader()
                    seen = len(used_reader.untrusted)
                    found = used_reader.read(item.canonical)
                    for path, why in used_reader.untrusted[seen:]:
                        diags.append(diag("SBX053", r.span, path=path, group=r.canonical, why=why,
                                          hint="only files that you or root own, in folders only you or root can "
                                               "write, name hosts for a group: remove it, or move the project out of "
                                               "the shared folder"))
                    for host, port, source in found:
                        canonical, why = _group_host(host)
                        if why:
                            diags.append(diag("SBX054", r.span, group=r.canonical, source=shorten(source, 200),
                                              host=shorten(host, 60), why=why))  # render_text escapes the rest
                            continue
                        out.append(HostRule(canonical, (port,), r.span, r.text, r.canonical, source))
                continue
            ports = (item.port,) if item.port else DEFAULT_HOST_PORTS
            out.append(HostRule(item.canonical, tuple(sorted(ports)), r.span, r.text, r.canonical,
                                f"host_groups.{r.canonical} ({item.span})"))
        if len(out) == before:
            diags.append(diag("SBX048", r.span, rule=r.text,
                              why=f"the group @{r.canonical} holds no host here (a toolchain with no network "
                                  "registry configured, or not installed)"))
    # One entry per (host, ports): a host named by a rule and a group keeps the first.
    uniq: dict[tuple, HostRule] = {}
    for h in out:
        uniq.setdefault((h.host, h.ports), h)
    final = tuple(sorted(uniq.values(), key=lambda h: (h.host, h.ports)))
    loopback_ports = {p for h in final if h.host in _LOOPBACK_ADDRS for p in h.ports}
    marked = []
    for h in final:
        why = ""
        name = h.host[2:] if h.host.startswith("*.") else h.host
        # A group's host is reported with the group's rule, naming the host and where the
        # toolchain's configuration gave it.
        shown = f"{h.text} ({h.host} from {h.source})" if h.group else h.text
        if name == "localhost" or name.endswith(".localhost"):
            if not loopback_ports.intersection(h.ports):
                why = ("the name resolves to loopback, which the proxy connects to only where an address rule "
                       "names it")
                diags.append(diag("SBX048", h.span, rule=shown, why=why,
                                  hint="add `allow 127.0.0.1:PORT` for the port, if the host's own services are meant"))
        elif name == "invalid" or name.endswith(".invalid"):
            why = "names under .invalid never resolve"
            diags.append(diag("SBX048", h.span, rule=shown, why=why))
        marked.append(replace(h, unusable=why) if why else h)
    final = tuple(marked)
    inputs = tuple(sorted(used_reader.inputs.items())) if used_reader is not None else ()
    return final, inputs


def _env(es: EnvSettings, diags: list) -> EnvPlan:
    for v in es.passed:
        if any(ch in v.value for ch in "*?"):
            leaked = [n for n in SECRET_LOOKING if fnmatch.fnmatchcase(n, v.value)]
            if leaked:
                diags.append(diag("SBX044", v.span, glob=v.value, example=leaked[0],
                                  hint="name the variables one by one, or narrow the glob"))
    return EnvPlan(tuple(sorted({v.value for v in es.passed})), es.set, es.span or BUILTIN_SPAN)


def _syscalls(ss: SyscallSettings) -> SyscallPlan:
    return SyscallPlan(tuple(sorted(set(BUILTIN_DENY) | set(ss.deny))), bool(ss.allow_unix_sockets.value),
                       ss.span or BUILTIN_SPAN)


def _landlock(ls: LandlockSettings) -> LandlockPlan:
    return LandlockPlan(ls.min_abi.value, bool(ls.best_effort.value),
                        ls.min_abi.span or ls.best_effort.span or BUILTIN_SPAN)


def _workspace(ws: WorkspaceSettings, ex: Expander, diags: list) -> tuple[tuple[str, object], ...]:
    out: list[tuple[str, object]] = [(name, v.value) for name, v in (("max_bytes", ws.max_bytes),
                                                                     ("max_sessions", ws.max_sessions))
                                     if v.span is not None]
    out.append(("pool", int(ws.pool.value)))
    stage = []
    for v in ws.stage:
        src, sep, dest = v.value.rpartition(":")
        if not sep or not src or not dest:
            diags.append(diag("SBX045", v.span, entry=v.value, why="write it as SOURCE:DEST",
                              hint="e.g. ~/.config/tool:.config/tool"))
            continue
        real = ex.expand(src, lambda o, n: v.span, allowed=("home", "uid", "tmp", "project"))
        if real is None:
            continue
        parts = dest.split("/")
        if not real.startswith("/"):
            diags.append(diag("SBX045", v.span, entry=v.value, why="the source must be an absolute path",
                              hint="start it with /, ~/ or {home}"))
        elif dest.startswith("/") or ".." in parts or "\x00" in dest:
            diags.append(diag("SBX045", v.span, entry=v.value,
                              why="the destination must be a path inside the workspace (relative, no ..)"))
        else:
            stage.append((lexical(real), "/".join(p for p in parts if p and p != ".")))
    out.append(("stage", tuple(stage)))
    declared = [v.span for v in (ws.max_bytes, ws.max_sessions, ws.pool) + tuple(ws.stage) if v.span is not None]
    if declared:
        # The policy means to use sessions: the backends add their report rows about them.
        out.append(("span", min(declared, key=lambda sp: (sp.line, sp.col))))
    return tuple(out)
