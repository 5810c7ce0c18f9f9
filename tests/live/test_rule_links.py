"""A rule spelled through a symlink (``read /bin`` on a merged-/usr system, a project's
``latest -> build``) works by that spelling inside the sandbox, on every backend: bwrap
mounts the real path and makes the link beside it, Landlock and the host's own links need
nothing made. Checked from inside: the link is there with its target, and what lies
behind it can be read through it."""
from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.live

# The system folders a shell needs, without `read /`: bwrap's root is then its own empty
# tmpfs, and only what the rules name (and the links on the way) is in it.
SYSTEM = "  - read /usr\n  - read /bin\n  - read? /lib\n  - read? /lib64\n  - read? /etc/ld.so.cache\n"


def _policy(backend: str, rules: str) -> str:
    return f"sbxc: 1\nbackend: {backend}\nnetwork: false\nfilesystem:\n{SYSTEM}{rules}  - write {{project}}\n"


@pytest.fixture
def outside(tmp_path):
    """A folder outside the project holding ``real/file.txt`` and ``link -> real``."""
    d = tmp_path / "outside"
    (d / "real").mkdir(parents=True)
    (d / "real" / "file.txt").write_text("behind the link\n")
    os.symlink("real", d / "link")
    return str(d.resolve())


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_rule_spelled_through_a_link_reads_by_that_spelling(sbxc, outside, backend):
    r = sbxc(_policy(backend, f"  - read {outside}/link\n"), "/bin/sh", "-c",
             f"readlink {outside}/link && cat {outside}/link/file.txt")
    assert r.rc == 0, r
    assert r.out == "real\nbehind the link\n", r


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_the_link_is_made_inside_a_tmpfs_too(sbxc, outside, backend):
    """Its folder is a private tmpfs: the link is made there (bwrap), beside the real
    folder mounted into the same tmpfs; Landlock leaves a tmpfs rule's folder as the
    host's (the command cannot write it)."""
    r = sbxc(_policy(backend, f"  - tmpfs {outside}\n  - read {outside}/link\n"), "/bin/sh", "-c",
             f"cat {outside}/link/file.txt")
    assert r.rc == 0, r
    assert r.out == "behind the link\n", r


def test_system_links_of_a_merged_usr(sbxc):
    """``read /bin`` where /bin is a link (merged /usr): /bin/sh runs by that name, and the
    link inside points where the host's does. Where /bin is a real folder, it is mounted
    as one and the same command runs."""
    r = sbxc(_policy("bwrap", ""), "/bin/sh", "-c", "readlink /bin; echo ran")
    assert r.rc == 0, r
    want = (os.readlink("/bin") + "\n") if os.path.islink("/bin") else ""
    assert r.out == want + "ran\n", r


def test_a_link_under_a_host_bind_is_the_hosts_own(sbxc, project):
    """A link inside a folder bound from the host (the project here) is already there:
    nothing is made over it, and it still reads through."""
    os.makedirs(os.path.join(project, "build"))
    with open(os.path.join(project, "build", "out.txt"), "w") as f:
        f.write("built\n")
    os.symlink("build", os.path.join(project, "latest"))
    r = sbxc(_policy("bwrap", f"  - read {project}/latest\n"), "/bin/sh", "-c",
             f"readlink {project}/latest && cat {project}/latest/out.txt")
    assert r.rc == 0, r
    assert r.out == "build\nbuilt\n", r
