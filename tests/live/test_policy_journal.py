"""The run journal: a policy file that a sandboxed command could have created or changed
never takes effect unreviewed, wherever it lies, and a run whose post-run checks did not
complete (sbxc killed, its limits lowered by the command) leaves its window open.

Each attack below is first carried out as an attacker would (a real sandboxed command),
then the next run is checked: refused with 125 and one line naming the file and the
accepting command. Without the journal, each next run used the planted policy."""
import os
import signal
import subprocess
import time

import pytest

from conftest import SANDBOX_PYTHON, base_env, reap_the_killed_oci_run, run, sbxc_argv, without_plan_warnings

pytestmark = pytest.mark.live

BACKENDS = ["bwrap", "landlock", "oci"]


@pytest.fixture(autouse=True)
def own_journal(session_root):
    """A root, and so a journal, of each test's own (conftest.session_root). The suite's
    shared root holds every other test's windows too: past MAX_WINDOWS the journal merges
    the neighbours with the shortest gap (journal.bound), and a merge of two of this test's
    runs covers the moment between them where it writes a file on purpose, which was then
    (rightly, for a merged window) refused: the test failed now and then on CI."""
    return session_root
STRICT = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
LOOSE = "sbxc: 1\nextends: [builtin:default]\nnetwork: true\n"


def _exec(home, cwd, *cmd, args=()):
    return run(sbxc_argv("exec", *args, "--", *cmd), env=base_env(home), cwd=cwd)


def _accept(home, cwd, *paths):
    return run(sbxc_argv("compile", "--check", *paths), env=base_env(home), cwd=cwd)


def _refused(r, path, how=""):
    """125 and one line: the file, and the command that accepts it."""
    assert r.rc == 125, r
    lines = [ln for ln in r.err.strip().split("\n") if ln]
    assert len(lines) == 1, r
    line = lines[0]
    assert line.startswith(f"sbxc: the policy {path}") and " may have been written by the sandboxed command" in line, r
    assert line.endswith(f"; review it, then accept it with 'sbxc compile --check {path}'"), r
    assert how in line, r


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def loose_copy(home):
    """A loosened policy the attacker copies into place (cp makes a new file: no quoting
    through nested shells)."""
    p = os.path.join(home, "loose.yaml")
    _write(p, LOOSE)
    return p


# ------------------------------------------------------------------ class A: supervision

@pytest.mark.parametrize("backend", BACKENDS)
def test_sbxc_killed_after_the_command_started_leaves_the_run_open(sbxc, loose_copy, backend):
    """The command loosens the policy; sbxc is then killed (SIGKILL: no post-run check
    runs). The next run must refuse the file: the run's record was never cleared."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    _write(ppath, STRICT)
    ready = os.path.join(project, "ready")
    p = subprocess.Popen(sbxc_argv("exec", "--backend", backend, "--", "sh", "-c",
                                   f"cp {loose_copy} {ppath}; "
                                   f"touch {ready}; sleep 30"),
                         env=base_env(home), cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        assert os.path.exists(ready), "the command did not start"
        assert "network: true" in open(ppath).read()
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    marker = os.path.join(project, "marker")
    r = _exec(home, project, "touch", marker, args=("--backend", backend))
    _refused(r, ppath, f"(sbxc pid {p.pid}) and ended without completing its post-run checks")
    assert not os.path.exists(marker)
    r = _accept(home, project, ppath)
    assert r.rc == 0 and f"sbxc: accepted {ppath}" in r.out and f"sbxc pid {p.pid}" in r.out, r
    r = _exec(home, project, "touch", marker, args=("--backend", backend))
    assert r.rc == 0 and os.path.exists(marker), r
    if backend == "oci":
        reap_the_killed_oci_run(base_env(home)["SBXC_ROOT"])


LOWER_LIMITS = r"""
import os, resource, sys
def parent_of(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
# /proc is the host's (Landlock has no mount namespace), so these are host pids even where
# the command has a PID namespace of its own (root): the reaper (and, for root, the
# namespace's init below it) and sbxc are the ancestors running sbxc's own command line.
me = int(os.readlink("/proc/self"))
targets, pid = [], parent_of(me)
while pid > 1 and len(targets) < 3:
    if b"exec" in open(f"/proc/{pid}/cmdline", "rb").read():
        targets.append(pid)
    pid = parent_of(pid)
try:
    for pid in targets:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))
