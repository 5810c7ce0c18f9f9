"""Loading libseccomp (pyseccomp) runs no program the caller's PATH chooses.

pyseccomp finds the library through ctypes.util.find_library, which falls back to running
gcc, cc, ld and objdump from PATH where the loader's cache (ldconfig -p) does not list it.
The test makes that fallback happen (as on such a host) with a PATH whose first folder
holds look-alikes that leave a mark, and checks that loading through sbxc.libseccomp
leaves none; the control imports pyseccomp directly and gets marked.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

SCRIPT = r"""
import ctypes.util, os, sys
ctypes.util._findSoname_ldconfig = lambda name: None  # a host whose loader cache lacks it
os.environ["PATH"] = sys.argv[2] + ":" + os.environ.get("PATH", "/usr/bin:/bin")
try:
    if sys.argv[1] == "sbxc":
        from sbxc.libseccomp import load
        load()
    else:
        import pyseccomp
except BaseException:
    pass
print(os.environ["PATH"].split(":")[0] == sys.argv[2])
"""


@pytest.mark.parametrize("how", ["sbxc", "direct"])
def test_loading_libseccomp_runs_nothing_from_path(tmp_path, how):
    planted = tmp_path / "bin"
    planted.mkdir()
    mark = tmp_path / "ran"
    for name in ("gcc", "cc", "ld", "objdump"):
        p = planted / name
        p.write_text(f"#!/bin/sh\necho {name} >> {mark}\nexit 1\n")
        p.chmod(0o755)
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {SRC!r})\n" + SCRIPT,
                        how, str(planted)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True", r  # the caller's PATH is back after the import
    if how == "sbxc":
        assert not mark.exists(), mark.read_text()
    else:
        # The control: the fallback did run what the PATH named.
        assert mark.exists() and "gcc" in mark.read_text()
