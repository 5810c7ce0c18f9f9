"""A small JSON Schema (2020-12) evaluator for the keywords ``sbxc schema`` uses, and the
two ways a YAML file becomes a JSON instance (YAML 1.1 and YAML 1.2 core).

It exists so the loader and the generated schema can be checked against each other with
no new dependency. A keyword outside the subset is a ``SchemaError``, never skipped: when
the schema grows a keyword this evaluator does not know, the agreement test must fail,
not pass. Patterns are ECMA-262 regular expressions evaluated with Python's ``re``; the
schema keeps to the part where the two agree (character classes, anchors, groups, ``\\s``
aside from exotic Unicode spaces), and a final ``$`` is read as the end of the text, as
ECMA-262 does (Python's ``$`` also matches before a trailing line break).
"""
from __future__ import annotations

import math
import re

import yaml

ANNOTATIONS = {"$schema", "$id", "title", "description"}
KNOWN = ANNOTATIONS | {"type", "enum", "properties", "additionalProperties", "required", "items",
                       "propertyNames", "pattern", "minimum", "maximum", "minLength", "oneOf"}


class SchemaError(Exception):
    """The schema uses something this evaluator does not implement."""


def _is_type(v, t: str) -> bool:
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t == "integer":
        # JSON Schema: any number with a zero fractional part, 1.0 included.
        return _is_type(v, "number") and float(v).is_integer()
    raise SchemaError(f"type {t!r}")


def _pattern(p: str) -> re.Pattern:
    if p.endswith("$") and not p.endswith("\\$"):
        p = p[:-1] + r"\Z"
    return re.compile(p)


def _equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def valid(instance, schema: dict) -> bool:
    """True when ``instance`` (None, bool, int, float, str, list, dict with str keys) is
    valid against ``schema``. Anything that is not JSON data (a date, a non-text key) is
    valid against no type."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise SchemaError(f"keywords {sorted(unknown)}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(instance, t) for t in types):
            return False
    if "enum" in schema and not any(_equal(instance, e) for e in schema["enum"]):
        return False
    if "oneOf" in schema and sum(valid(instance, s) for s in schema["oneOf"]) != 1:
        return False
    if isinstance(instance, str):
        if "pattern" in schema and not _pattern(schema["pattern"]).search(instance):
            return False
        if "minLength" in schema and len(instance) < schema["minLength"]:
            return False
    if _is_type(instance, "number"):
        if "minimum" in schema and instance < schema["minimum"]:
            return False
        if "maximum" in schema and instance > schema["maximum"]:
            return False
    if isinstance(instance, list) and "items" in schema:
        if not all(valid(x, schema["items"]) for x in instance):
            return False
    if isinstance(instance, dict):
        if not all(isinstance(k, str) for k in instance):
            return False  # a YAML key that is not text has no JSON form
        if any(k not in instance for k in schema.get("required", ())):
            return False
        if "propertyNames" in schema and not all(valid(k, schema["propertyNames"]) for k in instance):
            return False
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in instance.items():
            if k in props:
                if not valid(v, props[k]):
                    return False
            elif extra is False:
                return False
            elif isinstance(extra, dict) and not valid(v, extra):
                return False
    return True


# ---------------------------------------------------------------- YAML -> JSON instances

class Yaml11Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML's safe_load reads it, plus the one-letter booleans (y, n) that the
    1.1 type repository lists and PyYAML leaves out."""


Yaml11Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


def _bool11(loader, node):
    v = loader.construct_scalar(node)
    return v in ("y", "Y") if v in ("y", "Y", "n", "N") else yaml.SafeLoader.construct_yaml_bool(loader, node)


Yaml11Loader.add_constructor("tag:yaml.org,2002:bool", _bool11)


class _Core12Resolver(yaml.resolver.BaseResolver):
    pass


# The YAML 1.2 core schema's tag resolution, written from the 1.2.2 specification (10.3.2).
for _tag, _re, _first in (
        ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
        ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
        ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                  r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", list("-+0123456789."))):
    _Core12Resolver.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_re), _first)


class Yaml12Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                   yaml.constructor.SafeConstructor, _Core12Resolver):
    def __init__(self, stream):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Core12Resolver.__init__(self)


def _int12(loader, node):
    v = loader.construct_scalar(node)
    if v.startswith("0o"):
        return int(v[2:], 8)
    if v.startswith("0x"):
        return int(v[2:], 16)
    return int(v, 10)


def _float12(loader, node):
    v = loader.construct_scalar(node).lower()
    if v.lstrip("+-") in (".inf", ".nan"):
        return float(v.replace(".", "", 1))
    return float(v)


Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _int12)
Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _float12)
Yaml12Loader.add_constructor("tag:yaml.org,2002:bool",
                             lambda loader, node: loader.construct_scalar(node).lower() == "true")


def instances(text: str) -> list:
    """The JSON instances a YAML 1.1 reader and a YAML 1.2 reader make of ``text``; a
    document either cannot read stands as an instance no schema accepts."""
    out = []
    for loader in (Yaml11Loader, Yaml12Loader):
        try:
            out.append(yaml.load(text, Loader=loader))  # noqa: S506 (safe constructors only)
        except yaml.YAMLError:
            out.append(_NOT_JSON)
    return out


class _NotJson:
    pass


_NOT_JSON = _NotJson()


def same(a, b) -> bool:
    """Deep equality that keeps JSON's types apart (True is not 1) and NaN equal to itself."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return type(a) is type(b) and a == b or (_is_type(a, "number") and _is_type(b, "number") and a == b)


def schema_accepts(text: str, schema: dict) -> bool:
    """What schema-driven editors say, whichever YAML version they read with: the file is
    valid under both readings, and both readings are the same data (else one file would
    be two policies, and no schema can see that: ``min_abi: 010`` is 10 or 8)."""
    i11, i12 = instances(text)
    return valid(i11, schema) and valid(i12, schema) and same(i11, i12)

