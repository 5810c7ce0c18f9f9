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