except OSError as e:
    print("prlimit refused:", e)
os.makedirs("sub", exist_ok=True)
open("sub/sandbox.policy.yaml", "w").write(sys.argv[1])
"""


def test_command_lowering_sbxc_limits_cannot_loosen_the_next_run(sbxc):
    """On Landlock sbxc and the command's reaper are processes the command can see. One
    that lowers their open-file limit makes every check after the run fail; the next run
    (a fresh sbxc) must still refuse what it planted, and this run must say truthfully
    that the command ran, keeping its status. (Where a seccomp rule refuses prlimit on
    other processes the attack stops earlier; the refusal is then all there is to see.)"""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), STRICT)
    script = os.path.join(project, "lower.py")
    _write(script, LOWER_LIMITS)
    r = _exec(home, project, SANDBOX_PYTHON, script, LOOSE, args=("--backend", "landlock"))
    assert "before the command started" not in r.err, r
    planted = os.path.join(project, "sub", "sandbox.policy.yaml")
    assert os.path.exists(planted), r
    if "prlimit refused" not in r.out:
        assert r.rc == 0, r  # the command's own status
        assert "sbxc: warning: the command ran (exit status 0)" in r.err, r
    _refused(_exec(home, os.path.join(project, "sub"), "true"), planted)


HARNESS = r"""
import sys
from sbxc.runtime import planstore
def fails(_watch):
    raise MemoryError("out of memory")
planstore.note_policy_changes = fails  # the post-run check fails as it would under a lowered RLIMIT_AS
from sbxc.commands.exec import exec_main
sys.exit(exec_main(sys.argv[1:]))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_post_run_check_is_reported_as_after_the_run(sbxc, backend):
    """An error after the command started: the line says the command ran (and its status),
    never "before the command started"; the status is the command's, not 125; and the
    run's record stays, so the next run refuses what the command planted."""
    import sys

    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), STRICT)
    os.mkdir(os.path.join(project, "sub"))
    planted = os.path.join(project, "sub", "sandbox.policy.yaml")
    r = run([sys.executable, "-c", HARNESS, "--backend", backend, "--", "sh", "-c",
             f"printf 'sbxc: 1\\nnetwork: true\\n' > {planted}; exit 3"], env=base_env(home), cwd=project)
    assert r.rc == 3, r
    assert "before the command started" not in r.err, r
    assert "sbxc: warning: the command ran (exit status 3), but sbxc could not complete its checks after it " \
           "(checking the policy files: MemoryError: out of memory)" in r.err, r
    _refused(_exec(home, os.path.join(project, "sub"), "true"), planted, "ended without completing its post-run checks")


# ------------------------------------------------------------------ class B: planted where the caller runs next

