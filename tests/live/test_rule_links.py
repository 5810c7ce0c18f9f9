"""A rule spelled through a symlink (``read /bin`` on a merged-/usr system, a project's
``latest -> build``) works by that spelling inside the sandbox, on every backend: bwrap
mounts the real path and makes the link beside it, Landlock and the host's own links need
nothing made. Checked from inside: the link is there with its target, and what lies
behind it can be read through it."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import base_env, run

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


def _runc():
    from conftest import find_runc

    find_runc()


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_a_rule_spelled_through_a_link_reads_by_that_spelling(sbxc, outside, backend):
    """On OCI the link is made in the bundle's rootfs, before runc mounts anything."""
    if backend == "oci":
        _runc()
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


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
def test_system_links_of_a_merged_usr(sbxc, backend):
    """``read /bin`` where /bin is a link (merged /usr): /bin/sh runs by that name, and the
    link inside points where the host's does. Where /bin is a real folder, it is mounted
    as one and the same command runs."""
    if backend == "oci":
        _runc()
    r = sbxc(_policy(backend, ""), "/bin/sh", "-c", "readlink /bin; echo ran")
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


def test_oci_reports_a_link_it_cannot_make(sbxc, outside, project, home):
    """A link inside a tmpfs cannot be made in an OCI bundle (runc mounts the tmpfs over the
    rootfs): the report says narrowed, naming the link and its target, before any run."""
    from conftest import base_env, run, sbxc_argv

    path = os.path.join(project, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write(_policy("oci", f"  - tmpfs {outside}\n  - read {outside}/link\n"))
    r = run(sbxc_argv("compile", path, "--check", "--verbose", "--backend", "oci"), env=base_env(home), cwd=project)
    assert f"link {outside}/link: narrowed: {outside}/link is a symlink (to real)" in r.out, r



def test_compiled_bundle_never_follows_a_link_already_in_its_rootfs(tmp_path, project, home, outside):
    """`sbxc compile --backend oci -o DIR` into a folder that already holds a rootfs with a
    link in it (a folder a sandboxed command could have written): the links the plan
    needs are made through folder descriptors that never follow a link, so nothing is
    made outside the bundle; the compile fails instead. Control: into a fresh folder the
    same policy's links are made."""
    from conftest import base_env, run, sbxc_argv

    path = os.path.join(project, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write(_policy("oci", f"  - read {outside}/link\n"))
    fresh = tmp_path / "fresh"
    r = run(sbxc_argv("compile", "--backend", "oci", "-o", str(fresh)), env=base_env(home), cwd=project)
    assert r.rc == 0, r
    first = outside.strip("/").split("/")[0]  # the top folder the link's parents start at
    assert os.path.islink(fresh / "rootfs" / outside.lstrip("/") / "link")
    bad = tmp_path / "bad"
    (bad / "rootfs").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, bad / "rootfs" / first)
    r = run(sbxc_argv("compile", "--backend", "oci", "-o", str(bad)), env=base_env(home), cwd=project)
    assert r.rc != 0, r
    assert os.listdir(elsewhere) == [], os.listdir(elsewhere)


SWAP_BEFORE_CONFINE = r"""
import os, sys
from sbxc.runtime import landlock_run
real = landlock_run.confine
def confine(*args, **kw):
    # As a command of another run of this project would, between sbxc's checks and the
    # command's own Landlock rules: a folder on the way to a rule becomes a link.
    p = os.environ["SBXC_TEST_PROJECT"]
    os.rename(p + "/a", p + "/a.moved")
    os.symlink(os.environ["SBXC_TEST_ELSEWHERE"], p + "/a")
    return real(*args, **kw)
landlock_run.confine = confine
from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_landlock_never_carries_a_project_rule_through_a_link_made_since_the_checks(project, home, tmp_path):
    """The plan's rule paths are real paths; a folder on the way to one, under the project,
    that became a link after sbxc's checks (a run of the same project can do that while
    this one starts) would carry the rule to the link's target. Landlock's rules below the
    project are opened one folder at a time without following a link, and such a run is
    refused (125, one line). The control: the same run without the swap writes the
    project's file, and the target folder was the one the link named."""
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() < 1:
        pytest.fail("Landlock is not available here")
    os.makedirs(os.path.join(project, "a", "b"))
    with open(os.path.join(project, "a", "secret"), "w") as f:
        f.write("s\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "b").mkdir(parents=True)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nbackend: landlock\nnetwork: false\nfilesystem:\n"
                "  - mask {project}/a/secret\n")
    env = base_env(home)
    r = run([sys.executable, "-m", "sbxc", "exec", "--", "sh", "-c", "echo ok > a/b/f"], env=env, cwd=project)
    assert r.rc == 0 and open(os.path.join(project, "a", "b", "f")).read() == "ok\n", r  # the control
    env.update(SBXC_TEST_PROJECT=project, SBXC_TEST_ELSEWHERE=str(elsewhere))
    r = run([sys.executable, "-c", SWAP_BEFORE_CONFINE, "exec", "--", "sh", "-c", f"echo bad > {elsewhere}/b/f"],
            env=env, cwd=project)
    assert os.readlink(os.path.join(project, "a")) == str(elsewhere)  # the swap was made
    assert r.rc == 125 and "is a link now" in r.err and r.err.count("\n") == 1, r
    assert not (elsewhere / "b" / "f").exists()


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_a_link_the_command_plants_never_opens_a_mask(sbxc, project, home, backend, request):
    """`read? {project}/vendor/shared`, missing: the command makes it a link to
    ~/.ssh/id_rsa, which builtin:default masks. The deepest rule decides, so the next
    compile (the optional path appeared) granted the key to every later run, with no
    warning. A rule reached through a link whose real path lies inside a mask or tmpfs is
    now an error (SBX057): the run is refused and the key stays hidden. The control: the
    same link under a policy that does not mask ~/.ssh reads the key, so the test sees
    a grant."""
    from conftest import runc_for

    runc_for(request) if backend == "oci" else None
    policy = (f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\n"
              "filesystem:\n  - read? {project}/vendor/shared\n")
    plant = sbxc(policy, "sh", "-c", "mkdir -p vendor && ln -s ~/.ssh/id_rsa vendor/shared && echo planted")
    assert plant.rc == 0 and "planted" in plant.out, plant
    r = sbxc(policy, "cat", "vendor/shared")
    assert "PRIVATE KEY" not in r.out, r
    assert r.rc == 125 and "SBX057" in r.err, r
    # Named as itself, the path is the person's own choice and the deepest rule wins.
    named = f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nfilesystem:\n  - read ~/.ssh/id_rsa\n"
    n = sbxc(named, "cat", os.path.join(home, ".ssh", "id_rsa"))
    assert (n.rc, n.out) == (0, "PRIVATE KEY\n"), n
    # The control: without the mask, the link is followed and the key read.
    open_home = (f"sbxc: 1\nbackend: {backend}\nfilesystem:\n  - read /\n  - write {{project}}\n  - tmpfs /tmp\n"
                 "  - read? {project}/vendor/shared\n")
    c = sbxc(open_home, "cat", "vendor/shared")
    assert (c.rc, c.out) == (0, "PRIVATE KEY\n"), c


