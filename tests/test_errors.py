"""Error tests: every tests/errors/*.yaml is a bad policy that states what it expects.

    - wirte /x          # expect: SBX012@5

``CODE@COL`` on a line means a diagnostic with that code at that line and column (1-based)
of that file; several may be listed. Every error and warning the compiler gives for a case
must be expected, and every expectation met. Files under tests/errors/lib/ are copied
beside the case (for ``extends``); their expectations count only when the case loads them.
``# setup: link proj/out {root}/data`` lines add to the case's tree (see make_tree).
"""
from __future__ import annotations

import io
import os
import re
import shutil
import tempfile

import pytest

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree
from support.addrs import public_v4

HERE = os.path.join(os.path.dirname(__file__), "errors")
# A case that needs a public address literal writes {public_addr}: one computed
# (support/addrs.py), so that no routable address stands in the corpus (nothing in it is
# ever connected to; the compiler only classifies it).
PUBLIC_ADDR = public_v4()
CASES = sorted(f for f in os.listdir(HERE) if f.endswith(".yaml"))
EXPECT = re.compile(r"#\s*expect:\s*(.*)$")
ITEM = re.compile(r"(SBX\d{3})@(\d+)")


def expectations(path: str) -> set[tuple[str, int, int]]:
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = EXPECT.search(line)
            if m:
                for code, col in ITEM.findall(m.group(1)):
                    out.add((code, lineno, int(col)))
    return out


def run_case(name: str, root: str):
    from sbxc.compiler.api import compile_policy

    src = os.path.join(HERE, name)
    setup = "\n".join(l.split("# setup:", 1)[1] for l in open(src, encoding="utf-8", errors="replace")
                      if "# setup:" in l)
    make_tree(root, setup)
    proj = os.path.join(root, "proj")
    shutil.copytree(os.path.join(HERE, "lib"), os.path.join(proj, "lib"))
    dest = os.path.join(proj, "sandbox.policy.yaml")
    with open(src, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    with open(dest, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text.replace("{public_addr}", PUBLIC_ADDR))
    home = os.path.join(root, "home/user")
    result = compile_policy(None, cwd=proj, environ=fake_environ(home, ONE="1"), host=fake_host(home=home),
                            overrides={}, paths=FakePaths(root))
    return result, dest, proj


@pytest.fixture
def case_root():
    root = tempfile.mkdtemp(prefix="sbxc-errors-", dir="/var/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", CASES)
def test_error_case(name, case_root):
    result, dest, proj = run_case(name, case_root)
    expected = set()
    for path, _sha in result.sources:
        if path.startswith("/"):
            rel = os.path.relpath(path, proj)
            for code, line, col in expectations(path):
                expected.add((rel, code, line, col))
    got = set()
    for d in result.diagnostics:
        if d.severity in ("error", "warning"):
            assert d.span is not None and d.span.file.startswith("/"), f"{d} has no file position"
            got.add((os.path.relpath(d.span.file, proj), d.code, d.span.line, d.span.col))
    assert got == expected, "\n".join(
        [f"unexpected: {g}" for g in sorted(got - expected)] + [f"missing:    {e}" for e in sorted(expected - got)])
    assert expected, "a case must expect at least one diagnostic"
    if any(code[1] for code in expected if True) and any(d.severity == "error" for d in result.diagnostics):
        assert result.plan is None


def test_rendering_shows_caret_and_code(case_root):
    from sbxc.compiler.diagnostics import render_text

    result, dest, proj = run_case("verbs.yaml", case_root)
    text = render_text(result.diagnostics, result.lines, proj)
    first = text.splitlines()
    assert re.match(r"sandbox\.policy\.yaml:\d+:\d+: error: unknown verb \"wirte\"; did you mean \"write\"\?  \[SBX012\]", first[0])
    caret = first[2]
    col = int(first[0].split(":")[2])
    assert caret.index("^") == col - 1 + 2  # two spaces of indent before the source line


def test_json_format_carries_the_same_diagnostics(case_root):
    import json

    from sbxc.commands import compile as compile_cmd

    make_tree(case_root)
    proj = os.path.join(case_root, "proj")
    shutil.copy(os.path.join(HERE, "verbs.yaml"), os.path.join(proj, "sandbox.policy.yaml"))
    home = os.path.join(case_root, "home/user")
    out = io.StringIO()
    code = compile_cmd.run(["--check", "--format", "json"], cwd=proj, environ=fake_environ(home), host=fake_host(home=home),
                           paths=FakePaths(case_root), stdout=out, stderr=io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 1 and data["exit"] == 1
    codes = {d["code"] for d in data["diagnostics"]}
    assert "SBX012" in codes
    d = next(d for d in data["diagnostics"] if d["code"] == "SBX012")
    assert d["span"]["line"] > 0 and d["span"]["col"] > 0 and "did you mean" in d["message"]


def test_every_code_is_documented():
    from sbxc.compiler.diagnostics import CODES

    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "policy.md"), encoding="utf-8").read()
    missing = [c for c in CODES if c not in doc]
    assert not missing, f"codes missing from docs/policy.md: {missing}"


def test_bwrap_failure_passes_over_a_cut_off_line():
    """bwrap's message cut after its prefix names nothing: the line before it is the cause."""
    from sbxc.runtime.errors import bwrap_failure

    cause, _fix = bwrap_failure("bwrap: Unable to set up system call filtering as requested\nbwrap: ")
    assert "Unable to set up system call filtering" in cause, cause
    cause, _fix = bwrap_failure("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
    assert "Can't mount proc" in cause, cause  # the control: a whole line is taken as it is
