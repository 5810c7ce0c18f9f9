"""Per-session workspaces, live: real sandboxes on the three Linux backends (bwrap,
Landlock, runc), checked from inside the command and by comparing the host project byte
for byte."""
from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from conftest import SANDBOX_PYTHON, base_env, reap_the_killed_oci_run, run, runc_for, sbxc_argv

BACKENDS = ["bwrap", "landlock", "oci"]
MOUNTED = ("bwrap", "oci")
"""The backends that mount the workspace at the project's own path (Landlock cannot)."""


def _landlock_ok():
    from sbxc.runtime.probe import landlock_abi

    return landlock_abi() >= 1


@pytest.fixture(autouse=True)
def own_root(session_root):
    return session_root  # conftest.session_root


@pytest.fixture(params=BACKENDS)
def backend(request, bwrap_works):
    if request.param == "landlock" and not _landlock_ok():
        pytest.skip("no Landlock on this kernel")
    runc_for(request)
    return request.param


class S:
    """``sbxc`` against one project, with the test's fake home."""

    def __init__(self, project, home, backend="bwrap"):
        self.project, self.home, self.backend = project, home, backend

    def __call__(self, *args, cwd=None, timeout=120, env=None):
        return run(sbxc_argv(*args), env=base_env(self.home, env), cwd=cwd or self.project, timeout=timeout)

    def start(self, *args):
        r = self("session", "start", *args)
        assert r.rc == 0, r
        return r.out.strip()

    def sh(self, sid, script, *extra):
        return self("exec", "--backend", self.backend, "--session", sid, *extra, "--", "sh", "-c", script)


@pytest.fixture
def s(project, home, backend):
    return S(project, home, backend)


