"""print-config's rows: every setting with its value, where it was written and what it beat.

The keys, their order and their defaults come from the table of settings (settings.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .merge import Merged, describe_value
from .plan import Plan, Span
from .settings import TABLE, Key


@dataclass(frozen=True, slots=True)
class SettingRow:
    """One resolved setting for ``print-config``."""

    key: str
    value: str
    origin: str
    """``default``, ``FILE:LINE:COL`` or ``command line``."""
    beat: tuple[tuple[str, str], ...] = ()
    """(value, origin) of each value this one replaced, latest first."""


def _origin(span: Optional[Span], origin: str) -> str:
    if origin == "command line":
        return "command line"
    if span is None or origin == "default":
        return "default"
    return f"{span.file}:{span.line}:{span.col}"


def _default_text(k: Key) -> str:
    return k.shown or describe_value(k.default)


def setting_rows(m: Merged, plan: Optional[Plan]) -> list[SettingRow]:
    rows = []
    for k in TABLE:
        if not k.row:
            continue
        s = m.settings.get(k.key)
        if s is None:
            rows.append(SettingRow(k.key, _default_text(k), "default"))
            continue
        if isinstance(s.value, list) and k.key != "network":
            files = sorted({x.span.file for x in s.value if getattr(x, "span", None)})
            origin = ", ".join(files) if files else _origin(s.span, s.origin)
            rows.append(SettingRow(k.key, f"{len(s.value)} entr{'y' if len(s.value) == 1 else 'ies'}"
                                   if k.key == "filesystem" else describe_value(s.value), origin))
            continue
        beat = tuple((describe_value(v), _origin(sp, o)) for v, sp, o in s.beat)
        rows.append(SettingRow(k.key, describe_value(s.value), _origin(s.span, s.origin),
                               beat or ((_default_text(k), "default"),)))
    for name in sorted(m.env_set):
        s = m.env_set[name]
        beat = tuple((describe_value(v), _origin(sp, o)) for v, sp, o in s.beat)
        rows.append(SettingRow(f"env.set.{name}", s.value, _origin(s.span, s.origin), beat))
    for key in sorted(k for k in m.settings if k.startswith("host_groups.")):
        s = m.settings[key]
        beat = tuple((describe_value(v), _origin(sp, o)) for v, sp, o in s.beat)
        rows.append(SettingRow(key, describe_value(s.value), _origin(s.span, s.origin), beat))
    if plan is not None:
        for h in plan.network.hosts:
            ports = ",".join(str(p) for p in h.ports)
            rows.append(SettingRow(f"network host {h.host}:{ports}",
                                   f"@{h.group}: {h.source}" if h.group else h.text, "derived"))
        rows.append(SettingRow("project (resolved)", plan.project, "derived"))
        rows.append(SettingRow("cache folder", plan.cache.dir if plan.cache.enabled else "off", "derived"))
    return rows
