"""extends and locked: load a policy with everything it extends and merge the files in order.

Lists join across files, every other key is won by the later file (SPEC §1); a key a
file locked may only be tightened by the files that extend it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from .diagnostics import Diagnostic, Related, diag, suggest
from .frontend import builtin_names, read_builtin, read_policy_file
from .plan import Span
from .rules import FsRuleAst, HostRuleAst, NetRuleAst
from .settings import (KEYS, CacheSettings, EnvSettings, LandlockSettings, Settings, SyscallSettings, Value,
                       WorkspaceSettings)
from .source import SourceFile, point
from .validate import check_document
from .yamltree import decode_source, load_yaml

MAX_EXTENDS = 32

LIST_KEYS = ("filesystem", "cache.tools", "env.pass", "syscalls.deny", "locked", "workspace.stage")
"""Keys whose lists join across files (SPEC §1); every other key: the later file wins."""

_HOME_ORDER = {"hidden": 0, "read-only": 1, "writable": 2}


@dataclass(slots=True)
class Setting:
    """One resolved key: its value, where it was written, and what it replaced."""

    key: str
    value: object
    span: Optional[Span]
    """Where the winning value was written; None for a default."""
    origin: str = "default"
    """``default``, ``file`` or ``command line``."""
    beat: list = field(default_factory=list)
    """(value, span or None, origin) of each value it replaced, latest first."""
    base_dir: str = ""
    """Folder of the file that wrote it (``project`` is relative to it)."""


@dataclass(slots=True)
class Merged:
    settings: dict[str, Setting] = field(default_factory=dict)
    env_set: dict[str, Setting] = field(default_factory=dict)
    locked: dict[str, Span] = field(default_factory=dict)
    sources: list[SourceFile] = field(default_factory=list)
    applied: set = field(default_factory=set)
    root: str = ""
    """The top policy file (absolute path or ``builtin:NAME``)."""


def _net_level(v) -> int:
    if v is True or v is None:
        return 2
    if v is False:
        return 0
    return 1


def _net_covered(rule, rules) -> bool:
    if rule.op == "allow":
        return any(r.op == "allow" and r.kind == rule.kind and r.canonical == rule.canonical
                   and (r.port == rule.port or (r.port == 0 and rule.port in (80, 443))) for r in rules)
    return any(r.op == rule.op and r.proto == rule.proto and r.port_lo <= rule.port_lo and rule.port_hi <= r.port_hi
               for r in rules)


def describe_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        if v and isinstance(v[0], (NetRuleAst, FsRuleAst, HostRuleAst)):
            return "[" + ", ".join(r.text for r in v) + "]"
        return "[" + ", ".join(str(getattr(x, "value", x)) for x in v) + "]"
    if v is None:
        return "unset"
    return str(v)


def _loosening(key: str, old, new, added) -> tuple[str, Optional[Span]]:
    """Why going from ``old`` to ``new`` (``added`` for joined lists) loosens a locked key
    ("" if it does not), and the rule to point at when it is one item of a list."""
    if key == "network":
        lo, ln = _net_level(old), _net_level(new)
        if ln > lo:
            return f"sets network: {describe_value(new)}, looser than {describe_value(old)}", None
        if lo == ln == 1:
            extra = [r for r in new if not _net_covered(r, old)]
            if extra:
                return f"allows {extra[0].text}, which the locked rules do not", extra[0].span
        return "", None
    if key == "filesystem":
        loose = [r for r in added if r.verb != "mask"]
        if loose:
            return f"adds \"{loose[0].text}\"; only mask rules may be added to a locked filesystem", loose[0].span
        return "", None
    return _loosening_scalar(key, old, new, added), None


def _loosening_scalar(key: str, old, new, added) -> str:
    if key == "home":
        if _HOME_ORDER.get(new, 2) > _HOME_ORDER.get(old, 2):
            return f"sets home: {new}, looser than {old}"
        return ""
    if key in ("syscalls.deny",):
        return ""
    if key.startswith("host_groups."):
        # A group may lose items under a lock, never gain one.
        had = {_item_key(i) for i in old or ()}
        extra = [i for i in new or () if _item_key(i) not in had]
        return f"adds {_item_text(extra[0])} to @{key.split('.', 1)[1]}" if extra else ""
    if key == "landlock.min_abi":
        return f"lowers min_abi to {new} from {old}" if old is not None and new < old else ""
    if key in ("landlock.best_effort", "syscalls.allow_unix_sockets"):
        return f"turns {key} on" if new and not old else ""
    if key == "cache.required":
        return "turns cache.required off" if old and not new else ""
    if key == "workspace.pool":
        return ""  # ready copies only cost the caller's disk; they grant nothing
    if key in ("workspace.max_bytes", "workspace.max_sessions"):
        return f"raises {key} to {new} from {old}" if old is not None and new > old else ""
    if key in LIST_KEYS:
        return f"adds {describe_value(added)} to {key}" if added else ""
    if new != old:
        return f"changes {key} from {describe_value(old)} to {describe_value(new)}"
    return ""


def _item_text(item) -> str:
    return str(getattr(item, "text", None) or getattr(item, "value", item))


def _item_key(item) -> tuple:
    """What a host-group item admits, whatever its spelling and place."""
    return (getattr(item, "kind", ""), getattr(item, "canonical", _item_text(item)), getattr(item, "port", 0))


def _flatten(doc) -> list[tuple[str, object, Span, Span]]:
    """(dotted key, value, value span, key span) for every leaf a document sets."""
    out = []
    for name, loc in doc.values.items():
        if name in ("sbxc", "extends"):
            continue
        if isinstance(loc.value, dict):
            if name == "host_groups":
                # One setting per group: a later file's group of the same name replaces it.
                for sub, sloc in loc.value.items():
                    out.append((f"host_groups.{sub}", sloc.value, sloc.span, sloc.key_span or sloc.span))
                continue
            for sub, sloc in loc.value.items():
                if name == "env" and sub == "set":
                    out.append(("env.set", sloc.value, sloc.span, sloc.key_span or sloc.span))
                else:
                    out.append((f"{name}.{sub}", sloc.value, sloc.span, sloc.key_span or sloc.span))
        else:
            out.append((name, loc.value, loc.span, doc.key_spans.get(name, loc.span)))
    return out


def apply_document(m: Merged, doc, base_dir: str, diags: list[Diagnostic]) -> None:
    new_locks = {}
    for key, value, span, key_span in _flatten(doc):
        top = key.split(".")[0]
        lock_span = m.locked.get(top)
        if top == "host_groups" and lock_span is None and "network" in m.locked:
            # A locked network locks the groups its rules may name: redefining one would
            # widen the rules without touching them.
            top, lock_span = "network", m.locked["network"]
        if key == "env.set":
            for name, loc in value.items():
                prev = m.env_set.get(name)
                if lock_span is not None and (prev is None or prev.value != loc.value):
                    diags.append(_locked_diag(top, f"sets env.set.{name}", loc.key_span or loc.span, lock_span, prev))
                    continue
                s = Setting(f"env.set.{name}", loc.value, loc.span, "file", base_dir=base_dir)
                if prev is not None:
                    s.beat = [(prev.value, prev.span, prev.origin)] + prev.beat
                m.env_set[name] = s
            continue
        if key == "locked":
            for loc in value:
                new_locks.setdefault(loc.value, loc.span)
        prev = m.settings.get(key)
        old = prev.value if prev else None
        added = []
        if key in LIST_KEYS or (key == "network" and isinstance(value, list) and isinstance(old, list)):
            added = list(value)
            merged_value = (list(old) if isinstance(old, list) else []) + added
        else:
            merged_value = value
        if lock_span is not None:
            why, at = _loosening(key, old, merged_value if key != "network" else value, added)
            if why:
                diags.append(_locked_diag(top, why, at or key_span, lock_span, prev))
                continue
            if key == "network" and isinstance(value, list) and isinstance(old, list):
                merged_value = value  # a locked rule list may only narrow: the later list replaces it
        s = Setting(key, merged_value, span, "file", base_dir=base_dir)
        if prev is not None and key not in LIST_KEYS:
            s.beat = [(prev.value, prev.span, prev.origin)] + prev.beat
        m.settings[key] = s
    for k, sp in new_locks.items():
        m.locked.setdefault(k, sp)


def _locked_diag(key: str, why: str, span: Span, lock_span: Span, prev: Optional[Setting]) -> Diagnostic:
    related = [Related(lock_span, f"\"{key}\" was locked here")]
    if prev is not None and prev.span is not None:
        related.append(Related(prev.span, f"the locked value {describe_value(prev.value)} was set here"))
    return diag("SBX023", span, key=key, change=why, related=related,
                hint="a policy that extends a locked key may only make it stricter")


def resolve_extends(target: str, from_path: str) -> str:
    """``builtin:NAME`` stays; a relative path is taken from the extending file's folder."""
    if target.startswith("builtin:"):
        return target
    if from_path.startswith("builtin:"):
        return target if target.startswith("/") else "builtin-relative:" + target
    base = os.path.dirname(from_path)
    return os.path.normpath(os.path.join(base, target))