def tree_state(top: str) -> dict:
    """Every entry under ``top``: kind, mode, content digest or link target."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, top)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(open(p, "rb").read()).hexdigest())
            else:
                out[rel] = ("d" if stat.S_ISDIR(st.st_mode) else "o", stat.S_IMODE(st.st_mode))
    return out


def sessions_root() -> str:
    from sbxc.runtime.sessions import sessions_dir

    return sessions_dir(os.environ)


def fill(project):
    with open(os.path.join(project, "src", "a.py"), "w") as f:
        f.write("a = 1\n")
    with open(os.path.join(project, "src", "b.py"), "w") as f:
        f.write("b = 2\n")
    with open(os.path.join(project, "run.sh"), "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(os.path.join(project, "run.sh"), 0o755)


def test_containment_host_project_unchanged(s, project, tmp_path):
    fill(project)
    outside = tmp_path / "outside"
    outside.mkdir()
    before = tree_state(project)
    sid = s.start()
    script = (f"echo changed > README; rm src/a.py; mv src/b.py src/c.py; chmod 600 run.sh; "
              f"ln -s {outside} out; echo via-link > out/planted 2>/dev/null; "
              f"echo abs > {project}/abs.txt 2>/dev/null; mkdir -p deep/er && echo x > deep/er/f; "
              "cat README; ls src")
    r = s.sh(sid, script)
    assert r.rc == 0, r
    assert r.out.splitlines() == ["changed", "c.py"]
    assert tree_state(project) == before, "the host project changed"
    assert not os.path.exists(outside / "planted")
    r = s.sh(sid, f"cat {project}/abs.txt; echo; (echo y >> {project}/README) 2>/dev/null && echo host-writable "
                  "|| echo host-ro")
    if s.backend in MOUNTED:
        # The workspace sits at the project's own path: the absolute write landed in it.
        assert r.out.startswith("abs") and "host-writable" in r.out, r
    else:
        # Landlock: absolute paths reach the host's copy, read-only.
        assert "host-ro" in r.out and not os.path.exists(os.path.join(project, "abs.txt")), r
    assert tree_state(project) == before
    # Control: the same writes without a session do reach the host.
    c = s("exec", "--backend", s.backend, "--", "sh", "-c", "echo changed > README")
    assert c.rc == 0 and open(os.path.join(project, "README")).read() == "changed\n", c
    assert s("session", "stop", sid).rc == 0


@pytest.mark.parametrize("above", ["read", "write"])
def test_a_project_reached_through_a_rule_above_it_is_the_workspace(backend, home, tmp_path, above):
    """The policy has no rule of the project's own: a folder above it is read-only (``read
    /``) or writable (``write`` on the project's parent). On bwrap and runc the workspace is
    bound over the project with that rule's access: the command reads the workspace's copy
    (changed here, on the host, after the start), a write lands in it and never in the
    host project. On Landlock the command starts in the workspace; a writable folder above
    the project is refused there (the host's copy would stay writable). The control: the
    folder above is really writable, outside the project. (The project lies in a folder of
    its own here: the test's folder holds sbxc's root, whose mask would split a rule on it.)"""
    parent = str(tmp_path / "up")
    project = os.path.join(parent, "project")
    os.makedirs(os.path.join(project, "src"))
    s = S(project, home, backend)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nnetwork: false\nfilesystem:\n  - read /\n"
                + (f"  - write {parent}\n" if above == "write" else ""))
    fill(project)
    before = tree_state(project)
    sid = s.start("--policy", os.path.join(project, "sandbox.policy.yaml"))
    with open(os.path.join(sessions_root(), f"s-{sid}", "ws", "README"), "w") as f:
        f.write("from the workspace\n")
    r = s.sh(sid, f"cat README; (echo new > made) 2>/dev/null && echo wrote || echo refused; "
                  f"echo out > {parent}/outside 2>/dev/null; true")
    if s.backend == "landlock" and above == "write":
        assert r.rc == 125 and r.out == "" and "which holds the project" in r.err, r
    else:
        assert r.rc == 0 and r.out.splitlines() == ["from the workspace", "wrote" if above == "write" else "refused"], r
    if s.backend in MOUNTED:
        r = s.sh(sid, f"cat {project}/README")
        assert r.out == "from the workspace\n", r  # the project's own path is the workspace
    assert tree_state(project) == before, "the host project changed"
    if above == "write" and s.backend in MOUNTED:
        with open(os.path.join(parent, "outside")) as f:
            assert f.read() == "out\n"  # the control
    assert s("session", "stop", sid).rc == 0


def test_a_session_command_is_checked_in_the_workspace(s, project):
    """What the runner checks of the command's file before the start is the workspace's
    copy, not the host project's: a script the session made without a ``#!`` runs under
    sh, as a shell would run it; one that names a missing interpreter is 127; one the
    session made non-executable is 126; one the host project never had runs."""
    fill(project)
    sid = s.start()
    ws = os.path.join(sessions_root(), f"s-{sid}", "ws")
    # Made in the workspace from here, as a command of the session would make them
    # (Landlock as root refuses chmod inside the sandbox).
    for name, text in (("plain", "echo plain script\n"), ("lost", "#!/no/such/sh\n"), ("mine", "#!/bin/sh\necho only here\n")):
        with open(os.path.join(ws, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(ws, name), 0o755)
    os.chmod(os.path.join(ws, "run.sh"), 0o644)
    for argv, rc, out in ((["./plain"], 0, "plain script\n"), (["./lost"], 127, ""),
                          (["./run.sh"], 126, ""), (["./mine"], 0, "only here\n")):
        r = s("exec", "--backend", s.backend, "--session", sid, "--", *argv)
        assert (r.rc, r.out) == (rc, out), (argv, r)
    assert not os.path.exists(os.path.join(project, "mine"))
    r = s("exec", "--backend", s.backend, "--", "./run.sh")
    assert r.rc == 0, r  # the control: the host project's copy runs
    # A tool on the PATH in a folder of the project that only the workspace has: found from
    # a relative PATH entry on every backend, from an absolute one where the workspace is
    # mounted at the project's path (Landlock shows the host's copy there, which has none).
    os.mkdir(os.path.join(ws, "tools"))
    with open(os.path.join(ws, "tools", "wstool"), "w") as f:
        f.write("#!/bin/sh\necho workspace tool\n")
    os.chmod(os.path.join(ws, "tools", "wstool"), 0o755)
    for entry in ("tools", os.path.join(project, "tools")):
        r = s("exec", "--backend", s.backend, "--session", sid, "--", "wstool",
              env={"PATH": entry + ":" + os.environ["PATH"]})
        if entry == "tools" or s.backend in MOUNTED:
            assert (r.rc, r.out) == (0, "workspace tool\n"), (entry, r)
        else:
            assert r.rc == 127 and "command not found" in r.err, (entry, r)
    r = s("exec", "--backend", s.backend, "--", "wstool", env={"PATH": "tools:" + os.environ["PATH"]})
    assert r.rc == 127, r  # the control: the host project has no such tool
    assert s("session", "stop", sid).rc == 0


def test_persistence_and_isolation(s, project):
    a = s.start()
    b = s.start()
    assert a != b
    assert s.sh(a, "echo from-a > state").rc == 0
    r = s.sh(a, "cat state")
    assert r.rc == 0 and r.out == "from-a\n", r
    r = s.sh(b, "cat state 2>&1 || echo absent")
    assert "absent" in r.out, r
    # A session's command cannot reach another session, the pool, or snapshots.
    r = s.sh(b, f"ls {sessions_root()} 2>&1; cat {sessions_root()}/s-{a}/ws/state 2>&1 || echo hidden")
    assert "from-a" not in r.out and "hidden" in r.out, r
    assert not os.path.exists(os.path.join(project, "state"))
    for sid in (a, b):
        assert s("session", "stop", sid).rc == 0


def test_discard_and_snapshots(s, project):
    sid = s.start()
    assert s.sh(sid, "echo snap > kept").rc == 0
    r = s("session", "stop", sid, "--snapshot", "base")
    assert r.rc == 0, r
    assert not os.path.exists(f"{sessions_root()}/s-{sid}")
    snap = f"{sessions_root()}/n-base/ws"
    before = tree_state(snap)
    fork = s.start("--from", "base")
    r = s.sh(fork, "cat kept; echo more >> kept; rm README")
    assert r.rc == 0 and r.out == "snap\n", r
    assert tree_state(snap) == before, "a session changed its snapshot"
    second = s.start("--from", "base")
    r = s.sh(second, "cat kept; cat README")
    assert r.out == "snap\nhello\n", r
    # diff of a fork: against the project as it was, snapshot's changes included.
    d = s("session", "diff", fork)
    assert "A kept" in d.out and "D README" in d.out, d
    for x in (fork, second):
        assert s("session", "stop", x).rc == 0
        assert not os.path.exists(f"{sessions_root()}/s-{x}")
    lst = s("session", "list", "--format", "json")
    import json

    data = json.loads(lst.out)
    assert [n["name"] for n in data["snapshots"]] == ["base"] and data["sessions"] == []
    assert s("session", "drop", "base").rc == 0
    assert not os.path.exists(snap)


def test_diff_and_apply_with_host_changes(s, project, tmp_path):
    fill(project)
    outside = tmp_path / "outside"
    outside.mkdir()
    sid = s.start()
    r = s.sh(sid, f"echo ws > README; echo ws > src/a.py; echo new > src/new.py; rm src/b.py; "
                  f"ln -s {outside}/x escape; ln -s ../README src/inside; mkfifo pipe")
    assert r.rc == 0, r
    time.sleep(0.05)
    with open(os.path.join(project, "src", "a.py"), "w") as f:
        f.write("host edit\n")
    d = s("session", "diff", sid, "--format", "json")
    import json

    changes = {c["path"]: (c["change"], c["host_changed"]) for c in json.loads(d.out)["changes"]}
    text = s("session", "diff", sid)
    assert "+ws" in text.out and "A escape" in text.out and str(outside) not in text.out, text
    assert changes["README"] == ("changed", False) and changes["src/a.py"] == ("changed", True), changes
    assert changes["src/b.py"][0] == "deleted" and changes["src/new.py"][0] == "added"
    r = s("session", "apply", sid)
    assert r.rc == 1, r
    assert "refused: src/a.py" in r.out and "refused: escape" in r.out and "refused: pipe" in r.out, r
    assert open(os.path.join(project, "README")).read() == "ws\n"
    assert open(os.path.join(project, "src", "a.py")).read() == "host edit\n"
    assert open(os.path.join(project, "src", "new.py")).read() == "new\n"
    assert not os.path.exists(os.path.join(project, "src", "b.py"))
    assert os.readlink(os.path.join(project, "src", "inside")) == "../README"
    assert not os.path.lexists(os.path.join(project, "escape")) and not os.path.exists(os.path.join(project, "pipe"))
    assert os.listdir(outside) == []
    # A second apply has nothing new to do but the refusals.
    r = s("session", "apply", sid, "README")
    assert r.rc == 0 and "nothing to apply" in r.out, r
    assert s("session", "stop", sid).rc == 0


def test_a_file_applied_once_applies_again_after_a_later_change(s, project):
    """After an apply, the host holds the workspace's version, and that is the new base:
    a later change of the same file (or link) applies too. It was refused as "changed on
    the host too" (the host's copy had a new mtime, the manifest the workspace's), though
    nobody had touched the host. The control: a real host edit after the first apply is
    still refused."""
    fill(project)
    sid = s.start()
    time.sleep(0.05)
    assert s.sh(sid, "echo v2 > README; echo one > src/g.py; ln -s ../README src/link").rc == 0
    r = s("session", "apply", sid)
    assert r.rc == 0 and "refused" not in r.out, r
    time.sleep(0.05)
    assert s.sh(sid, "echo v3 > README; echo two > src/g.py; ln -sfn g.py src/link").rc == 0
    d = s("session", "diff", sid)
    assert "changed on the host too" not in d.out, d
    r = s("session", "apply", sid)
    assert r.rc == 0 and "refused" not in r.out, r
    assert open(os.path.join(project, "README")).read() == "v3\n"
    assert open(os.path.join(project, "src", "g.py")).read() == "two\n"
    assert os.readlink(os.path.join(project, "src", "link")) == "g.py"
    # The control: the host's own edit since the last apply is seen.
    with open(os.path.join(project, "README"), "w") as f:
        f.write("host\n")
    assert s.sh(sid, "echo v4 > README").rc == 0
    r = s("session", "apply", sid)
    assert r.rc == 1 and "refused: README" in r.out, r
    assert open(os.path.join(project, "README")).read() == "host\n"
    assert s("session", "stop", sid).rc == 0


def test_a_name_that_starts_with_two_dots_is_inside(s, project):
    """`..foo` is a name in the project, not a path out of it: apply takes it when named
    (it was skipped, with "nothing to apply" and status 0); `..` itself names nothing."""
    fill(project)
    sid = s.start()
    assert s.sh(sid, "echo dots > ..foo").rc == 0
    r = s("session", "apply", sid, "..")
    assert "applied" not in r.out and not os.path.exists(os.path.join(project, "..foo")), r
    r = s("session", "apply", sid, "..foo")
    assert r.rc == 0 and "applied: ..foo (added)" in r.out, r
    assert open(os.path.join(project, "..foo")).read() == "dots\n"
    assert s("session", "stop", sid).rc == 0


def test_apply_never_writes_through_a_planted_host_link(s, project, tmp_path):
    fill(project)
    outside = tmp_path / "outside"
    outside.mkdir()
    sid = s.start()
    assert s.sh(sid, "echo ws > src/a.py; echo ws > src/z.py").rc == 0
    # After the start, the host's src becomes a link out of the project.
    os.rename(os.path.join(project, "src"), os.path.join(project, "src.old"))
    os.symlink(str(outside), os.path.join(project, "src"))
    r = s("session", "apply", sid)
    assert r.rc == 1 and "refused: src/z.py" in r.out, r
    assert os.listdir(outside) == []
    # Control: the same path written by an ordinary open lands outside.
    with open(os.path.join(project, "src", "z.py"), "w") as f:
        f.write("x")
    assert os.listdir(outside) == ["z.py"]
    assert s("session", "stop", sid).rc == 0


def test_a_link_planted_in_the_workspace_never_carries_a_rule_to_the_host(s, project):
    """A session's command replaces a workspace folder on the way to a deeper rule (here the
    mask's neighbour, which gets rules of its own) with a link to the host's copy. On
    Landlock the rules are paths opened in the command's process: a plain open followed the
    link, and the next command of the session could write the host project through it. Each
    rule below the workspace is now reached one folder at a time without following a link,
    and such a run is refused before the command (125, one line). On bwrap and runc the
    workspace is the mount source, so the link changes nothing there. The control: the first command
    made the link, and the host's file is the one it points to."""
    os.makedirs(os.path.join(project, "a", "b"))
    with open(os.path.join(project, "a", "secret"), "w") as f:
        f.write("secret\n")
    with open(os.path.join(project, "a", "b", "f"), "w") as f:
        f.write("original\n")
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\nfilesystem:\n  - mask {project}/a/secret\n")
    sid = s.start("--policy", os.path.join(project, "sandbox.policy.yaml"))
    r = s.sh(sid, f"mv a a.orig && ln -s {project}/a a && readlink a")
    if s.backend in MOUNTED:
        # The folders above a deeper rule are mount points in the sandbox: no rename.
        assert r.rc != 0 and "busy" in r.err, r
    else:
        assert r.rc == 0 and r.out.strip() == os.path.join(project, "a"), r  # the control
    r = s.sh(sid, "echo FROM-SESSION > a/b/f; echo done")
    if s.backend == "landlock":
        assert r.rc == 125 and "is a link now" in r.err and r.out == "", r
    else:
        assert "done" in r.out, r  # written in the workspace, where it belongs
    with open(os.path.join(project, "a", "b", "f")) as f:
        assert f.read() == "original\n", "the session wrote the host project through its link"
    assert s("session", "stop", sid).rc == 0


def test_a_link_in_the_workspace_never_chooses_a_bind_source(s, project, tmp_path):
    """bwrap and runc bind a rule inside the project from the workspace, and resolve the
    source on the host, following links. A command of the session leaves `out` as a relative link to
    a host folder the policy keeps read-only; once `write? {project}/out` applies (the
    person makes `out` in the host project), that folder would be bound writable at
    {project}/out. Such a run is refused (125, one line). On Landlock the rule is opened
    without following the link, and the write is refused. The control: the folder is
    read-only by its own path."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "v.txt").write_text("orig\n")
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
                f"filesystem:\n  - read {victim}\n  - write? {{project}}/out\n")
    sid = s.start("--policy", os.path.join(project, "sandbox.policy.yaml"))
    ws = f"{sessions_root()}/s-{sid}/ws"
    rel = os.path.relpath(str(victim), ws)
    r = s.sh(sid, f"echo x > {victim}/v.txt; ln -s {rel} out && echo linked")
    assert "linked" in r.out and f"cannot create {victim}/v.txt" in r.err, r  # the control
    os.mkdir(os.path.join(project, "out"))
    r = s.sh(sid, "echo FROM-SESSION > out/v.txt; echo rc=$?")
    if s.backend in MOUNTED:
        refusals = [ln for ln in r.err.splitlines() if not ln.startswith("sbxc: warning: ")]
        assert r.rc == 125 and r.out == "" and len(refusals) == 1, r
        assert "is a symlink, and the policy binds that path" in r.err, r
    else:
        # Landlock: the rule is opened without following the link; the write is refused.
        assert "rc=2" in r.out and "Permission denied" in r.err, r
    assert (victim / "v.txt").read_text() == "orig\n", "the session wrote a read-only host folder"
    assert s("session", "discard", sid).rc == 0 or s("session", "stop", sid).rc == 0


def test_apply_refuses_a_link_that_leaves_the_project_through_another_link(s, project):
    """`up -> ../../..` stays in the project, and `esc -> up/../../../../etc/passwd` reads as
    if it did too, but through `up` it is /etc/passwd. A link whose target passes through
    another link (in the workspace or on the host) is refused; links that stay inside by
    their text alone are applied. The controls: the plain inside link is applied and
    resolves in the project, the plain outside one is refused as before."""
    fill(project)
    sid = s.start()
    r = s.sh(sid, "mkdir -p a/b/c && ln -s ../../.. a/b/c/up && ln -s up/../../../../etc/passwd a/b/c/esc "
                  "&& ln -s ../../../README a/b/c/ok && ln -s /etc/passwd direct && echo made")
    assert r.rc == 0 and "made" in r.out, r
    r = s("session", "apply", sid)
    assert r.rc == 1, r
    assert "refused: a/b/c/esc" in r.out and "refused: direct" in r.out, r
    assert not os.path.lexists(os.path.join(project, "a", "b", "c", "esc"))
    assert os.path.realpath(os.path.join(project, "a", "b", "c", "ok")) == os.path.join(project, "README")
    assert os.path.realpath(os.path.join(project, "a", "b", "c", "up")) == project
    assert s("session", "stop", sid).rc == 0


def test_apply_refuses_a_link_that_a_later_apply_would_lead_out(s, project):
    """Across applies: `notes -> d1/d2/d3/e/../../../../etc/passwd` passes through no link
    when applied, and e is a folder; a later apply replaces e with `../../..` (inside by
    itself). Together they lead to /etc/passwd. A target with `..` after a name is refused
    (the kernel resolves it from what that name is when followed); the control: a plain
    `../..`-then-names target is applied."""
    fill(project)
    sid = s.start()
    r = s.sh(sid, "mkdir -p d1/d2/d3/e && ln -s d1/d2/d3/e/../../../../etc/passwd notes "
                  "&& ln -s ../../../run.sh d1/d2/d3/plain && echo made")
    assert r.rc == 0 and "made" in r.out, r
    r = s("session", "apply", sid)
    assert "refused: notes" in r.out and "applied: d1/d2/d3/plain (added)" in r.out, r
    assert os.path.realpath(os.path.join(project, "d1", "d2", "d3", "plain")) == os.path.join(project, "run.sh")
    r = s.sh(sid, "rmdir d1/d2/d3/e && ln -s ../../.. d1/d2/d3/e && echo swapped")
    assert "swapped" in r.out, r
    s("session", "apply", sid)
    assert not os.path.lexists(os.path.join(project, "notes"))
    assert s("session", "stop", sid).rc == 0


def test_diff_and_apply_show_names_the_command_chose_as_escapes(s, project):
    """File names are the session's command's choice: a newline or a terminal escape in
    one would forge lines of `session diff` and `session apply` (a fake "refused:" line
    for a file that was applied, lines erased on a terminal). They are shown escaped, one
    line per entry. The control: the names were made, and reach the host as they are."""
    fill(project)
    sid = s.start()
    fake = "x (added)\nrefused: run.sh (added): forged\ny"
    erase = "zz\x1b[1A\x1b[2K"
    r = s.sh(sid, 'echo new > run2.sh; touch "$(printf \'x (added)\\nrefused: run.sh (added): forged\\ny\')" '
                  '"$(printf \'zz\\033[1A\\033[2K\')"; ls | wc -l')
    assert r.rc == 0, r
    for args in (("session", "diff", sid), ("session", "apply", sid)):
        r = s(*args)
        assert "\x1b" not in r.out and not any(ln.startswith("refused: run.sh") for ln in r.out.splitlines()), r.out
        assert "x (added)\\x0arefused: run.sh (added): forged\\x0ay" in r.out, (args, r.out)
        assert "zz\\x1b[1A\\x1b[2K" in r.out, (args, r.out)
    lines = r.out.splitlines()
    assert len(lines) == 3 and all(ln.startswith("applied: ") for ln in lines), r.out
    assert os.path.exists(os.path.join(project, fake)) and os.path.exists(os.path.join(project, erase))  # the control
    assert s("session", "stop", sid).rc == 0


def test_diff_names_each_file_and_marks_a_missing_newline(s, project):
    """Each file's part opens with a line naming it, so a mode change alone is not read as
    part of the next file's diff; a last line without its newline is marked, so the next
    header does not run on from it."""
    fill(project)
    sid = s.start()
    # (As root on Landlock chmod is refused everywhere: no mode change to show there.)
    modes = not (s.backend == "landlock" and os.geteuid() == 0)
    assert s.sh(sid, ("chmod 755 README; " if modes else "") + "printf 'no end' > src/a.py").rc == 0
    d = s("session", "diff", sid)
    assert d.rc == 0, d
    out = d.out
    if modes:
        assert "diff a/README b/README\nold mode 0644\nnew mode 0755" in out, out
    assert "diff a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n" in out, out
    assert "+no end\n\\ No newline at end of file\n" in out, out
    assert s("session", "stop", sid).rc == 0


def test_diff_shows_control_characters_in_contents_as_escapes(s, project):
    """A file's contents are the command's too: an escape sequence in a changed line could
    move the cursor and erase the change list above it on the reviewer's terminal. They
    are shown escaped; tabs and the text around stay. The control: the file reaches the
    host byte for byte."""
    fill(project)
    sid = s.start()
    r = s.sh(sid, "printf 'safe\\tline\\033[3A\\033[2Kend\\n' > msg.txt && echo ok")
    assert r.rc == 0 and "ok" in r.out, r
    d = s("session", "diff", sid)
    assert "\x1b" not in d.out, d.out
    assert "+safe\tline\\x1b[3A\\x1b[2Kend\n" in d.out, d.out
    assert s("session", "apply", sid).rc == 0
    with open(os.path.join(project, "msg.txt"), "rb") as f:
        assert f.read() == b"safe\tline\x1b[3A\x1b[2Kend\n"
    assert s("session", "stop", sid).rc == 0


def test_modes_show_in_the_diff_and_reach_the_host_under_the_umask(s, project):
    """`chmod 666`/`777` in the workspace showed as a bare `M` and reached the host as
    they were: world-writable files in the project. The diff shows the mode change, and
    apply gives the mode under the caller's umask, as a copy without -p does. The control:
    the executable bit of a script is kept."""
    fill(project)
    os.chmod(os.path.join(project, "src", "a.py"), 0o644)
    os.chmod(os.path.join(project, "src"), 0o755)
    mask = os.umask(0o022)
    os.umask(mask)
    sid = s.start()
    # Changed in the workspace from outside: on Landlock as root the command itself may
    # not chmod (no ABI covers metadata, and root owns the files).
    ws = f"{sessions_root()}/s-{sid}/ws"
    os.chmod(f"{ws}/src/a.py", 0o666)
    os.chmod(f"{ws}/src", 0o777)
    os.chmod(f"{ws}/run.sh", 0o744)
    d = s("session", "diff", sid)
    assert "M src/a.py" in d.out and "old mode 0644\nnew mode 0666 (applied as " in d.out, d.out
    assert s("session", "apply", sid).rc == 0
    assert stat.S_IMODE(os.stat(os.path.join(project, "src", "a.py")).st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(os.stat(os.path.join(project, "src")).st_mode) == 0o777 & ~mask
    assert stat.S_IMODE(os.stat(os.path.join(project, "run.sh")).st_mode) == 0o744 & ~mask  # the control
    assert s("session", "stop", sid).rc == 0


def test_a_folder_the_session_made_unreadable_is_said_not_a_crash(s, project):
    """A session's command can make a folder of its workspace unreadable (chmod 000).
    `session diff` and `session apply` then say which folder they cannot read, in one
    line, instead of an internal error; nothing is applied. Root reads past the mode, so
    there both list the change. The control: the folder's mode is 000."""
    fill(project)
    sid = s.start()
    r = s.sh(sid, "mkdir -p locked/inner && echo y > locked/inner/g && (chmod 000 locked || true) && echo done")
    assert r.rc == 0 and "done" in r.out, r
    ws = os.path.join(sessions_root(), f"s-{sid}", "ws")
    if s.backend == "landlock" and os.geteuid() == 0:
        os.chmod(os.path.join(ws, "locked"), 0)  # Landlock as root refuses every chmod: made here
    assert stat.S_IMODE(os.lstat(os.path.join(ws, "locked")).st_mode) == 0  # the control
    for args in (("session", "diff", sid), ("session", "apply", sid)):
        r = s(*args)
        assert "internal error" not in r.err and "Traceback" not in r.err, r
        if os.geteuid() == 0:
            assert r.rc == 0 and "locked" in r.out, r
        else:
            assert r.rc == 1 and "cannot read the folder" in r.err and "/locked" in r.err, r
            assert not os.path.exists(os.path.join(project, "locked"))
    os.chmod(os.path.join(ws, "locked"), 0o700)
    assert s("session", "stop", sid).rc == 0


KILL_IN_COPY = r"""
import os, sys
from sbxc.runtime import session_apply
real_write = os.write
def write(fd, data):
    n = real_write(fd, data)
    if len(data) >= 1 << 20:
        os.kill(os.getpid(), 9)  # half-way through a file's copy into the project
    return n
session_apply.os.write = write
from sbxc.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_apply_killed_half_way_leaves_no_partial_file(s, project):
    """sbxc killed (SIGKILL) while it copies a file into the project: the copy was still
    unnamed, so nothing of it is in the project. The control: the kill came during the
    copy (the apply died with it), and a second apply applies the file whole."""
    fill(project)
    sid = s.start()
    assert s.sh(sid, "head -c 3000000 /dev/urandom > big").rc == 0
    p = subprocess.run([sys.executable, "-c", KILL_IN_COPY, "session", "apply", sid], env=base_env(s.home),
                       cwd=project, capture_output=True, timeout=60)
    assert p.returncode == -9, p  # the control
    assert not [n for n in os.listdir(project) if n.startswith(".sbxc-apply-")], os.listdir(project)
    assert not os.path.exists(os.path.join(project, "big"))
    r = s("session", "apply", sid)
    assert r.rc == 0 and os.path.getsize(os.path.join(project, "big")) == 3000000, r
    assert s("session", "stop", sid).rc == 0


def test_a_killed_ephemeral_run_leaves_no_session_that_takes_a_place(s, project):
    """`exec --ephemeral` makes a session for one run and removes it after. sbxc killed
    with SIGKILL cannot remove it: such a session is left locked by nobody, listed as
    interrupted, and the next start removes it instead of counting it against
    workspace.max_sessions. The control: while the run lived, `session list` showed it."""
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\nworkspace: {max_sessions: 1, pool: 0}\n")
    for _ in range(2):
        p = subprocess.Popen(sbxc_argv("exec", "--backend", s.backend, "--ephemeral", "--", "sleep", "30"),
                             env=base_env(s.home), cwd=project, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "an exec --ephemeral runs in it" not in s("session", "list").out:
            time.sleep(0.1)
        assert "an exec --ephemeral runs in it" in s("session", "list").out  # the control
        if s.backend == "oci":
            # sbxc alone (runc runs in a session of its own): its watcher ends the container.
            os.kill(p.pid, signal.SIGKILL)
        else:
            os.killpg(p.pid, signal.SIGKILL)  # sbxc and its sandbox: nothing can clean up
        p.wait()
        if s.backend == "oci":
            reap_the_killed_oci_run(os.environ["SBXC_ROOT"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "[interrupted" not in s("session", "list").out:
            time.sleep(0.1)
        assert "[interrupted" in s("session", "list").out
    sid = s.start()  # the one place is free: the leftovers went
    listing = s("session", "list").out
    assert "[interrupted" not in listing and sid in listing, listing
    assert s("exec", "--backend", s.backend, "--ephemeral", "--", "true").rc == 125  # the place is taken
    assert s("session", "stop", sid).rc == 0
    assert s("exec", "--backend", s.backend, "--ephemeral", "--", "true").rc == 0


def test_quotas(s, project):
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nworkspace: {max_sessions: 1, max_bytes: 200K, pool: 0}\n")
    sid = s.start()
    r = s("session", "start")
    assert r.rc == 1 and "workspace.max_sessions" in r.err and "sbxc: " in r.err, r
    r = s.sh(sid, "head -c 1000000 /dev/zero > big")
    assert r.rc == 0 and "more than workspace.max_bytes" in r.err and "checked after each command" in r.err, r
    r = s("session", "apply", sid)
    assert r.rc == 1 and "workspace.max_bytes" in r.err and not os.path.exists(os.path.join(project, "big")), r
    r = s("session", "stop", sid, "--snapshot", "toobig")
    assert r.rc == 1 and "workspace.max_bytes" in r.err, r
    assert s.sh(sid, "rm big").rc == 0
    # What the apply would write counts too: a sparse file and hard links hold few blocks
    # in the workspace (under the quota: the control) but would be written out whole.
    r = s.sh(sid, "truncate -s 100M sparse && head -c 50000 /dev/zero > f0 && for i in 1 2 3 4 5 6; do ln f0 f$i; done")
    assert r.rc == 0 and "workspace.max_bytes" not in r.err, r
    r = s("session", "apply", sid)
    assert r.rc == 1 and "applying would write" in r.err and "workspace.max_bytes" in r.err, r
    assert not os.path.exists(os.path.join(project, "sparse")) and not os.path.exists(os.path.join(project, "f0"))
    assert s("session", "stop", sid).rc == 0
    assert s.start()  # a place is free again


def test_interrupted_start_is_listed_and_cleaned(s, project):
    big = os.path.join(project, "big")
    os.mkdir(big)
    chunk = os.urandom(1 << 16)
    for i in range(3000):
        with open(os.path.join(big, f"f{i}"), "wb") as f:
            f.write(chunk)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nworkspace: {pool: 0}\n")
    p = subprocess.Popen(sbxc_argv("session", "start"), env=base_env(s.home), cwd=project,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = sessions_root()
    deadline = time.time() + 60
    ws = None
    while time.time() < deadline and ws is None:
        for name in os.listdir(root) if os.path.isdir(root) else ():
            if name.startswith("s-") and os.path.isdir(f"{root}/{name}/ws/big"):
                ws = f"{root}/{name}"
        time.sleep(0.005)
    assert ws is not None, "the copy never began"
    os.kill(p.pid, signal.SIGKILL)  # mid-copy
    p.wait()
    sid = os.path.basename(ws)[2:]
    assert len(os.listdir(f"{ws}/ws/big")) < 3000, "the copy had finished: nothing was interrupted"
    r = s("session", "list")
    assert sid in r.out and "interrupted" in r.out, r
    r = s.sh(sid, "true")
    assert r.rc == 125 and "did not finish starting" in r.err, r
    time.sleep(0.2)  # cp died with sbxc (parent-death signal): nothing is writing any more
    r = s("session", "stop", sid)
    assert r.rc == 0, r
    assert not os.path.exists(ws)
    assert "interrupted" not in s("session", "list").out


def test_two_commands_of_one_session_at_once(s, project):
    sid = s.start()
    first = subprocess.Popen(
        sbxc_argv("exec", "--backend", s.backend, "--session", sid, "--", "sh", "-c",
                  "echo up > first-up; i=0; while [ ! -e second-done ] && [ $i -lt 400 ]; do sleep 0.05; "
                  "i=$((i+1)); done; cat second-done"),
        env=base_env(s.home), cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = s.sh(sid, "i=0; while [ ! -e first-up ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                  "echo seen-by-second > second-done; cat first-up")
    out, err = first.communicate(timeout=60)
    assert r.rc == 0 and r.out == "up\n", r
    assert first.returncode == 0 and out == b"seen-by-second\n", (out, err)
    r = s("session", "stop", sid)
    assert r.rc == 0, r


def _running(s, project, sid, script):
    """A command of session ``sid`` started in the background, once it has written ``up``
    in the workspace (``script`` runs after that)."""
    p = subprocess.Popen(sbxc_argv("exec", "--backend", s.backend, "--session", sid, "--", "sh", "-c",
                                   "echo up > up; " + script),
                         env=base_env(s.home), cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not os.path.exists(f"{sessions_root()}/s-{sid}/ws/up") and time.time() < deadline:
        time.sleep(0.02)
    return p


def test_stop_refuses_while_a_command_runs(s, project):
    sid = s.start()
    p = _running(s, project, sid, "sleep 3")
    r = s("session", "stop", sid)
    assert r.rc == 1 and "in use" in r.err, r
    p.wait(timeout=30)
    assert s("session", "stop", sid).rc == 0


def test_apply_refuses_while_a_command_runs(s, project):
    """A command still running could change a file after the diff was read, or grow one
    past the quota while it is copied: apply waits for nothing and refuses instead, and
    applies once the command ended (the control)."""
    sid = s.start()
    p = _running(s, project, sid, "echo safe > a.txt; sleep 3; echo evil > a.txt")
    r = s("session", "apply", sid)
    assert r.rc == 1 and "in use" in r.err and "nothing was applied" in r.err, r
    assert not os.path.exists(os.path.join(project, "a.txt"))
    p.wait(timeout=30)
    r = s("session", "apply", sid)
    assert r.rc == 0 and "applied: a.txt (added)" in r.out, r
    with open(os.path.join(project, "a.txt")) as f:
        assert f.read() == "evil\n"  # what the diff would show now
    assert s("session", "stop", sid).rc == 0


def test_stage_and_ephemeral(s, project, home):
    cfg = os.path.join(home, ".config", "tool")
    sid = s.start("--stage", f"{cfg}:.agent/tool")
    r = s.sh(sid, "cat .agent/tool/settings")
    assert r.rc == 0 and r.out == "visible\n", r
    assert not os.path.exists(os.path.join(project, ".agent"))
    d = s("session", "diff", sid)
    assert ".agent" not in d.out, d
    assert "nothing to apply" in s("session", "apply", sid).out
    assert s("session", "stop", sid).rc == 0
    before = tree_state(project)
    r = s("exec", "--backend", s.backend, "--ephemeral", "--", "sh", "-c", "echo gone > README; cat README; exit 3")
    assert r.rc == 3 and r.out == "gone\n", r
    assert tree_state(project) == before
    assert not [n for n in os.listdir(sessions_root()) if n.startswith("s-")]


def test_staged_files_stay_staged_in_a_fork_of_a_snapshot(s, project, home):
    """A snapshot's session staged credentials; a session started from the snapshot had
    them in its diff and applied them into the project. They stay staged. The control: a
    file the fork's command makes is in the diff and applied."""
    cfg = os.path.join(home, ".config", "tool")
    sid = s.start("--stage", f"{cfg}:.agent/tool")
    assert s("session", "stop", sid, "--snapshot", "snapA").rc == 0
    fork = s.start("--from", "snapA")
    r = s.sh(fork, "cat .agent/tool/settings && echo made > new.txt")
    assert r.rc == 0 and r.out == "visible\n", r
    d = s("session", "diff", fork)
    assert ".agent" not in d.out and "new.txt" in d.out, d
    r = s("session", "apply", fork)
    assert "applied: new.txt (added)" in r.out and ".agent" not in r.out, r
    assert not os.path.exists(os.path.join(project, ".agent"))
    assert s("session", "stop", fork).rc == 0
    assert s("session", "drop", "snapA").rc == 0


def test_warm_pool_is_used_only_while_the_project_is_unchanged(s, project):
    first = s("session", "start", "--format", "json")
    import json

    assert json.loads(first.out)["method"] in ("copy", "reflink")
    root = sessions_root()

    def pool_ready():
        deadline = time.time() + 30
        while time.time() < deadline:
            if any(n.startswith("e-") and os.path.isdir(f"{root}/pool/{d}/{n}/ws")
                   for d in os.listdir(f"{root}/pool") for n in os.listdir(f"{root}/pool/{d}")):
                return True
            time.sleep(0.05)
        return False

    assert pool_ready()
    pool = json.loads(s("session", "list", "--format", "json").out)["pool"]
    assert [(p["ready"], p["size"], p["source"]) for p in pool] == [(1, 1, project)], pool
    got = json.loads(s("session", "start", "--format", "json").out)
    assert got["method"] == "pool", got
    assert s.sh(got["id"], "cat README").out == "hello\n"
    assert pool_ready()
    with open(os.path.join(project, "README"), "w") as f:
        f.write("edited after the copy\n")
    got = json.loads(s("session", "start", "--format", "json").out)
    assert got["method"] != "pool", got
    assert s.sh(got["id"], "cat README").out == "edited after the copy\n"


def test_python_api_drives_a_session(project, home, bwrap_works, monkeypatch):
    import sbxc

    monkeypatch.setenv("HOME", home)
    # A package named sbxc in the project (a command could have put it there) is never run
    # by the API, which starts its commands with the project as their current folder.
    os.makedirs(os.path.join(project, "sbxc"))
    with open(os.path.join(project, "sbxc", "__main__.py"), "w") as f:
        f.write("open(__file__ + '.ran', 'w').close()\n")
    with open(os.path.join(project, "sbxc", "__init__.py"), "w") as f:
        f.write("open(__file__ + '.ran', 'w').close()\n")
    with sbxc.Session.start(project) as sess:
        r = sess.run(["sh", "-c", "echo api > README; cat README"])
        assert r.status == 0 and r.stdout == b"api\n", r
        r = sess.run([SANDBOX_PYTHON, "-c", "import sys; print(sys.stdin.read().upper())"], input=b"in")
        assert r.status == 0 and r.stdout == b"IN\n", r
        r = sess.run(["sleep", "30"], timeout=1)
        assert r.timed_out and r.status is None
        assert [(c["path"], c["change"]) for c in sess.diff()] == [("README", "changed")], sess.diff()
        assert open(os.path.join(project, "README")).read() == "hello\n"
        got = sess.apply(["README"])
        assert [a["path"] for a in got["applied"]] == ["README"] and got["refused"] == []
        assert open(os.path.join(project, "README")).read() == "api\n"
        # Paths the command named like options are paths (they were taken for -h, and
        # the API raised "sbxc gave no answer").
        assert sess.run(["sh", "-c", "echo h > ./-h"]).status == 0
        got = sess.apply(["-h"])
        assert [a["path"] for a in got["applied"]] == ["-h"], got
        assert open(os.path.join(project, "-h")).read() == "h\n"
        sess.stop(snapshot="api-snap")
    with sbxc.Session.start(project, from_snapshot="api-snap") as fork:
        assert fork.run(["cat", "README"]).stdout == b"api\n"
    assert not [n for n in os.listdir(sessions_root()) if n.startswith("s-")]
    with pytest.raises(sbxc.SessionError):
        sbxc.Session.start(project, from_snapshot="no-such")
    r = run(sbxc_argv("session", "drop", "api-snap"), env=base_env(home), cwd=home)
    assert r.rc == 0, r
    planted = os.path.join(project, "sbxc")
    assert not [n for n in os.listdir(planted) if n.endswith(".ran")]
    # Control: `python -m sbxc` from the project's folder does run the planted package.
    subprocess.run([sys.executable, "-m", "sbxc", "--version"], cwd=project, env=base_env(home),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert [n for n in os.listdir(planted) if n.endswith(".ran")]
