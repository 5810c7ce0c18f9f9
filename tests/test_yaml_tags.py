"""An explicit YAML tag on text its YAML 1.2 core form does not take is an error (SBX055):
readers disagree (PyYAML reads `!!bool "yes"` as true), and sbxc read it as false, which
for `cache.required` turned a refusal into a throwaway cache."""
from __future__ import annotations

import os

import pytest

from compiler_fakes import fake_environ, fake_host
from sbxc.compiler.api import compile_policy


def compiled(tmp_path, body):
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\ncache: {tools: []}\nfilesystem: [read /]\n" + body)
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    return compile_policy(None, cwd=str(tmp_path), environ=fake_environ(home), host=fake_host(home=home),
                          overrides={})


@pytest.mark.parametrize("body, line", [
    ('network: !!bool "yes"\n', 4),
    ('network: !!bool "garbage"\n', 4),
    ('network: !!bool ""\n', 4),
    ('landlock: {best_effort: !!bool "TrUe"}\n', 4),
    ('landlock: {min_abi: !!int "1_0"}\n', 4),
    ('landlock: {min_abi: !!float "1_0.5"}\n', 4),
    ('env: {set: {A: !!null "none"}}\n', 4),
])
def test_a_tag_on_text_it_does_not_take_is_an_error(tmp_path, body, line):
    r = compiled(tmp_path, body)
    assert r.plan is None
    d = [d for d in r.diagnostics if d.code == "SBX055"]
    assert len(d) == 1 and d[0].span.line == line and "YAML readers disagree" in d[0].message, r.diagnostics


def test_required_cache_tagged_yes_is_never_read_as_off(tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text(
        'sbxc: 1\ncache: {tools: [pip], required: !!bool "yes"}\nfilesystem: [read /]\n')
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    r = compile_policy(None, cwd=str(tmp_path), environ=fake_environ(home), host=fake_host(home=home), overrides={})
    assert r.plan is None
    # The tag's error, and the key's own (text where true or false is wanted).
    assert ("SBX055", 2) in [(d.code, d.span.line) for d in r.diagnostics], r.diagnostics


@pytest.mark.parametrize("body, check", [
    ("network: !!bool false\n", lambda p: p.network.mode == "off"),
    ('network: !!bool "TRUE"\n', lambda p: p.network.mode == "on"),
    ('landlock: {min_abi: !!int "+5"}\n', lambda p: p.landlock.min_abi == 5),
])
def test_the_core_forms_are_read_as_tagged(tmp_path, body, check):
    """The control: the YAML 1.2 core spellings of a tag mean what the tag says."""
    r = compiled(tmp_path, body)
    assert r.plan is not None, [(d.code, d.message) for d in r.diagnostics]
    assert check(r.plan)


def test_diagnostics_never_print_raw_bytes_or_control_characters(tmp_path):
    """A ${VAR} value or a file name may hold bytes that are not UTF-8 or escape
    sequences: the text diagnostics show them as escapes. The control: plain Unicode text
    is printed as it is."""
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\ncache: {tools: []}\nfilesystem:\n  - read ${X}/é\n")
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    env = fake_environ(home, X="/nonexistent/\udcff\udcfe\x1b[2K")
    r = compile_policy(None, cwd=str(tmp_path), environ=env, host=fake_host(home=home), overrides={})
    from sbxc.compiler.diagnostics import render_text

    text = render_text(r.diagnostics, {})
    assert r.diagnostics and "\x1b" not in text and "\udcff" not in text, text
    assert "\\xff\\xfe\\x1b[2K" in text and "é" in text, text
