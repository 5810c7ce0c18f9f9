"""Property: the loader and ``sbxc schema`` accept and reject the same policy files.

Generated policies mix valid values with the mistakes people make: unknown and misspelt
keys, wrong types, unknown enum values, extra nesting, a list where a scalar belongs and
the reverse, empty values, and plain scalars YAML retypes. "The loader accepts" means no
error from reading and checking one file (what ``compile --check`` reports before it looks
at the host); "the schema accepts" means the JSON instance is valid both as a YAML 1.1
reader and as a YAML 1.2 reader sees the file (tests/support/jsonschema_eval.py), since
an editor may use either. The few things a JSON Schema cannot express are listed in
``test_what_the_schema_cannot_see`` and kept out of the generator.
"""
from __future__ import annotations

import json
import subprocess
import sys

import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from support.jsonschema_eval import schema_accepts, valid


def _schema() -> dict:
    r = subprocess.run([sys.executable, "-m", "sbxc", "schema"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


SCHEMA = _schema()  # through the real command line: what an editor is given


def loader_errors(text: str) -> list:
    """Error diagnostics from reading and checking one policy file."""
    from sbxc.compiler.validate import check_document
    from sbxc.compiler.yamltree import decode_source, load_yaml

    diags: list = []
    src, usable = decode_source("/p/sandbox.policy.yaml", text.encode(), diags)
    if src is not None and usable:
        tree = load_yaml(src, diags)
        if tree is not None:
            check_document(src.path, tree, diags)
    return [d for d in diags if d.severity == "error"]


def loader_accepts(text: str) -> bool:
    return not loader_errors(text)


def _beyond_a_schema(errors: list) -> bool:
    """Every error is one a JSON Schema cannot express (see test_what_the_schema_cannot_see)."""
    return bool(errors) and all(d.code == "SBX015" or (d.code == "SBX018" and "above" in d.message)
                                for d in errors)


# ---------------------------------------------------------------- scalars, as text plus a style

RETYPED = ["0755", "1.10", "0x10", "1e3", "1_000", "0o17", "010", "0b101", "yes", "no", "on", "off", "Yes", "OFF",
           "y", "n", "Y", "N", "~", "null", "2026-01-02", "2026-01-02 10:00:00", "1:30", ".inf", "-.inf", ".nan",
           "true", "false", "True", "FALSE", "1", "4", "0", "-1", "4.0", "4.5", "65", "99999999999999999999999"]
TEXTS = ["hello", "", "  ", "a b", "builtin:default", "./base.yaml", "/var/tmp/x", "{project}", "~/x",
         "read /", "write {project}", "mask ~/.ssh ~/.aws", "read? /opt/x", 'read "/a b" /c', "tmpfs /tmp",
         "read", "read/usr", 'read "a""b"', 'read "unclosed', "wirte /x", "READ /x", "read\t/x", " read /x ",
         "read /x\n", "mask", "read ?/x",
         "connect tcp 443", "bind tcp 8000-8100", " connect  tcp 443 ", "connect tcp 0", "connect tcp 70000",
         "connect tcp 65535", "connect udp 53", "Connect tcp 1", "connect tcp", "connect tcp 443 x",
         "connect tcp 08080", "bind tcp 1-65535",
         "PATH", "LC_*", "BAD-NAME", "A?", "ptrace", "bpf", "Ptrace", "pip", "npm", "pipp", "xdg",
         "auto", "bwrap", "landlock", "sandbox-exec", "oci", "read-only", "hidden", "writable", "Hidden",
         "network", "home", "netwrk", "filesystem", "extends"]


@st.composite
def scalar(draw, pool=None):
    text = draw(st.sampled_from(pool or RETYPED + TEXTS))
    return ("scalar", text, draw(st.sampled_from(["plain", "double", "single"])))


KEY_TYPOS = ["netwrok", "Network", "filesystems", "env_pass", "cache_root", "x", "sbx", "Home", "1", "yes"]

VALID = {
    "bool": ["true", "false", "True", "FALSE"],
    "str": ["hello", "a b", "builtin:default", "./base.yaml", "/var/tmp/x", "{project}", "~/x", "0755", "yes"],
    "fsrule": ["read /", "write {project}", "mask ~/.ssh ~/.aws", "read? /opt/x", 'read "/a b" /c', "tmpfs /tmp",
               " read /x ", "read\t/x"],
    "netrule": ["connect tcp 443", "bind tcp 8000-8100", " connect  tcp 443 ", "connect tcp 65535",
                "connect tcp 08080", "bind tcp 1-65535"],
    "syscall": ["ptrace", "bpf", "keyctl", "userfaultfd"],
    "envglob": ["PATH", "LC_*", "HOME", "A?", "*"],
    "size": ["1", "4096", "2G", "512M", "1T"],
}
"""Values that are right for each kind, as text; rendered plain, single- or double-quoted."""


def _int_texts(f) -> list:
    lo, hi = f.lo or 0, f.hi if f.hi is not None else 100
    return sorted({str(lo), str(hi), str((lo + hi) // 2), str(lo - 1), str(hi + 1), f"{lo}.0"})


def _pool(f) -> list:
    if f.kind == "int":
        return _int_texts(f)
    if f.kind == "enum":
        return list(f.choices)
    return VALID[f.kind]


def _mostly(good, bad, one_in: int = 6):
    """``good`` most of the time, ``bad`` about once in ``one_in`` draws, so a generated file
    holds a mistake or two among right values (and is often right throughout)."""
    return st.integers(0, one_in - 1).flatmap(lambda r: bad if r == 0 else good)


def _leaf(name: str):
    """A strategy for the value of one dotted key."""
    from sbxc.compiler.settings import KEYS

    f = KEYS[name].field
    if f.kind == "network":
        return _mostly(st.one_of(scalar(VALID["bool"]), _list_of(_mostly(scalar(VALID["netrule"]), scalar()))),
                       _wrong())
    if f.kind == "list":
        return _mostly(_list_of(_mostly(scalar(_pool(f.item)), scalar())), _wrong())
    if f.kind == "strmap":
        names = st.sampled_from(["CI", "A", "_X", "PATH", "LANG"])
        odd_names = st.sampled_from(["ON", "Y", "n", "BAD-NAME", "1A", "0755", "Off"])
        entry = st.tuples(st.tuples(st.just("scalar"), _mostly(names, odd_names), st.sampled_from(["plain", "double"])),
                          _mostly(scalar(VALID["str"] + RETYPED), _wrong()))
        return _mostly(st.lists(entry, max_size=4, unique_by=lambda e: e[0][1]).map(lambda xs: ("map", xs)),
                       _wrong())
    if f.kind == "groups":
        # Names and hosts the loader takes; the wrong shapes come from _wrong() at each level.
        names = st.sampled_from(["corp", "mirror-1", "a_b"])
        # A wrong item text (a retyped number, say) is an invalid host to the loader and a
        # string to the schema, which checks no host syntax: only wrong shapes here.
        hosts = _mostly(_list_of(scalar(["example.org", "a.example.org:8443", "127.0.0.2:5432"])),
                        st.one_of(scalar(VALID["bool"]), st.just(("map", [])), st.just(("list", [("list", [])]))))
        entry = st.tuples(st.tuples(st.just("scalar"), names, st.just("plain")), hosts)
        return _mostly(st.lists(entry, max_size=3, unique_by=lambda e: e[0][1]).map(lambda xs: ("map", xs)),
                       _wrong())
    return _mostly(scalar(_pool(f)), _wrong())


def _list_of(item):
    return st.lists(item, max_size=4).map(lambda xs: ("list", xs))


def _wrong():
    """A value of the wrong shape or text: another scalar (retyped ones plain), a list where a
    scalar belongs, a nested mapping, or an empty one."""
    return st.one_of(
        scalar(),
        st.just(("list", [])), st.just(("map", [])), st.just(("scalar", "", "plain")),
        st.builds(lambda v: ("list", [v]), scalar()),
        st.builds(lambda v: ("map", [(("scalar", "x", "plain"), v)]), scalar()),
        st.builds(lambda v: ("list", [("list", [v])]), scalar()),
    )


@st.composite
def policy(draw):
    from sbxc.compiler.settings import SECTIONS, schema

    sch = schema()
    items = []
    if draw(st.integers(0, 19)):
        items.append((("scalar", "sbxc", "plain"), draw(_mostly(st.just(("scalar", "1", "plain")), _leaf("sbxc")))))
    names = draw(st.lists(_mostly(st.sampled_from([n for n in sch if n != "sbxc"]), st.sampled_from(KEY_TYPOS), 12),
                          max_size=6, unique=True))
    for name in names:
        key = ("scalar", name, "plain")
        if name in SECTIONS:
            subs = list(sch[name].fields)
            chosen = draw(st.lists(_mostly(st.sampled_from(subs), st.sampled_from(["bogus", "Root"]), 12),
                                   max_size=3, unique=True))
            entries = [(("scalar", s, "plain"), draw(_leaf(f"{name}.{s}")) if s in subs else draw(scalar()))
                       for s in chosen]
            value = draw(_mostly(st.just(("map", entries)), _wrong(), 10))
        elif name in sch:
            value = draw(_leaf(name))
        else:
            value = draw(scalar())
        items.append((key, value))
    return ("map", items)


# ---------------------------------------------------------------- rendering as YAML text

def _plain_ok(text: str) -> bool:
    """A plain scalar in block context stays that exact plain text (else it is quoted)."""
    if text != text.strip() or not text or "\n" in text or "\t" in text:
        return False
    try:
        node = yaml.compose("k: " + text)
    except yaml.YAMLError:
        return False
    v = node.value[0][1] if node is not None and node.value else None
    return isinstance(v, yaml.ScalarNode) and not v.style and v.value == text


def _scalar_text(text: str, style: str) -> str:
    if style == "plain" and (_plain_ok(text) or text == ""):
        return text
    if style == "single" and "\n" not in text and "\t" not in text:
        return "'" + text.replace("'", "''") + "'"
    return json.dumps(text)


def render(node, indent: int = 0) -> str:
    """Block-style YAML for a generated node (as the value after ``key:`` or ``-``)."""
    kind = node[0]
    pad = "  " * indent
    if kind == "scalar":
        return " " + _scalar_text(node[1], node[2]) if _scalar_text(node[1], node[2]) else ""
    if kind == "list":
        if not node[1]:
            return " []"
        return "".join(f"\n{pad}-{render(x, indent + 1)}" for x in node[1])
    if not node[1]:
        return " {}"
    return "".join(f"\n{pad}{_scalar_text(k[1], k[2])}:{render(v, indent + 1)}" for k, v in node[1])


def document(tree) -> str:
    return render(tree).lstrip("\n") + "\n"


# ---------------------------------------------------------------- the properties

@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(policy())
def test_loader_and_schema_agree(tree):
    text = document(tree)
    errors = loader_errors(text)
    assume(not _beyond_a_schema(errors))
    assert (not errors) == schema_accepts(text, SCHEMA), (text, [d.message for d in errors])


AGREE = [
    # (policy, accepted) written out, so a regression names the case, not a seed
    ("sbxc: 1\n", True),
    ("sbxc: 1.0\n", True),
    ("sbxc: 2\n", False),
    ("sbxc: true\n", False),
    ("network: false\n", False),
    ("sbxc: 1\nnetwork: no\n", False),
    ("sbxc: 1\nenv:\n  set:\n    V: 0755\n", False),
    ("sbxc: 1\nenv:\n  set:\n    V: \"0755\"\n", True),
    ("sbxc: 1\nenv:\n  set:\n    V: yes\n", False),
    ("sbxc: 1\nenv:\n  set:\n    ON: \"1\"\n", False),
    ("sbxc: 1\nenv:\n  set:\n    \"ON\": \"1\"\n", True),
    ("sbxc: 1\nenv:\n  set: {}\n", True),
    ("sbxc: 1\nenv:\n  set: []\n", False),
    ("sbxc: 1\nenv:\n  pass: PATH\n", False),
    ("sbxc: 1\nfilesystem: [read /]\n", True),
    ("sbxc: 1\nfilesystem: [[read /]]\n", False),
    ("sbxc: 1\nfilesystem: [read/usr]\n", False),
    ("sbxc: 1\nfilesystem: ['read \"a\"\"b\"']\n", False),
    ("sbxc: 1\nfilesystem: ['read \"a b\" /c']\n", True),
    ("sbxc: 1\nnetwork: [connect tcp 70000]\n", False),
    ("sbxc: 1\nnetwork: [connect tcp 65535]\n", True),
    ("sbxc: 1\nproject: \"\"\n", False),
    ("sbxc: 1\ncache: {root: 0777}\n", False),
    ("sbxc: 1\ncache:\n  root:\n", False),
    ("sbxc: 1\nlandlock: {min_abi: 010}\n", False),
    ("sbxc: 1\nlandlock: {min_abi: 4.0}\n", True),
    ("sbxc: 1\nworkspace: {max_sessions: 4, max_bytes: 2G}\n", True),
    ("sbxc: 1\nworkspace: {max_bytes: 2g}\n", False),
    ("sbxc: 1\nlocked: [network, home]\n", True),
    ("sbxc: 1\nlocked: [on]\n", False),
]


def test_written_cases_agree():
    for text, accepted in AGREE:
        assert loader_accepts(text) == accepted, text
        assert schema_accepts(text, SCHEMA) == accepted, text


def test_what_the_schema_cannot_see():
    """Checks a JSON Schema cannot express, so the loader alone makes them (and the
    generator above leaves them out): a port range whose first port is above the second,
    and a syscall name libseccomp does not know on this machine (its table is per host)."""
    for text in ("sbxc: 1\nnetwork: [bind tcp 9-3]\n", "sbxc: 1\nsyscalls: {deny: [no_such_call]}\n"):
        assert schema_accepts(text, SCHEMA) and not loader_accepts(text), text


def test_the_evaluator_knows_every_keyword_the_schema_uses():
    # valid() raises SchemaError on a keyword outside its subset; walk every part of the schema.
    def walk(s):
        if isinstance(s, dict):
            valid(object(), {k: v for k, v in s.items() if k not in ("properties", "items", "oneOf",
                                                                     "additionalProperties", "propertyNames")})
            for k in ("items", "additionalProperties", "propertyNames"):
                if isinstance(s.get(k), dict):
                    walk(s[k])
            for sub in s.get("properties", {}).values():
                walk(sub)
            for sub in s.get("oneOf", ()):
                walk(sub)

    walk(SCHEMA)
