"""Policy sources a sandboxed command can steer: an ``extends`` target it relinks to a
secret, an old policy's folder it moves to where the person runs next, and a candidate name
it links to a FIFO or device. Each is carried out by a real sandboxed command; the next
``sbxc exec`` must refuse it (or, for the FIFO, never open it)."""
import os
import re
import subprocess

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock", "oci"]
SECRET = "SECRET-XYZ"


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _exec(home, cwd, *cmd, args=()):
    return run(sbxc_argv("exec", *args, "--", *cmd), env=base_env(home), cwd=cwd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_relinked_extends_target_is_refused_before_it_is_read(sbxc, tmp_path, backend):
    """The command points ``ci/base.yaml`` (an extends target) at a secret outside the
    project, readable by all. The next run must refuse the link (the journal) without
    printing a byte of the secret. Control: the same secret text in a regular extends
    target the person wrote is quoted in the diagnostic, so the test would see a leak."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"),
           "sbxc: 1\nextends: [builtin:default, ./ci/base.yaml]\nhome: hidden\n")
    base = os.path.join(project, "ci", "base.yaml")
    _write(base, "sbxc: 1\n")
    vault = tmp_path / "vault"
    vault.mkdir()
    secret = vault / "token"
    secret.write_text(f"api_token: {SECRET}\n")
    secret.chmod(0o644)
    r = _exec(home, project, "sh", "-c", f"ln -sf {secret} {base}", args=("--backend", backend))
    assert r.rc == 0 and os.path.islink(base), r
    r = _exec(home, project, "true", args=("--backend", backend))
    assert r.rc == 125, r
    assert SECRET not in r.out + r.err, r
    assert re.search(r"(may have been|was) written by (the|a) sandboxed command", r.err) and base in r.err, r
    # Control: the same bytes, put there by the person, are read and quoted.
    os.unlink(base)
    _write(base, f"api_token: {SECRET}\n")
    r = _exec(home, project, "true", args=("--backend", backend))
    assert r.rc == 125 and SECRET in r.err, r


def test_linked_source_out_of_its_folder_is_not_quoted(sbxc, tmp_path):
    """A source reached through a symlink that leads out of its folder is never quoted,
    even when no run wrote it (the person's own link): only that it has errors is said.
    Control: the regular file with the same text is quoted (see the test above)."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), "sbxc: 1\nextends: [builtin:default, ./ci/base.yaml]\n")
    secret = tmp_path / "token"
    secret.write_text(f"api_token: {SECRET}\n")
    secret.chmod(0o644)
    os.makedirs(os.path.join(project, "ci"))
    os.symlink(secret, os.path.join(project, "ci", "base.yaml"))
    r = run(sbxc_argv("compile", "--check"), env=base_env(home), cwd=project)
    assert r.rc != 0 and SECRET not in r.out + r.err and "not shown" in r.out + r.err, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_old_policy_moved_in_by_a_folder_rename_is_refused(sbxc, backend):
    """``mv app app.orig && mv examples/loose app``: the loose policy the person once wrote
    keeps its ctime (a rename changes only the moved folder's), yet now applies in app/.
    Refused until accepted; then used."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), "sbxc: 1\nextends: [builtin:default]\n")
    _write(os.path.join(project, "app", "sandbox.policy.yaml"), "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    loose = os.path.join(project, "examples", "loose", "sandbox.policy.yaml")
    _write(loose, "sbxc: 1\nextends: [builtin:default]\nnetwork: true\n")
    app = os.path.join(project, "app")
    assert _exec(home, app, "true", args=("--backend", backend)).rc == 0  # app's own policy, noted clean
    r = _exec(home, project, "sh", "-c", "mv app app.orig && mv examples/loose app", args=("--backend", backend))
    assert r.rc == 0 and "network: true" in open(os.path.join(app, "sandbox.policy.yaml")).read(), r
    moved = os.path.join(app, "sandbox.policy.yaml")
    marker = os.path.join(app, "marker")
    r = _exec(home, app, "touch", marker, args=("--backend", backend))
    assert r.rc == 125 and f"sbxc: the policy {moved}" in r.err and "compile --check" in r.err, r
    assert not os.path.exists(marker)
    r = run(sbxc_argv("compile", "--check", moved), env=base_env(home), cwd=app)
    assert r.rc == 0, r
    r = _exec(home, app, "touch", marker, args=("--backend", backend))
    assert r.rc == 0 and os.path.exists(marker), r


def test_candidate_linked_to_a_fifo_is_never_opened(sbxc, tmp_path):
    """The command links ``sub/sandbox.policy.yaml`` to a FIFO (standing in for a device:
    opening one runs its driver). Neither the planting run's post-run watch nor the next
    run from sub/ may open it for reading (O_PATH, which runs no driver, is allowed).
    Control: a plain ``cat`` opening the link shows in the same trace."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), "sbxc: 1\nextends: [builtin:default]\n")
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    link = os.path.join(project, "sub", "sandbox.policy.yaml")
    os.makedirs(os.path.dirname(link))
    trace = str(tmp_path / "trace")

    def traced(cwd, *argv):
        return run(["strace", "-f", "-qq", "-e", "trace=openat,open", "-o", trace, *argv], env=base_env(home), cwd=cwd)

    def opened_for_reading():
        names = (link, "sandbox.policy.yaml", fifo)
        out = []
        for line in open(trace):
            m = re.search(r'open(?:at)?\([^"]*"([^"]*)", ([A-Z_|]+)', line)
            if m and "O_PATH" not in m.group(2) and (m.group(1) in names or m.group(1).endswith("sub/sandbox.policy.yaml")):
                out.append(line.strip())
        return out

    r = traced(project, *sbxc_argv("exec", "--", "ln", "-s", fifo, link))
    assert r.rc == 0 and os.path.islink(link), r
    assert opened_for_reading() == [], open(trace).read()[-3000:]
    r = traced(os.path.dirname(link), *sbxc_argv("exec", "--", "true"))
    assert opened_for_reading() == [], open(trace).read()[-3000:]
    # Control: the trace does see a read open of the link.
    r = traced(os.path.dirname(link), "timeout", "2", "cat", link)
    assert opened_for_reading(), open(trace).read()[-3000:]