def load_chain(root: str, diags: list[Diagnostic], uid: Optional[int] = None, gate=None) -> Merged:
    """Load ``root`` and everything it extends, depth first, each file once, and merge.

    Every file must pass ``read_policy_file``'s ownership checks for ``uid`` (default:
    this process's effective uid, whose files a sandbox would run with). ``gate(path)``,
    when given, is called before a byte of each user file is read and may raise to stop
    the compile: ``exec`` refuses there a file a sandboxed run may have written, which
    would otherwise be read, and its lines quoted in a diagnostic, before any check of
    the whole plan's sources could run."""
    m = Merged(root=root)

    def visit(ref: str, stack: list[str], via: Optional[Span]) -> None:
        if ref in stack:
            chain = " -> ".join(stack[stack.index(ref):] + [ref])
            diags.append(diag("SBX022", via, chain=chain, hint="remove one of the extends entries"))
            return
        if ref in m.applied:
            return
        if len(stack) >= MAX_EXTENDS:
            diags.append(diag("SBX024", via, limit=MAX_EXTENDS))
            return
        m.applied.add(ref)
        if ref.startswith("builtin:"):
            name = ref[len("builtin:"):]
            data = read_builtin(name)
            if data is None:
                diags.append(diag("SBX021", via, target=ref, why="no such builtin profile",
                                  suggest=suggest(name, builtin_names())))
                return
            base_dir = ""
        elif ref.startswith("builtin-relative:"):
            diags.append(diag("SBX021", via, target=ref.split(":", 1)[1], why="a builtin profile can only extend builtins", suggest=""))
            return
        else:
            if via is not None and not os.path.exists(ref):
                diags.append(diag("SBX021", via, target=ref, why="file not found", suggest=""))
                return
            if gate is not None:
                gate(ref)
            data = read_policy_file(ref, diags, via, uid)
            if data is None:
                return
            base_dir = os.path.dirname(ref)
        src, usable = decode_source(ref, data, diags)
        if src is not None:
            m.sources.append(src)
        if not usable:
            return
        tree = load_yaml(src, diags)
        if tree is None:
            return
        doc = check_document(ref, tree, diags)
        ext = doc.values.get("extends")
        if ext is not None:
            for loc in ext.value:
                visit(resolve_extends(loc.value, ref), stack + [ref], loc.span)
        apply_document(m, doc, base_dir, diags)

    visit(root, [], None)
    _withhold_linked(m, diags)
    return m