def test_a_link_in_the_project_that_leads_where_no_rule_reaches_is_refused(sbxc, outside, project):
    """A `read` rule spelled through a link in the project (writable: the command can
    re-point it) to a folder no other rule covers would have the next compile grant
    wherever the link then points: refused (SBX057), naming the real path to write
    instead. The control: the real path named as itself is read, and a link in the
    project to a folder inside it (`latest -> build`) stays fine."""
    os.symlink(f"{outside}/real", os.path.join(project, "shared"))
    r = sbxc(_policy("bwrap", "  - read {project}/shared\n"), "cat", "shared/file.txt")
    assert r.rc == 125 and "SBX057" in r.err and f"read {outside}/real" in r.err, r
    ok = sbxc(_policy("bwrap", f"  - read {outside}/real\n"), "cat", f"{outside}/real/file.txt")
    assert (ok.rc, ok.out) == (0, "behind the link\n"), ok


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_builtin_default_hides_the_registries_credential_files(sbxc, home, backend, request):
    """builtin:default masks the credential files of cargo, gradle, maven, rubygems, git's
    own store, container registries, rclone and the Hugging Face hub, besides ~/.ssh and
    the rest. The control: each file reads outside the sandbox."""
    from conftest import runc_for

    runc_for(request) if backend == "oci" else None
    files = [".cargo/credentials.toml", ".gradle/gradle.properties", ".m2/settings-security.xml",
             ".gem/credentials", ".config/git/credentials", ".config/containers/auth.json",
             ".config/rclone/rclone.conf", ".cache/huggingface/token"]
    for rel in files:
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"TOKEN-{rel}\n")
        assert open(path).read().startswith("TOKEN-")  # the control
    script = "; ".join(f"cat ~/{rel} 2>/dev/null" for rel in files) + "; echo done"
    r = sbxc(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\n", "sh", "-c", script)
    assert r.rc == 0 and r.out.endswith("done\n"), r
    assert "TOKEN-" not in r.out, r