@pytest.mark.parametrize("backend", BACKENDS)
def test_renamed_current_folder_under_a_planted_policy(sbxc, loose_copy, backend):
    """From one shell in proj/src: the command makes proj/evil/ with a loosened policy and
    moves proj/src (the shell's current folder) into it. The shell's next `sbxc exec`
    finds proj/evil/sandbox.policy.yaml first; no watched path changed."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), STRICT)
    sbxc_cmd = " ".join(sbxc_argv())
    marker = os.path.join(project, "marker")
    attack = f"mkdir {project}/evil && cp {loose_copy} {project}/evil/sandbox.policy.yaml && mv {project}/src {project}/evil/src"
    shell = (f"cd {project}/src && {sbxc_cmd} exec --backend {backend} -- sh -c '{attack}' && "
             f"{sbxc_cmd} exec --backend {backend} -- touch {marker}; echo second=$? pwd=$(pwd -P)")
    r = run(["sh", "-c", shell], env=base_env(home), cwd=project)
    planted = os.path.join(project, "evil", "sandbox.policy.yaml")
    assert os.path.exists(planted) and f"pwd={project}/evil/src" in r.out, r
    assert "second=125" in r.out and not os.path.exists(marker), r
    last = r.err.strip().split("\n")[-1]
    assert last.startswith(f"sbxc: the policy {planted} may have been written by the sandboxed command of a run "), r


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_planted_in_a_subfolder_the_caller_later_enters(sbxc, loose_copy, backend):
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    _write(ppath, STRICT)
    r = _exec(home, project, "sh", "-c", f"mkdir -p deep/er && cp {loose_copy} deep/er/sandbox.policy.yaml",
              args=("--backend", backend))
    assert r.rc == 0 and "warning" not in without_plan_warnings(r.err), r  # nothing the old watch could see
    sub = os.path.join(project, "deep", "er")
    planted = os.path.join(sub, "sandbox.policy.yaml")
    marker = os.path.join(sub, "marker")  # inside the planted policy's project
    _refused(_exec(home, sub, "touch", marker, args=("--backend", backend)), planted, "and could write there")
    assert not os.path.exists(marker)
    # The runs from the project (its own policy untouched) go on.
    assert _exec(home, project, "true", args=("--backend", backend)).rc == 0
    # Accepted: it works; changed again by a sandboxed command: refused again.
    r = _accept(home, sub, planted)
    assert r.rc == 0 and f"sbxc: accepted {planted}" in r.out, r
    r = _exec(home, sub, "touch", marker, args=("--backend", backend))
    assert r.rc == 0 and os.path.exists(marker), r
    r = _exec(home, sub, "sh", "-c", "echo '# again' >> sandbox.policy.yaml", args=("--backend", backend))
    assert r.rc == 0, r
    assert _exec(home, sub, "true", args=("--backend", backend)).rc == 125


def test_planted_symlink_to_an_old_policy_is_refused(sbxc, home):
    """The file a planted link leads to is old and the person's; the link is new."""
    project = sbxc.project
    _write(os.path.join(project, "sandbox.policy.yaml"), STRICT)
    old = os.path.join(home, "anything-goes.yaml")
    _write(old, LOOSE)
    r = _exec(home, project, "sh", "-c", f"mkdir other && ln -s {old} other/sandbox.policy.yaml")
    assert r.rc == 0, r
    link = os.path.join(project, "other", "sandbox.policy.yaml")
    _refused(_exec(home, os.path.join(project, "other"), "true"), link, f"(through {link})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_reached_through_extends_is_refused(sbxc, loose_copy, backend):
    """proj/team's policy extends proj/shared/base.yaml: neither is a source or a
    discovery candidate of a run from proj, whose command rewrites base.yaml."""
    project, home = sbxc.project, sbxc.home
    _write(os.path.join(project, "sandbox.policy.yaml"), STRICT)
    os.mkdir(os.path.join(project, "shared"))
    os.mkdir(os.path.join(project, "team"))
    base = os.path.join(project, "shared", "base.yaml")
    _write(base, STRICT)
    _write(os.path.join(project, "team", "sandbox.policy.yaml"), "sbxc: 1\nextends: [../shared/base.yaml]\n")
    team = os.path.join(project, "team")
    assert _exec(home, team, "true", args=("--backend", backend)).rc == 0  # the person's files: fine
    r = _exec(home, project, "cp", loose_copy, base, args=("--backend", backend))
    assert r.rc == 0 and "warning" not in without_plan_warnings(r.err), r
    _refused(_exec(home, team, "true", args=("--backend", backend)), base)


def test_a_policy_the_person_writes_works_with_no_extra_step(sbxc):
    """Written outside any run, right before a run and right after one ended (in the
    folder that run could write): used as it is, every time."""
    project, home = sbxc.project, sbxc.home
    ppath = os.path.join(project, "sandbox.policy.yaml")
    for i in range(8):
        _write(ppath, STRICT + f"# edit {i}\n")
        r = _exec(home, project, "sh", "-c", "echo ran > out.txt")  # the run writes the project
        assert r.rc == 0 and "warning" not in r.err, (i, r)
    # a script: write, run, write again at once, run
    r = run(["sh", "-c", f"printf '{STRICT}' > {ppath} && {' '.join(sbxc_argv('exec', '--', 'true'))} && "
             f"printf '{STRICT}# again\\n' > {ppath} && {' '.join(sbxc_argv('exec', '--', 'true'))}"],
            env=base_env(home), cwd=project)
    assert r.rc == 0 and r.err == "", r
    # A file no run watched (another folder's extends target), rewritten the moment a run
    # that could write it has ended: its ctime is above that run's window, however coarse
    # the clock (the window ends at a ctime the kernel handed out after the sandbox).
    team = os.path.join(project, "team")
    os.mkdir(team)
    base = os.path.join(project, "base.yaml")
    _write(os.path.join(team, "sandbox.policy.yaml"), "sbxc: 1\nextends: [../base.yaml]\n")
    for i in range(12):
        assert _exec(home, project, "true").rc == 0
        _write(base, STRICT + f"# base {i}\n")
        r = _exec(home, team, "true")
        assert r.rc == 0 and r.err == "", f"round {i}: rc {r.rc}, stderr: {r.err}"  # whole, never cut short


# ------------------------------------------------------------------ the kernel facts the journal rests on

@pytest.mark.parametrize("where", ["tmp_path", "/dev/shm"])
def test_rename_and_link_update_the_ctime(tmp_path, where):
    """A planted file cannot keep an old ctime by being moved or linked into place."""
    base = str(tmp_path) if where == "tmp_path" else "/dev/shm"
    if not os.path.isdir(base):
        pytest.skip(f"{base} is missing")
    d = os.path.join(base, f"sbxc-ctime-{os.getpid()}")
    os.mkdir(d)
    try:
        a = os.path.join(d, "a")
        _write(a, "x")
        before = os.stat(a).st_ctime_ns
        time.sleep(0.02)
        os.rename(a, os.path.join(d, "b"))
        after_rename = os.stat(os.path.join(d, "b")).st_ctime_ns
        time.sleep(0.02)
        os.link(os.path.join(d, "b"), os.path.join(d, "c"))
        after_link = os.stat(os.path.join(d, "c")).st_ctime_ns
        assert before < after_rename < after_link
        os.mkdir(os.path.join(d, "sub"))
        dbefore = os.stat(os.path.join(d, "sub")).st_ctime_ns
        time.sleep(0.02)
        os.rename(os.path.join(d, "sub"), os.path.join(d, "sub2"))
        assert os.stat(os.path.join(d, "sub2")).st_ctime_ns > dbefore
    finally:
        import shutil

        shutil.rmtree(d)


def test_bounded_journal_only_widens():
    """Merging keeps every (time, place) a window covered covered, and stays bounded."""
    import random

    from sbxc.runtime import journal, journal_check

    rnd = random.Random(7)
    windows = []
    t = 1_000_000
    for i in range(400):
        s = t + rnd.randrange(1, 5000)
        e = s + rnd.randrange(1, 3000)
        t = e
        windows.append([s, e, [f"/p/{rnd.randrange(90)}/x", f"/c/{i}"]])
    probes = [(rnd.choice(w[2]) + "/f", rnd.randrange(w[0], w[1])) for w in windows for _ in range(3)]
    merged = journal.bound(windows)
    assert len(merged) <= journal.MAX_WINDOWS
    ws = [journal_check.Window(w[0], w[1], tuple(w[2])) for w in merged]
    for place, ctime in probes:
        assert journal_check._covering(ws, place, ctime) is not None, (place, ctime)


def test_windows_file_appends_and_fails_closed_when_damaged(tmp_path):
    """Appended windows read back; a torn last append is ignored (its run's record still
    stands); anything else that does not parse makes every place suspect."""
    import marshal

    from sbxc.runtime import journal, journal_check

    d = tmp_path / "plans"
    d.mkdir(mode=0o700)
    fd = os.open(str(d), os.O_RDONLY | os.O_DIRECTORY)
    try:
        journal.append_windows(fd, [[1, 2, ["/a"], []]])
        journal.append_windows(fd, [[3, 4, ["/b"], []]])
        assert journal.load_windows(fd) == [[1, 2, ["/a"], []], [3, 4, ["/b"], []]]
        log = d / journal.WINDOWS_NAME
        body = marshal.dumps({"v": journal.JOURNAL_VERSION, "w": [[5, 6, ["/c"], []]]})
        with open(log, "ab") as f:
            f.write(len(body).to_bytes(4, "little") + body[:3])  # torn
        assert journal.load_windows(fd) == [[1, 2, ["/a"], []], [3, 4, ["/b"], []]]
        log.write_bytes(marshal.dumps({"v": 1, "w": []}))  # not the append format
        assert journal.load_windows(fd) == [[0, journal._NEVER, ["/"]]]
    finally:
        os.close(fd)