def _quotable(path: str) -> bool:
    """Whether diagnostics may quote ``path``'s lines: a file reached by its own name, or
    through symlinks whose end lies inside the folder the name is in (and below)."""
    real = os.path.realpath(path)
    if real == os.path.abspath(path):
        return True
    folder = os.path.dirname(os.path.abspath(path))
    return real.startswith(folder.rstrip("/") + "/")


def _withhold_linked(m: Merged, diags: list[Diagnostic]) -> None:
    """Diagnostics quote source lines and name keys and values. A file reached through a
    symlink that leads out of its folder may be a secret the link was pointed at (a
    sandboxed command can plant the link): of its problems only that there are some is
    said, at the place that named it."""
    for s in m.sources:
        if s.path.startswith("builtin:") or _quotable(s.path):
            continue
        own = [d for d in diags if d.span is not None and d.span.file == s.path]
        if not own:
            continue
        diags[:] = [d for d in diags if not (d.span is not None and d.span.file == s.path)]
        diags.append(diag("SBX025", point(s.path, 0, 0), path=f"{s.path} (which resolves to {os.path.realpath(s.path)})",
                          why=f"it has {len(own)} error(s), not shown because it is reached through a symlink that "
                              "leads out of its folder",
                          hint=f"run 'sbxc compile --check {os.path.realpath(s.path)}' to see them"))
        s.lines[:] = []


def resolve(m: Merged) -> Settings:
    """The typed settings of ``m``; a key no file (nor the command line) set gets its default
    from the table of settings."""
    def value(key: str, convert=None) -> Value:
        s = m.settings.get(key)
        if s is None:
            return Value(KEYS[key].default)
        return Value(convert(s.value) if convert else s.value, s.span, s.base_dir)

    def names(items) -> tuple[str, ...]:
        return tuple(x.value for x in items)

    return Settings(
        project=value("project"),
        backend=value("backend"),
        home=value("home"),
        filesystem=tuple(value("filesystem").value),
        network=value("network", lambda v: v if isinstance(v, bool) else tuple(v)),
        host_groups=tuple((k.split(".", 1)[1], Value(list(s.value), s.span, s.base_dir))
                          for k, s in sorted(m.settings.items()) if k.startswith("host_groups.")),
        cache=CacheSettings(value("cache.tools", names), value("cache.root"), value("cache.required")),
        env=EnvSettings(tuple(Value(x.value, x.span) for x in value("env.pass").value),
                        tuple(sorted((name, s.value) for name, s in m.env_set.items())), value("env.pass").span),
        landlock=LandlockSettings(value("landlock.min_abi"), value("landlock.best_effort")),
        syscalls=SyscallSettings(names(value("syscalls.deny").value), value("syscalls.allow_unix_sockets"),
                                 value("syscalls.deny").span),
        workspace=WorkspaceSettings(value("workspace.max_bytes"), value("workspace.max_sessions"),
                                    value("workspace.pool"),
                                    tuple(Value(x.value, x.span) for x in value("workspace.stage").value)),
    )
