"""env.set values reach the command exactly as the file writes them (real bwrap, real
command): quoted text arrives unchanged, and a plain scalar YAML would retype stops the run
before the command starts instead of reaching it changed."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.live

VALUES = {"A": "0755", "B": "1.10", "C": "0x10", "D": "1e3", "E": "yes", "F": "~", "G": "2026-01-02",
          "H": "1:30", "I": ".inf", "J": "", "K": "null"}
SHOW = 'for v in A B C D E F G H I J K; do eval "printf \'%s=[%s]\\n\' $v \\"\\$$v\\""; done'


def _policy(set_block: str) -> str:
    return "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nenv:\n  set:\n" + set_block


def test_quoted_values_reach_the_command_as_written(sbxc):
    block = "".join(f"    {k}: \"{v}\"\n" for k, v in VALUES.items())
    r = sbxc(_policy(block), "sh", "-c", SHOW)
    assert r.rc == 0, r
    assert r.out.splitlines() == [f"{k}=[{v}]" for k, v in VALUES.items()], r


def test_a_retyped_plain_value_never_reaches_the_command(sbxc):
    import pathlib

    marker = pathlib.Path(sbxc.project) / "ran"  # the project is what the command may write
    r = sbxc(_policy("    V: 0755\n"), "sh", "-c", f"echo \"$V\" > {marker}")
    assert r.rc == 125, r
    assert not marker.exists()
    assert "SBX026" in r.err and '"0755"' in r.err, r
    # Control: the same run with the value quoted does reach the command, unchanged.
    r = sbxc(_policy("    V: \"0755\"\n"), "sh", "-c", f"echo \"$V\" > {marker}")
    assert r.rc == 0, r
    assert marker.read_text() == "0755\n"


def test_a_passed_url_with_a_password_is_warned_about(sbxc):
    """A variable env.pass lets through whose value is a URL with a password
    (PIP_INDEX_URL=https://user:secret@host/...) reaches the command, which can read it:
    the run says so, naming the variable, never the value. The control: the same URL
    without a password, and one the policy sets itself, get no warning."""
    policy = "sbxc: 1\nextends: [builtin:default]\nbackend: bwrap\nenv:\n  pass: [PIP_INDEX_URL, EXTRA]\n"
    r = sbxc(policy, "sh", "-c", 'test -n "$PIP_INDEX_URL" && echo seen',
             env={"PIP_INDEX_URL": "https://user:s3cret@pkgs.example.invalid/simple",
                  "EXTRA": "https://pkgs.example.invalid/a https://u:pw@pkgs.example.invalid/b"})
    assert r.rc == 0 and r.out == "seen\n", r
    assert "warning: PIP_INDEX_URL passes a URL with a password" in r.err, r
    assert "warning: EXTRA passes a URL with a password" in r.err, r
    assert "s3cret" not in r.err and "pw@" not in r.err, r
    quiet = sbxc(policy, "true", env={"PIP_INDEX_URL": "https://pkgs.example.invalid/simple", "EXTRA": "a@b"})
    assert quiet.rc == 0 and "password" not in quiet.err, quiet
    chosen = sbxc(policy + "  set:\n    PIP_INDEX_URL: \"https://u:p@pkgs.example.invalid/simple\"\n", "true")
    assert chosen.rc == 0 and "password" not in chosen.err, chosen
