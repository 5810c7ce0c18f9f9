"""Live checks of protections the compiler puts into every plan, through real ``sbxc exec``:

- a policy file another user could have written is refused (125) and nothing runs;
- with a custom ``cache.root`` the default root (plan cache, other projects' caches) stays
  hidden, on bwrap and on Landlock;
- no setuid/setgid bit can be set or created on a host file, on bwrap and on Landlock.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import tempfile

import pytest

from conftest import SANDBOX_PYTHON, base_env, run, sbxc_argv
from sbxc import cache
from sbxc.runtime import cachedir, probe, safeopen, trees

pytestmark = pytest.mark.live

UID = os.getuid()
HOST = probe.probe_host(os.environ, full=True)


def _backend(name):
    if name == "bwrap":
        why = "" if HOST.bwrap and HOST.userns else "bwrap with user namespaces is not available here"
    elif name == "oci":
        why = "" if probe.host_program("runc", os.environ)[0] else "runc is not installed (scripts/setup installs it)"
    else:
        why = "" if HOST.landlock_abi > 0 else "Landlock is not available in this kernel"
    return pytest.param(name, marks=pytest.mark.skipif(bool(why), reason=why), id=name)


BACKENDS = [_backend("bwrap"), _backend("landlock"), _backend("oci")]


# --- policy files of other users ------------------------------------------------------------

def test_exec_refuses_a_policy_others_can_write_and_runs_nothing(sbxc):
    proj = sbxc.project
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nenv:\n  pass: [\"*\"]\n")
    os.chmod(os.path.join(proj, "sandbox.policy.yaml"), 0o666)
    marker = os.path.join(proj, "ran")
    r = sbxc(None, "/bin/sh", "-c", f"touch {shlex.quote(marker)}")
    assert r.rc == 125, r
    assert "[SBX025]" in r.err and "writable by others" in r.err
    assert not os.path.exists(marker)
    # control: the same file, no longer writable by others, runs
    os.chmod(os.path.join(proj, "sandbox.policy.yaml"), 0o644)
    r = sbxc(None, "/bin/sh", "-c", f"touch {shlex.quote(marker)}")
    assert r.rc == 0, r
    assert os.path.exists(marker)


@pytest.mark.root_only  # giving a file to another user
def test_exec_refuses_a_policy_left_in_a_shared_folder_by_another_user(bwrap_works, tmp_path, home):
    shared = tmp_path / "shared"
    work = shared / "work"
    work.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o1777)
    p = shared / "sandbox.policy.yaml"
    p.write_text("sbxc: 1\nextends: [builtin:default]\nhome: writable\nenv:\n  pass: [\"*\"]\n")
    os.chown(p, 65534, 65534)
    marker = work / "ran"
    r = run(sbxc_argv("exec", "--", "/bin/sh", "-c", f"touch {shlex.quote(str(marker))}"),
            env=base_env(home), cwd=str(work))
    assert r.rc == 125, r
    assert "[SBX025]" in r.err and "owned by" in r.err
    assert not marker.exists()


# --- the default cache root with a custom cache.root ---------------------------------------

@pytest.fixture
def default_root_files():
    """A file in the default root's plans/ and another project's cache folder there, made
    the way sbxc makes them (0700 folders, checked); removed afterwards."""
    root = cache.default_root(UID, os.environ)
    root_fd = cachedir.open_root(root, UID, create=True)
    tag = os.urandom(6).hex()
    other = f"hardening-test-{tag}"
    made = []
    try:
        plans_fd, _ = safeopen.open_owned(root_fd, "plans", "plans", root + "/plans", UID, True)
        os.close(plans_fd)
        os.mkdir(other, 0o700, dir_fd=root_fd)
        made.append(other)
        secret_plan = f"{root}/plans/zz-hardening-test-{tag}"
        with open(secret_plan, "w") as f:
            f.write("PLAN-SECRET\n")
        with open(f"{root}/{other}/note", "w") as f:
            f.write("OTHER-PROJECT-SECRET\n")
        yield root, secret_plan, f"{root}/{other}"
    finally:
        for name in made:
            trees.remove_tree(root_fd, name)
        try:
            os.unlink(f"{root}/plans/zz-hardening-test-{tag}")
        except FileNotFoundError:
            pass
        os.close(root_fd)


@pytest.fixture
def custom_root():
    d = tempfile.mkdtemp(prefix="sbxc-hardening-", dir="/var/tmp")
    yield os.path.join(d, "cache-root")
    fd = os.open("/var/tmp", os.O_RDONLY | os.O_DIRECTORY)
    try:
        trees.remove_tree(fd, os.path.basename(d))
    finally:
        os.close(fd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_cache_root_keeps_the_default_root_hidden(bwrap_works, project, home, default_root_files,
                                                         custom_root, backend):
    root, secret_plan, other = default_root_files
    policy = os.path.join(project, "sandbox.policy.yaml")
    with open(policy, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\ncache:\n  root: {json.dumps(custom_root)}\n")
    q = shlex.quote
    script = f'''
cat {q(secret_plan)} && echo READ-PLAN
ls {q(os.path.dirname(secret_plan))} && echo LISTED-PLANS
cat {q(other)}/note && echo READ-OTHER
ls {q(other)} && echo LISTED-OTHER
ls {q(root)} && echo LISTED-ROOT
echo mine > "$XDG_CACHE_HOME/own" && cat "$XDG_CACHE_HOME/own" && echo OWN-OK
true'''
    r = run(sbxc_argv("exec", "--backend", backend, "--policy", policy, "--", "/bin/sh", "-c", script),
            env=base_env(home), cwd=project)
    assert r.rc == 0, r
    # Nothing of the host's folders shows: no content, no names. (On bwrap the runner's own
    # empty plans/ mount point may show in the masked root: it is no host content.)
    for bad in ("PLAN-SECRET", "READ-PLAN", "OTHER-PROJECT-SECRET", "READ-OTHER", "LISTED-OTHER",
                os.path.basename(secret_plan), os.path.basename(other)):
        assert bad not in r.out, (bad, r)
    # control: the project's own cache folder, under the custom root, works
    assert "mine\nOWN-OK" in r.out, r
    own = cache.project_dir(custom_root, project)
    assert open(os.path.join(own, "xdg", "own")).read() == "mine\n"


# --- setuid and setgid bits ---------------------------------------------------------------

SETID_PROBE = r'''
import json, os, sys
f = sys.argv[1]
out = {}
for name, mode in (("suid", 0o4755), ("sgid", 0o2755), ("both", 0o6755), ("plain", 0o755)):
    try:
        os.chmod(f, mode)
        out["chmod-" + name] = "ok"
    except OSError as e:
        out["chmod-" + name] = e.errno
    if name == "plain" and out["chmod-plain"] == "ok":
        os.chmod(f, 0o644)
fd = os.open(f, os.O_RDONLY)
try:
    os.fchmod(fd, 0o4755)
    out["fchmod-suid"] = "ok"
except OSError as e:
    out["fchmod-suid"] = e.errno
os.close(fd)
d = os.path.dirname(f)
for name, mode in (("suid", 0o4755), ("sgid", 0o2755), ("plain", 0o755)):
    p = os.path.join(d, "new-" + name)
    try:
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode))
        out["create-" + name] = oct(os.stat(p).st_mode & 0o7777)
    except OSError as e:
        out["create-" + name] = e.errno
try:
    os.mknod(os.path.join(d, "node-suid"), 0o104755)
    out["mknod-suid"] = "ok"
except OSError as e:
    out["mknod-suid"] = e.errno
print(json.dumps(out))
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_setuid_or_setgid_bit_on_host_files(sbxc, backend):
    target = os.path.join(sbxc.project, "src", "tool")
    with open(target, "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(target, 0o644)
    probe_py = os.path.join(sbxc.project, "probe.py")
    with open(probe_py, "w") as f:
        f.write(SETID_PROBE)
    r = sbxc("sbxc: 1\nextends: [builtin:default]\n", SANDBOX_PYTHON, probe_py, target, args=("--backend", backend))
    assert r.rc == 0, r
    got = json.loads(r.out.strip().splitlines()[-1])
    eperm = 1
    for key in ("chmod-suid", "chmod-sgid", "chmod-both", "fchmod-suid", "create-suid", "create-sgid", "mknod-suid"):
        assert got[key] == eperm, (key, got)
    # control: ordinary mode changes and creations work (chmod +x of a script, pip's way);
    # as root on Landlock every chmod is refused (no Landlock ABI limits it to the project)
    if backend == "landlock" and os.geteuid() == 0:
        assert got["chmod-plain"] == eperm, got
    else:
        assert got["chmod-plain"] == "ok", got
    assert got["create-plain"] == "0o755", got
    # nothing with a setuid/setgid bit reached the host
    for dirpath, _dirs, files in os.walk(sbxc.project):
        for n in files:
            m = os.lstat(os.path.join(dirpath, n)).st_mode
            assert not m & (stat.S_ISUID | stat.S_ISGID), os.path.join(dirpath, n)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert not os.path.exists(os.path.join(sbxc.project, "src", "new-suid"))
