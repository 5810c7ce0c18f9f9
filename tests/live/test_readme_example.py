"""The README's first example, copied from the README and run as a person would after the
set-up: in bash, with ``sbxc`` found on PATH as a symlink to the installed launcher (what
scripts/setup puts in /usr/local/bin or ~/.local/bin), and nothing else of the venv on PATH."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_launcher import LAUNCHER

pytestmark = pytest.mark.live

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def first_example() -> str:
    text = open(README).read()
    section = text[text.index("## First example"):]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start:section.index("```\n", start)]


def test_readme_first_example_runs_sandboxed(bwrap_works, home, tmp_path):
    if not os.path.exists(LAUNCHER):
        pytest.fail(f"{LAUNCHER} is missing: scripts/setup installs it")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(LAUNCHER, bindir / "sbxc")
    os.chmod(tmp_path, 0o755)
    os.makedirs(os.path.join(home, ".ssh"), exist_ok=True)
    venv_bin = os.path.dirname(sys.executable)
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":")
            if p and os.path.realpath(p) != os.path.realpath(venv_bin)]
    env = {"PATH": ":".join([str(bindir)] + path), "HOME": home, "LANG": "C.UTF-8", "TMPDIR": str(tmp_path),
           "SBXC_ROOT": os.environ["SBXC_ROOT"]}
    script = first_example() + "\npwd > \"$HOME/example-folder\"\n"
    p = subprocess.run(["bash", "-e", "-c", script], env=env,
                       capture_output=True, text=True, timeout=120)
    # The sandboxed command's last step succeeds; its earlier ones fail as the README says.
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    folder = open(os.path.join(home, "example-folder")).read().strip()
    assert folder.startswith(str(tmp_path)), folder  # mktemp -d: a fresh folder, not a fixed name
    assert open(os.path.join(folder, "out.txt")).read() == "built\n"
    assert "PRIVATE KEY" not in p.stdout
    assert "id_rsa: No such file or directory" in p.stderr, p.stderr[-2000:]
    assert "/etc/x: Read-only file system" in p.stderr, p.stderr[-2000:]
    assert not os.path.exists("/etc/x")
    links = [ln.split()[0] for ln in p.stdout.splitlines() if "<" in ln and ">" in ln]
    assert links == ["lo"], p.stdout[-2000:]
    assert "0 errors" in p.stdout
    # Control: the same key is readable outside the sandbox.
    assert open(os.path.join(home, ".ssh", "id_rsa")).read() == "PRIVATE KEY\n"
    from conftest import remove_project_cache

    remove_project_cache(os.path.realpath(folder))
