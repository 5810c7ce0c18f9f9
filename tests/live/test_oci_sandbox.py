"""The OCI backend under the real runc: what a command inside can and cannot do.

The same checks as the bwrap backend's live tests, through ``sbxc exec --backend oci``
(root and, rootless, an unprivileged user): the shared case list against the decision
model, writes outside the project, masked files, the network, capabilities, the
deny-listed calls (which also shows that runc and its libseccomp accept the profile), the
per-project cache, and the refusals before the command starts. Each check has its
control: the same probe outside the sandbox sees what the sandbox hides.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from conftest import SANDBOX_PYTHON, base_env, pty_run, pty_run_interactive, run, sbxc_argv  # noqa: E402
from sbxc.compiler.decide import decide  # noqa: E402

pytestmark = pytest.mark.live

OCI = ("--backend", "oci")


@pytest.mark.parametrize("variant", ["a", "b"])
def test_shared_cases_agree_with_decide(runc, variant, tmp_path):
    root = str(tmp_path / "tree")
    os.makedirs(root)
    os.chmod(tmp_path, 0o755)
    cases.build_tree(root)
    plan = cases.make_plan(cases.shared_rules(root, variant), project=f"{root}/proj")
    pf = cases.planfile_for(plan, "oci")
    res = cases.run_planfile(pf, ["/bin/sh", "-c", cases.probe_script(root)], cwd=f"{root}/proj", tmp=str(tmp_path))
    got = cases.parse_probe(res.out)
    assert len(got) == len(cases.CASES), (res.rc, res.err)
    problems = []
    for name, rel, op in cases.CASES:
        path = cases.case_path(root, rel)
        d = decide(plan, path)
        want = d.allows(op)
        if got[name] == want:
            continue
        if got[name]:
            problems.append(f"oci grants more than the policy: {name} ({op} {path}), decide says {d.access}")
            continue
        rule_path = d.rule.path if d.rule else ""
        admitted = [v for v in pf["report"] if rule_path and v[0].endswith(" " + rule_path)
                    and v[1] in ("narrowed", "partial")]
        if not admitted:
            problems.append(f"oci denies {name} ({op} {path}) that decide allows, and its report does not say so")
    assert not problems, "\n".join(problems)
    # The control: unsandboxed, the same script writes outside the project and reads the key.
    out = subprocess.run(["/bin/sh", "-c", cases.probe_script(root)], capture_output=True, text=True, cwd=root).stdout
    free = cases.parse_probe(out)
    assert free["read masked ssh key"] and free["create outside"]
    assert not got["read masked ssh key"] and not got["create outside"]


def test_outside_writes_and_masks(runc, sbxc, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)
    script = (f"touch {outside}/x 2>/dev/null && echo OUTSIDE-WRITTEN; "
              "touch src/made && echo PROJECT-OK; "
              "cat ~/.ssh/id_rsa 2>/dev/null; cat ~/.aws/credentials 2>/dev/null; "
              "echo x 2>/dev/null > ~/.netrc && echo NETRC-WRITTEN; "
              "cat ~/.config/tool/settings")
    r = sbxc("sbxc: 1\nextends: [builtin:default]\n", "/bin/sh", "-c", script, args=OCI)
    assert r.rc == 0, r
    assert "PROJECT-OK" in r.out and "visible" in r.out, r
    assert "OUTSIDE-WRITTEN" not in r.out and not (outside / "x").exists(), r
    assert "PRIVATE KEY" not in r.out and "SECRET" not in r.out and "NETRC-WRITTEN" not in r.out, r
    assert os.path.exists(os.path.join(sbxc.project, "src", "made"))
    # Control: the same shell outside the sandbox reads the key and writes outside.
    free = run(["/bin/sh", "-c", script], env=base_env(sbxc.home), cwd=sbxc.project)
    assert "PRIVATE KEY" in free.out and "OUTSIDE-WRITTEN" in free.out, free


def test_capabilities_empty_and_no_new_privileges(runc, sbxc):
    probe = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"
    r = sbxc(None, "/bin/sh", "-c", probe, args=OCI)
    assert r.rc == 0, r
    fields = dict(line.split(":\t", 1) for line in r.out.strip().splitlines())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[cap].strip() == "0000000000000000", r
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2", r
    # Control: outside, the bounding set is never empty (and root holds every capability).
    free = subprocess.run(["/bin/sh", "-c", probe], capture_output=True, text=True).stdout
    assert "CapBnd:\t0000000000000000" not in free
    if os.geteuid() == 0:
        assert "CapEff:\t0000000000000000" not in free


def test_network_off_loopback_inside_works(runc, sbxc, tcp_server):
    connect = (f"import socket; s=socket.create_connection(('127.0.0.1', {tcp_server.port}), timeout=3); "
               "print(s.recv(16).decode())")
    off = sbxc("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n", SANDBOX_PYTHON, "-c", connect, args=OCI)
    assert off.rc != 0 and "pong" not in off.out, off
    # Loopback of the sandbox's own namespace works: a server and a client in one command.
    local = ("import socket; a=socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(1); "
             "b=socket.create_connection(a.getsockname()); c,_=a.accept(); c.send(b'here'); print(b.recv(4).decode())")
    lo = sbxc("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n", SANDBOX_PYTHON, "-c", local, args=OCI)
    assert lo.rc == 0 and "here" in lo.out, lo
    # Control: with the network on, the same connection reaches the host's server.
    on = sbxc("sbxc: 1\nextends: [builtin:default]\nnetwork: true\n", SANDBOX_PYTHON, "-c", connect, args=OCI)
    assert on.rc == 0 and "pong" in on.out, on


def test_port_rules_mean_no_network(runc, sbxc, tcp_server):
    connect = f"import socket; socket.create_connection(('127.0.0.1', {tcp_server.port}), timeout=3); print('REACHED')"
    policy = f"sbxc: 1\nextends: [builtin:default]\nnetwork: [connect tcp {tcp_server.port}]\n"
    r = sbxc(policy, SANDBOX_PYTHON, "-c", connect, args=OCI)
    assert r.rc != 0 and "REACHED" not in r.out, r


def test_host_rules_leave_no_direct_route(runc, sbxc, tcp_server):
    """A host rule goes through sbxc's proxy, never around it: a direct connection to the
    address the rule names is refused (the control above shows this connection succeeds
    with the network on; test_oci_host_rules.py reaches the same kind of server through the
    proxy)."""
    connect = f"import socket; socket.create_connection(('127.0.0.1', {tcp_server.port}), timeout=3); print('REACHED')"
    policy = "sbxc: 1\nextends: [builtin:default]\nnetwork: [allow 127.0.0.1:%d]\n" % tcp_server.port
    r = sbxc(policy, SANDBOX_PYTHON, "-c", connect, args=OCI)
    assert r.rc != 0 and "REACHED" not in r.out, r


def test_deny_listed_calls_get_eperm_through_runc(runc, sbxc):
    """runc loads the profile (runc and its libseccomp accept the JSON) and the calls of the
    deny list answer EPERM inside, where the same probe outside gets other answers."""
    from test_seccomp_live import EPERM, NOT_EPERM_UNPRIVILEGED, PROBE

    # Calls through another ABI end the process (SIGSYS): checked on their own below.
    probe = "\n".join(line for line in PROBE.splitlines() if "x32 getpid" not in line
                      and "i386" not in line and not line.startswith(("code = ", "m = ", "m.write", "fn = ", "r = fn")))
    assert "x32" not in probe and "int 0x80" not in probe
    with open(os.path.join(sbxc.project, "probe.py"), "w") as f:
        f.write(probe)
    r = sbxc(None, SANDBOX_PYTHON, "probe.py", "", args=OCI)
    assert r.rc == 0, r
    inside = json.loads(r.out.strip().splitlines()[-1])
    free = subprocess.run([SANDBOX_PYTHON, os.path.join(sbxc.project, "probe.py"), ""], capture_output=True,
                          text=True, timeout=60)
    outside = json.loads(free.stdout)
    for name, val in inside.items():
        if name.startswith("control"):
            assert val == 0, f"{name}: {val} inside"
            continue
        assert val == -EPERM, f"{name}: {val} inside the OCI sandbox"
        if os.geteuid() == 0 or name in NOT_EPERM_UNPRIVILEGED:
            assert outside[name] != -EPERM, f"{name}: EPERM outside too, so this probe proves nothing"


def test_other_abi_calls_are_refused(runc, sbxc):
    """An x32 call (the x86_64 entry with bit 30 set) is outside the profile's architecture
    list: the process dies of SIGSYS inside (the report says so), the same call outside
    returns normally."""
    if os.uname().machine != "x86_64":
        pytest.skip("x32 exists on x86_64 only")
    code = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long; "
            "libc.syscall(ctypes.c_long(0x40000000 | 39)); print('RETURNED')")
    r = sbxc(None, SANDBOX_PYTHON, "-c", code, args=OCI)
    assert r.rc == 128 + 31 and "RETURNED" not in r.out, r
    free = subprocess.run([SANDBOX_PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert "RETURNED" in free.stdout, free


def test_cache_works_and_is_per_project(runc, sbxc, tmp_path):
    put = "mkdir -p \"$PIP_CACHE_DIR\" && echo kept > \"$PIP_CACHE_DIR/mark\" && echo \"$PIP_CACHE_DIR\""
    r = sbxc(None, "/bin/sh", "-c", put, args=OCI)
    assert r.rc == 0, r
    where = r.out.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(where, "mark")), r
    again = sbxc(None, "/bin/sh", "-c", "cat \"$PIP_CACHE_DIR/mark\"", args=OCI)
    assert again.rc == 0 and "kept" in again.out, again
    # Another project has its own cache and cannot see this one.
    other = tmp_path / "other"
    other.mkdir()
    os.chmod(tmp_path, 0o755)
    look = f"echo \"$PIP_CACHE_DIR\"; cat {where}/mark 2>/dev/null && echo SEEN; true"
    o = run(sbxc_argv("exec", "--backend", "oci", "--", "/bin/sh", "-c", look), env=base_env(sbxc.home), cwd=str(other))
    try:
        assert o.rc == 0, o
        assert where not in o.out.splitlines()[0] and "SEEN" not in o.out, o
    finally:
        from conftest import remove_project_cache

        remove_project_cache(str(other.resolve()))


def test_status_passes_through(runc, sbxc):
    assert sbxc(None, "/bin/sh", "-c", "exit 7", args=OCI).rc == 7
    r = sbxc(None, "/bin/sh", "-c", "echo out; echo err >&2; exit 1", args=OCI)
    assert (r.rc, r.out, r.err) == (1, "out\n", "err\n"), r
    # The command is pid 1 of its PID namespace: a child it starts can die of a signal.
    k = sbxc(None, "/bin/sh", "-c", "sh -c 'kill -TERM $$'; exit $?", args=OCI)
    assert k.rc == 143, k
    assert sbxc(None, "/no/such/program", args=OCI).rc == 127


@pytest.mark.parametrize("network", ["false", "[allow 127.0.0.1:9]"])
def test_a_command_runc_cannot_exec_exits_as_in_a_shell(runc, sbxc, network):
    """A file a shell would not run: not an executable format (126), a #! interpreter that
    is missing (127), no execute permission (126). runc would find it, write its pid file
    and fail its exec with one line on the command's own stderr, which a command can write
    too: so the runner checks the file before the container exists and says so itself,
    with sbxc's line (the command never ran). Both kinds of OCI run (`runc run`, and
    create/start for host rules). A script without #! runs under /bin/sh, as execvp (bwrap)
    runs it. The control: a command that prints runc's line itself and exits 1 keeps its
    1, and JSON says it ran."""
    proj = sbxc.project
    with open(os.path.join(proj, "badelf"), "wb") as f:
        f.write(b"\x7fELF\x02\x01\x01")
    with open(os.path.join(proj, "badshebang"), "w") as f:
        f.write("#!/nonexistent/interpreter\n")
    with open(os.path.join(proj, "noexec"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    with open(os.path.join(proj, "plain"), "w") as f:
        f.write("echo plain-ran\n")
    for name in ("badelf", "badshebang", "plain"):
        os.chmod(os.path.join(proj, name), 0o755)
    os.chmod(os.path.join(proj, "noexec"), 0o644)
    policy = f"sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: {network}\n"
    for name, code, words in (("badelf", 126, "cannot execute"), ("badshebang", 127, "command not found"),
                              ("noexec", 126, "cannot execute")):
        r = sbxc(policy, f"./{name}")
        assert (r.rc, r.err) == (code, f"sbxc: ./{name}: {words}\n") and "ran" not in r.out, r
    r = sbxc(policy, "./plain")
    assert (r.rc, r.out) == (0, "plain-ran\n"), r
    # The #! line as the kernel reads it, and its interpreter as the sandbox shows it (as
    # bwrap's execvp meets them): a CR is part of the name, an interpreter must be an
    # executable regular file that no mask hides, and a #! naming nothing runs under sh.
    os.makedirs(os.path.join(proj, "idir"))
    os.makedirs(os.path.join(proj, "hid"))
    shutil.copy("/bin/sh", os.path.join(proj, "hid", "sh"))
    with open(os.path.join(proj, "noxinterp"), "w") as f:
        f.write("#!/bin/sh\n")
    cases = {"dos": "#!/bin/sh\r\necho dos\r\n", "nx": f"#!{proj}/noxinterp\n", "idr": f"#! {proj}/idir\n",
             "hidden": f"#!{proj}/hid/sh\necho hidden\n", "empty": "#!\necho empty-shebang\n"}
    for name, text in cases.items():
        with open(os.path.join(proj, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(proj, name), 0o755)
    # A link to a visible sh, inside the masked folder: hidden too, as the kernel walks it.
    os.symlink("/bin/sh", os.path.join(proj, "hid", "shlink"))
    with open(os.path.join(proj, "inner"), "w") as f:
        f.write("#!/nonexistent/interpreter\n")
    os.chmod(os.path.join(proj, "inner"), 0o755)
    more = {"hidlink": f"#!{proj}/hid/shlink\necho hidlink\n", "nested": f"#!{proj}/inner\necho nested\n",
            "nul": "#!/bin/sh\0junk\necho nul\n", "long": "#!/" + "a" * 300 + "\necho long-name\n"}
    for name, text in more.items():
        with open(os.path.join(proj, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(proj, name), 0o755)
    masked = policy + "filesystem:\n  - mask {project}/hid\n"
    for name, code, words in (("dos", 127, "command not found"), ("nx", 126, "cannot execute"),
                              ("idr", 126, "cannot execute"), ("hidden", 127, "command not found"),
                              ("hidlink", 127, "command not found"), ("nested", 127, "command not found")):
        r = sbxc(masked, f"./{name}")
        assert (r.rc, r.err) == (code, f"sbxc: ./{name}: {words}\n"), r
    r = sbxc(masked, "./empty")
    assert (r.rc, r.out) == (0, "empty-shebang\n"), r
    # A NUL ends the name (the kernel reads /bin/sh); a name past the kernel's 256 bytes is
    # no #! line at all (ENOEXEC), and execvp runs the file under sh: both run, as on bwrap.
    for name, out in (("nul", "nul\n"), ("long", "long-name\n")):
        r = sbxc(masked, f"./{name}")
        assert (r.rc, r.out) == (0, out), r
    r = sbxc(policy, "./hidden")  # the control: not masked, the same interpreter runs it
    assert (r.rc, r.out) == (0, "hidden\n"), r
    fifo = os.path.join(proj, "fifo")
    os.mkfifo(fifo, 0o755)  # looked at, never opened: a read of it would wait for a writer
    r = sbxc(policy, "./fifo")
    assert (r.rc, r.err) == (126, "sbxc: ./fifo: cannot execute\n"), r
    # A bare name, found on the PATH.
    os.makedirs(os.path.join(proj, "bin"))
    os.rename(os.path.join(proj, "badshebang"), os.path.join(proj, "bin", "badtool"))
    r = sbxc(policy, "badtool", env={"PATH": os.path.join(proj, "bin") + ":/usr/bin:/bin"})
    assert (r.rc, r.err) == (127, "sbxc: badtool: command not found\n"), r
    # The control: runc's own words, printed by a command that ran, are its output.
    with open(os.path.join(proj, "liar"), "w") as f:
        f.write('#!/bin/sh\necho "exec ./liar: no such file or directory" >&2\ntouch ran-marker\nexit 1\n')
    os.chmod(os.path.join(proj, "liar"), 0o755)
    r = sbxc(policy, "./liar", args=("--format", "json"))
    status = json.loads(r.err.splitlines()[-1])
    assert r.rc == 1 and status["exit_status"] == 1 and status["ran"] is True, (r, status)
    assert os.path.exists(os.path.join(proj, "ran-marker"))


@pytest.mark.root_only
@pytest.mark.parametrize("network", ["false", "[allow 127.0.0.1:9]"])
def test_a_file_only_host_root_may_run_exits_126(runc, sbxc, network):
    """A file of another user, mode 0700: host root may run it (CAP_DAC_OVERRIDE), so the
    runner's look before the start passes; the container's root has no capabilities, and
    runc's own check refuses it (`exec ./ownx: permission denied`, on runc's log). That is
    a shell's 126 with sbxc's line, as on bwrap and Landlock, not a failed sandbox (125),
    and runc's words are not shown. Both kinds of OCI run. The control: host root runs the
    file outside the sandbox."""
    proj = sbxc.project
    path = os.path.join(proj, "ownx")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho RAN\n")
    os.chown(path, 4242, 4242)
    os.chmod(path, 0o700)
    outside = subprocess.run([path], capture_output=True, text=True)
    assert (outside.returncode, outside.stdout) == (0, "RAN\n"), outside
    policy = f"sbxc: 1\nextends: [builtin:default]\nnetwork: {network}\n"
    r = sbxc(policy, "./ownx", args=("--backend", "oci"))
    assert (r.rc, r.out, r.err) == (126, "", "sbxc: ./ownx: cannot execute\n"), r
    # bwrap as the reference (its execvp's own line comes first there: past its set-up,
    # stderr is the command's).
    b = sbxc(policy, "./ownx", args=("--backend", "bwrap"))
    assert (b.rc, b.out, b.err.splitlines()[-1]) == (126, "", "sbxc: ./ownx: cannot execute"), b
    r = sbxc(policy, "./ownx", args=("--backend", "oci", "--format", "json"))
    status = json.loads(r.err.splitlines()[-1])
    assert (r.rc, status["exit_status"], status["ran"]) == (126, 126, False), (r, status)


def test_the_report_says_runc_sets_home(runc, sbxc):
    """runc 1.1 adds HOME to an environment without one (from the container's
    /etc/passwd), and no config field stops it: with HOME neither passed nor set the
    report says `partial` and names it, as the run shows; set by the policy, the
    command gets exactly that value and the report says `enforced`. The control: bwrap,
    with the same policy, gives the command no HOME."""
    base = ("sbxc: 1\nfilesystem:\n  - read /\n  - write {project}\n  - tmpfs /tmp\n"
            "cache:\n  tools: []\nenv:\n  pass: [PATH]\n")
    show = ("/bin/sh", "-c", 'echo "home=${HOME-unset}"')

    def report(policy):
        path = os.path.join(sbxc.project, "sandbox.policy.yaml")
        with open(path, "w") as f:
            f.write(policy)
        r = run(sbxc_argv("compile", "--check", "--verbose", "--format", "json", "--backend", "oci",
                          "--policy", path), env=base_env(sbxc.home), cwd=sbxc.project)
        assert r.rc == 0, r
        return {v["subject"]: v for v in json.loads(r.out)["report"]["oci"]["verdicts"]}["env"]

    b = sbxc(base, *show, args=("--backend", "bwrap"))
    assert (b.rc, b.out) == (0, "home=unset\n"), b
    r = sbxc(base, *show, args=OCI)
    assert r.rc == 0 and r.out.startswith("home=/"), r
    env = report(base)
    assert env["status"] == "partial" and "HOME" in env["why"], env
    chosen = base + "  set:\n    HOME: /nowhere-home\n"
    r = sbxc(chosen, *show, args=OCI)
    assert (r.rc, r.out) == (0, "home=/nowhere-home\n"), r
    assert report(chosen)["status"] == "enforced"


def test_every_mount_from_the_host_is_nosuid_and_nodev(runc, sbxc):
    """`read /` binds the host's / with every mount below it: each must be nosuid and
    nodev, as under bwrap, so that a device node or a setuid file on any of them is
    useless (the device cgroup is no help rootless). Before, nosuid/nodev reached the top
    mount only, and / itself lost them to runc's read-only remount of the root. Only
    runc's own /dev and its masks of /proc may allow devices. The control: the mounts
    are there to check (the host's /sys and /proc below /)."""
    from sbxc.backends.oci import PROC_MASKED

    r = sbxc("sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: false\n",
             "/bin/cat", "/proc/self/mountinfo")
    assert r.rc == 0, r
    mounts = {}
    for line in r.out.splitlines():
        f = line.split(" ")
        mounts[f[4]] = set(f[5].split(","))
    assert "/" in mounts and "/sys" in mounts and len(mounts) > 10, r.out  # the control
    runc_own = {"/dev", "/dev/pts", "/dev/mqueue", "/dev/shm", "/dev/console"} | set(PROC_MASKED) | {
        "/dev/" + n for n in ("null", "zero", "full", "random", "urandom", "tty")}
    lacking = {m for m, opts in mounts.items() if not {"nosuid", "nodev"} <= opts and m not in runc_own}
    assert lacking == set(), {m: sorted(mounts[m]) for m in lacking}
    assert {"ro", "nosuid", "nodev"} <= mounts["/"]


def test_a_plan_file_runs_on_a_fresh_cache_root(runc, sbxc, tmp_path):
    """On a fresh cache root no plans folder exists yet, and the OCI runner keeps its
    bundles there: a --plan run makes it on the way (so does the runner itself, started
    without the plan cache, as tests/live/cases.py starts it). The control: the root was
    missing before the run."""
    import shutil
    import tempfile

    from conftest import SRC

    bundle = str(tmp_path / "bundle")
    env = base_env(sbxc.home)
    r = run([sys.executable, "-m", "sbxc", "compile", "--backend", "oci", "-o", bundle], env=env, cwd=sbxc.project)
    assert r.rc == 0, r
    parent = tempfile.mkdtemp(prefix="sbxc-fresh-", dir="/var/tmp")
    try:
        fresh = os.path.join(parent, "root")
        assert not os.path.exists(fresh)
        r = run([sys.executable, "-m", "sbxc", "exec", "--plan", os.path.join(bundle, "plan.json"), "--",
                 "/bin/sh", "-c", "echo ran"], env=dict(env, SBXC_ROOT=fresh, PYTHONPATH=SRC), cwd=sbxc.project)
        assert (r.rc, r.out) == (0, "ran\n"), r
        assert os.path.isdir(os.path.join(fresh, "plans"))
        assert os.listdir(os.path.join(fresh, "plans", "runs")) == []  # the run's bundle is gone
    finally:
        shutil.rmtree(parent)


def test_refuses_without_runc(runc, sbxc, tmp_path):
    r = sbxc(None, "/bin/true", args=OCI, env={"SBXC_RUNC": str(tmp_path / "no-runc")})
    assert r.rc == 125, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbxc: no runc that sbxc may start") and "apt install runc" in lines[0], r


@pytest.mark.parametrize("stdin", ["nothing to read", "a file"])
def test_a_runc_that_exits_0_without_starting_anything_is_125(runc, sbxc, tmp_path, stdin):
    """A "runc" that ends at once with status 0 (SBXC_RUNC naming /bin/true, a wrapper that
    gave up) made no container and started no command: 125 with one line, never the 0 that
    says the command ran (it was 0, with no line, for a single `runc run`)."""
    marker = os.path.join(sbxc.project, "ran")
    source = subprocess.DEVNULL
    if stdin == "a file":
        (tmp_path / "in").write_text("x\n")
        source = open(tmp_path / "in", "rb")  # something to read: `runc create` + `runc start`
    try:
        r = sbxc(None, "/bin/sh", "-c", f"touch {marker}", args=OCI, env={"SBXC_RUNC": "/bin/true"}, stdin=source)
    finally:
        if stdin == "a file":
            source.close()
    assert r.rc == 125, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "runc exited with status 0 before the command started" in lines[0], r
    assert not os.path.exists(marker)


def test_refuses_a_runc_a_command_could_write(runc, sbxc, tmp_path):
    """A runc in a folder the caller can write (as a sandboxed command could) is never started."""
    fake = tmp_path / "bin"
    fake.mkdir()
    os.chmod(tmp_path, 0o755)
    marker = tmp_path / "ran"
    (fake / "runc").write_text(f"#!/bin/sh\ntouch {marker}\nexec {runc} \"$@\"\n")
    os.chmod(fake / "runc", 0o755)
    r = sbxc(None, "/bin/true", args=OCI, env={"PATH": f"{fake}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"})
    assert not marker.exists(), r
    assert r.rc == 0, r  # the system runc was taken instead


def test_cwd_outside_the_sandbox_is_refused(runc, sbxc):
    os.makedirs(os.path.join(sbxc.project, "inner"))
    policy = "sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - mask {project}/inner\n"
    r = sbxc(policy, "/bin/true", args=OCI, cwd=os.path.join(sbxc.project, "inner"))
    assert r.rc == 125, r
    assert r.err.startswith("sbxc: ") and len(r.err.strip().splitlines()) == 1, r


def test_runc_failure_before_the_command_is_125(runc, tmp_path):
    """runc failing in its set-up (a mount the kernel refuses) is one sbxc line naming
    runc's cause and 125, never the command's status or output."""
    root = str(tmp_path / "tree")
    os.makedirs(root)
    os.chmod(tmp_path, 0o755)
    cases.build_tree(root)
    pf = cases.planfile_for(cases.make_plan(cases.shared_rules(root), project=f"{root}/proj"), "oci")
    pf["lowered"]["config"]["mounts"].append(
        {"destination": f"{root}/proj/sub", "type": "no-such-filesystem", "source": "none", "options": []})
    marker = f"{root}/proj/ran"
    res = cases.run_planfile(pf, ["/bin/sh", "-c", f"touch {marker}; exit 3"], cwd=f"{root}/proj", tmp=str(tmp_path))
    assert res.rc == 125, res
    assert not os.path.exists(marker)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbxc: runc could not start the sandbox: "), res


def test_signals_reach_the_command_as_on_other_backends(runc, sbxc):
    """The command is pid 1 of its PID namespace, where the kernel drops a signal it has no
    handler for: sbxc's SIGTERM still ends `sleep` (143, as its default action would), and
    a command with a handler gets the signal itself."""
    import signal
    import time

    env = base_env(sbxc.home)

    def start(*cmd, ready):
        # Waits until ``ready()`` says the command runs (a fixed wait for runc's set-up was
        # too short on a busy machine).
        p = subprocess.Popen(sbxc_argv("exec", "--backend", "oci", "--", *cmd), env=env, cwd=sbxc.project,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not ready(p):
            assert p.poll() is None and time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
        return p

    # A duration no other process uses: the container's sleep, seen from here (its pid
    # namespace is a child of ours), once it runs. A signal may come before runc has
    # written its pid file (it does so after the start): sbxc waits for the file.
    import random

    secs = f"30.{random.randrange(10**6):06d}"

    def sleeping(_p):
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() == b"sleep\x00" + secs.encode() + b"\x00":
                        return True
            except OSError:
                pass
        return False

    def said_ready(p):
        import select

        return bool(select.select([p.stdout], [], [], 0.05)[0]) and p.stdout.readline() == "ready\n"

    p = start("sleep", secs, ready=sleeping)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 143, (out, err)
    assert time.monotonic() - t0 < 10
    # The handler writes with os.write: the signal may come while the main code is still
    # inside print('ready'), and a print from the handler would then fail (reentrant call).
    handler = ("import os, signal, time\n"
               "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'caught\\n'), os._exit(5)))\n"
               "print('ready', flush=True)\n"
               "time.sleep(30)\n")
    p = start(SANDBOX_PYTHON, "-c", handler, ready=said_ready)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert (p.returncode, out) == (5, "caught\n"), err


def test_compiled_bundle_runs_under_runc_by_hand(runc, sbxc, tmp_path):
    """`sbxc compile --backend oci -o DIR` writes a bundle runc runs as it is (after the
    command is set): the same confinement without sbxc in the loop."""
    policy = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(policy)
    bundle = str(tmp_path / "bundle")
    os.chmod(tmp_path, 0o755)
    c = run(sbxc_argv("compile", "--backend", "oci", "-o", bundle), env=base_env(sbxc.home), cwd=sbxc.project)
    assert c.rc == 0, c
    assert sorted(os.listdir(bundle)) == ["config.json", "plan.json", "rootfs", "sbxc-empty"]
    with open(os.path.join(bundle, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["process"]["cwd"] == sbxc.project and cfg["process"]["args"] == ["sh"]
    assert not any(e.startswith("HOME=") for e in cfg["process"]["env"]), "the caller's environment stays off disk"
    cfg["process"]["args"] = ["/bin/sh", "-c", "grep CapEff /proc/self/status; cat ~/.ssh/id_rsa; touch /etc/x"]
    cfg["process"]["env"].append(f"HOME={sbxc.home}")
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(cfg, f)
    # The bundle binds the project's cache folder, which sbxc exec makes on its first run.
    assert sbxc(None, "/bin/true", args=OCI).rc == 0
    state = str(tmp_path / "state")
    argv = [runc, "--root", state] + (["--rootless", "true"] if os.geteuid() else []) + [
        "run", "--bundle", bundle, f"sbxc-test-{os.getpid()}"]
    p = subprocess.run(argv, cwd=bundle, capture_output=True, text=True, timeout=60)
    assert "CapEff:\t0000000000000000" in p.stdout, p
    assert "PRIVATE KEY" not in p.stdout and "Read-only file system" in p.stderr, p


def test_bundles_are_out_of_the_commands_reach(runc, sbxc):
    """Even under a policy that makes the folder above sbxc's root writable, the command sees
    no run's bundle (they live in the plans folder, covered by an empty read-only folder) and
    cannot write there; on the host the bundle of this very run exists meanwhile."""
    from conftest import own_code_rules

    root = os.environ.get("SBXC_ROOT") or f"/var/tmp/sbxc-{os.getuid()}"
    plans = os.path.join(root, "plans")
    above = os.path.dirname(root)
    policy = f"sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - write {above}\n" + own_code_rules(above)
    script = (f"find {root} -name 'sbxc-run-*' 2>/dev/null; touch {plans}/x 2>/dev/null && echo WROTE; "
              f"echo listed")
    r = sbxc(policy, "/bin/sh", "-c", script, args=OCI)
    assert r.rc == 0 and "listed" in r.out, r
    assert "sbxc-run-" not in r.out and "WROTE" not in r.out, r
    assert not os.path.exists(os.path.join(plans, "x"))
    # Control: the host side of the same run has its bundle in the plans folder.
    seen = sbxc(None, "/bin/sleep", "0", args=OCI)
    assert seen.rc == 0
    marker = "sbxc-run-"
    p = subprocess.Popen(sbxc_argv("exec", "--backend", "oci", "--", "/bin/sleep", "3"), env=base_env(sbxc.home),
                         cwd=sbxc.project)
    try:
        import time

        found = False
        runs = os.path.join(plans, "runs")
        for _ in range(60):
            if os.path.isdir(runs) and any(n.startswith(marker) for n in os.listdir(runs)):
                found = True
                break
            time.sleep(0.1)
        assert found, "the run's bundle was not in the plans folder"
    finally:
        p.wait(timeout=30)


def _plans_dir() -> str:
    return os.path.join(os.environ.get("SBXC_ROOT") or f"/var/tmp/sbxc-{os.getuid()}", "plans")


def _mask_source(mountinfo: str, path: str) -> str:
    """The root (the path within its filesystem) of the mount at ``path`` in a mountinfo."""
    for line in mountinfo.splitlines():
        f = line.split()
        if len(f) > 4 and f[4] == path:
            return f[3]
    return ""


def test_masked_files_bind_the_shared_empty_file_only_when_it_is_empty(runc, sbxc):
    """Masked files are bound from one empty file kept in the plans folder. A file there that
    is not empty (or not a regular file of this user's) is not used: the run makes its own
    empty file, and the mask still reads as empty."""
    netrc = os.path.join(sbxc.home, ".netrc")
    with open(netrc, "w") as f:
        f.write("machine h login u password NETRC-SECRET\n")
    probe = f"cat {netrc}; echo; grep ' {netrc} ' /proc/self/mountinfo"
    r = sbxc(None, "/bin/sh", "-c", probe, args=OCI)
    assert r.rc == 0 and "NETRC-SECRET" not in r.out, r
    shared = os.path.join(_plans_dir(), "oci-empty")
    assert _mask_source(r.out, netrc).endswith("/plans/oci-empty"), r
    assert os.path.getsize(shared) == 0
    # Someone (not a sandbox: none reaches the plans folder) put text in it.
    os.unlink(shared)
    with open(shared, "w") as f:
        f.write("PLANTED\n")
    try:
        r = sbxc(None, "/bin/sh", "-c", probe, args=OCI)
        assert r.rc == 0, r
        assert "PLANTED" not in r.out and "NETRC-SECRET" not in r.out, r
        src = _mask_source(r.out, netrc)
        assert "/sbxc-run-" in src and src.endswith("/sbxc-empty"), r
        # Control: the planted text is there on the host, where the shared file would show it.
        assert open(shared).read() == "PLANTED\n"
    finally:
        os.unlink(shared)


def test_runs_leave_no_bundle_and_keep_the_shared_rootfs_empty(runc, sbxc, tmp_path):
    """A policy without ``read /``: runc makes its mount points in the rootfs on disk, so the
    run gets a rootfs of its own (removed with its bundle), and the shared one stays empty;
    with ``read /`` first the shared rootfs is used and runc makes nothing in it."""
    import glob

    # Only /usr and /etc: merged-/usr links (/bin, /lib64) are not there, so the shell is
    # started through the dynamic loader, with the library folder named.
    loader = os.path.realpath((glob.glob("/usr/lib64/ld-linux*.so.*") + glob.glob("/usr/lib/*/ld-linux*.so.*"))[0])
    libdir = os.path.dirname(glob.glob("/usr/lib/*-linux-gnu/libc.so.6")[0])
    policy = "sbxc: 1\nfilesystem:\n  - read /usr /etc\n  - write {project}\n"
    r = sbxc(policy, loader, "--library-path", libdir, "/usr/bin/sh", "-c", "echo /*; echo DONE", args=OCI)
    assert r.rc == 0 and "DONE" in r.out, r
    seen = r.out.split()
    unnamed = [p for p in ("/opt", "/srv", "/boot", "/mnt", "/media", "/sbin") if os.path.lexists(p)]
    assert unnamed and "/usr" in seen and not set(unnamed) & set(seen), r  # only what the plan binds
    plans = _plans_dir()
    shared = os.path.join(plans, "oci-rootfs")
    assert not os.path.exists(shared) or os.listdir(shared) == []
    assert _bundles(plans) == []
    r = sbxc("sbxc: 1\nextends: [builtin:default]\n", "/bin/true", args=OCI)
    assert r.rc == 0, r
    assert os.path.isdir(shared) and os.listdir(shared) == []
    assert _bundles(plans) == []


def _bundles(plans: str) -> list:
    """Per-run folders left in the plans folder's ``runs`` folder or in the plans folder."""
    found = []
    for where in (os.path.join(plans, "runs"), plans):
        if os.path.isdir(where):
            found += [os.path.join(where, n) for n in os.listdir(where) if n.startswith("sbxc-run-")]
    return found


def test_shared_parts_refuse_what_they_did_not_make(tmp_path):
    """``_shared_parts``: a link, a file of the wrong kind or a non-empty empty file means
    the per-run parts; a root that no mount covers is never shared."""
    from sbxc.runtime.oci_run import _shared_parts

    d = str(tmp_path)
    assert _shared_parts(d, True) == (f"{d}/oci-rootfs", f"{d}/oci-empty")
    assert _shared_parts(d, False) == ("", f"{d}/oci-empty")
    os.rmdir(f"{d}/oci-rootfs")
    os.makedirs(f"{d}/elsewhere")
    os.symlink(f"{d}/elsewhere", f"{d}/oci-rootfs")
    assert _shared_parts(d, True) is None
    assert _shared_parts(d, False) == ("", f"{d}/oci-empty")
    os.unlink(f"{d}/oci-empty")
    os.symlink("/etc/hostname", f"{d}/oci-empty")
    assert _shared_parts(d, False) is None
    os.unlink(f"{d}/oci-empty")
    os.mkdir(f"{d}/oci-empty")
    assert _shared_parts(d, False) is None


def test_plan_whose_config_shares_a_network_is_refused(runc, sbxc, tmp_path):
    """A plan with the network off whose OCI config lost its new network namespace (or
    joins one by path) would share a network the plan does not allow: refused with 125,
    and the command never ran. Control: the same plan as compiled runs."""
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n")
    out = str(tmp_path / "bundle")
    r = run(sbxc_argv("compile", "--backend", "oci", "-o", out), env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 0, r
    with open(os.path.join(out, "plan.json")) as f:
        pf = json.load(f)
    marker = os.path.join(sbxc.project, "ran")
    cmd = ["/bin/sh", "-c", f"touch {marker}"]
    plain = str(tmp_path / "plan.json")
    with open(plain, "w") as f:
        json.dump(pf, f)
    r = run(sbxc_argv("exec", "--plan", plain, "--", *cmd), env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 0 and os.path.exists(marker), r  # the control
    os.unlink(marker)
    spaces = pf["lowered"]["config"]["linux"]["namespaces"]
    assert {"type": "network"} in spaces and pf["runtime"]["network"] == "off"
    for label, changed in (("none", [n for n in spaces if n.get("type") != "network"]),
                           ("joined", [dict(n, path="/proc/1/ns/net") if n.get("type") == "network" else n
                                       for n in spaces])):
        pf["lowered"]["config"]["linux"]["namespaces"] = changed
        path = str(tmp_path / f"plan-{label}.json")
        with open(path, "w") as f:
            json.dump(pf, f)
        r = run(sbxc_argv("exec", "--plan", path, "--", *cmd), env=base_env(sbxc.home), cwd=sbxc.project)
        assert r.rc == 125 and "shares a network namespace" in r.err, (label, r)
        assert not os.path.exists(marker), (label, r)


def test_no_usable_runs_folder_refuses_the_run(runc, sbxc, tmp_path):
    """The bundle (its config, and runc's state of the container, which `runc delete` acts
    on) must be where no sandbox can write: the plans folder's ``runs`` folder. When that
    is unusable (here a file in its place) there is no safe place (/tmp is written by
    other sandboxes of the same user): 125, one line, the command never ran. Control: with
    the folder back, the same run runs."""
    root = os.environ.get("SBXC_ROOT") or f"/var/tmp/sbxc-{os.getuid()}"
    assert sbxc(None, "/bin/true", args=OCI).rc == 0  # the plans folder exists from here on
    runs = os.path.join(root, "plans", "runs")
    moved = runs + ".aside"
    had = os.path.isdir(runs)
    if had:
        os.rename(runs, moved)
    with open(runs, "w"):
        pass
    marker = os.path.join(sbxc.project, "ran")
    try:
        r = sbxc(None, "/bin/sh", "-c", f"touch {marker}", args=OCI)
        assert r.rc == 125 and not os.path.exists(marker), r
        lines = [ln for ln in r.err.splitlines() if ln.startswith("sbxc: ") and "warning" not in ln]
        assert len(lines) == 1 and "cannot hold it" in lines[0] and "; " in lines[0], r
    finally:
        os.unlink(runs)
        if had:
            os.rename(moved, runs)
    r = sbxc(None, "/bin/sh", "-c", f"touch {marker}", args=OCI)
    assert r.rc == 0 and os.path.exists(marker), r


@pytest.mark.parametrize("backend", ["oci", "bwrap"])
def test_a_bare_name_runs_without_a_path_variable(backend, request, sbxc):
    """A policy that passes no PATH: a shell, bwrap's execvp and the core's 127 check look a
    bare name up on a default path, and the command runs. runc searched none and failed
    with "executable file not found", although sbxc had found the command. The control: a
    name on no folder of that path is still 127 on both."""
    if backend == "oci":
        request.getfixturevalue("runc")
    pol = "sbxc: 1\nnetwork: false\nfilesystem:\n  - read /\n  - write {project}\n"
    r = sbxc(pol, "sh", "-c", 'echo "ran:${PATH:+has-path}"', args=("--backend", backend))
    assert r.rc == 0 and "ran:" in r.out, r
    r = sbxc(pol, "sbxc-no-such-command", args=("--backend", backend))
    assert r.rc == 127 and "command not found" in r.err, r


@pytest.mark.parametrize("network", ["false", "[allow pkgs.example.invalid]"])
def test_a_run_on_the_callers_terminal_reads_what_is_typed(runc, sbxc, network):
    """Started from a terminal, as from a shell: runc, in a process group of its own, was a
    background job of the caller's terminal, and stopped by SIGTTIN at its first read of it
    (the run never ended; `runc run` copies its standard input to the command itself). runc
    runs in a session of its own, so the terminal is no controlling terminal of its and
    reading it stops nothing; and a run on a terminal is `runc create` + `runc start`, so
    the command gets the terminal itself (`runc run` would hand it pipes). Control: the same
    reader as a background job of the terminal is stopped."""
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: {network}\n")
    code = ("import os\n"
            "print('tty', os.isatty(0), os.isatty(1), 'READY', flush=True)\n"
            "print('got', input(), flush=True)\n")
    argv = sbxc_argv("exec", "--backend", "oci", "--", SANDBOX_PYTHON, "-c", code)
    rc, out = pty_run_interactive(argv, base_env(sbxc.home), sbxc.project, timeout=30)
    assert rc == 0, out
    assert b"got hello" in out, out
    # The caller's terminal itself: a run on a terminal is `runc create` + `runc start`
    assert b"tty True True" in out, out
    # Control: a reader in a process group of its own (what runc was) on the same kind of
    # terminal is stopped before it reads anything.
    control = ("import os, time\n"
               "pid = os.fork()\n"
               "if pid == 0:\n"
               "    os.setpgid(0, 0)\n"
               "    os.read(0, 1)\n"
               "    os._exit(0)\n"
               "time.sleep(1)\n"
               "state = open(f'/proc/{pid}/stat').read().rpartition(') ')[2].split()[0]\n"
               "os.kill(pid, 9)\n"
               "os.waitpid(pid, 0)\n"
               "print('state', state, flush=True)\n")
    rc, out = pty_run([SANDBOX_PYTHON, "-c", control], base_env(sbxc.home), sbxc.project, timeout=30)
    assert rc == 0 and b"state T" in out, out  # T: stopped by SIGTTIN, before it read anything


@pytest.mark.parametrize("backend", ["oci", "bwrap"])
def test_a_name_found_through_a_relative_path_entry_runs(backend, request, sbxc):
    """PATH with a relative entry (`bin`, `.`): a shell, bwrap's execvp and the core's 127
    check find the project's `bin/tool` and run it. runc's own search (Go's exec.LookPath)
    refused such a find ("cannot run executable found relative to current directory"), and
    the run ended 126. sbxc names the file it found, absolute. The control: a name on no
    folder of that PATH is still 127 on both."""
    if backend == "oci":
        request.getfixturevalue("runc")
    os.mkdir(os.path.join(sbxc.project, "bin"))
    tool = os.path.join(sbxc.project, "bin", "tool")
    with open(tool, "w") as f:
        f.write("#!/bin/sh\necho tool ran\n")
    os.chmod(tool, 0o755)
    pol = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
    for entry in ("bin", "."):
        name = "tool" if entry == "bin" else "tool-in-dot"
        if entry == ".":
            os.link(tool, os.path.join(sbxc.project, name))
        r = sbxc(pol, name, args=("--backend", backend), env={"PATH": entry + ":" + os.environ["PATH"]})
        assert (r.rc, r.out) == (0, "tool ran\n"), (entry, r)
    r = sbxc(pol, "tool", args=("--backend", backend))
    assert r.rc == 127 and "command not found" in r.err, r


@pytest.mark.parametrize("backend", ["oci", "bwrap"])
def test_a_loop_reading_the_callers_stdin_keeps_its_lines(backend, request, sbxc):
    """`while read f; do sbxc exec -- echo "$f"; done < list`: each run gets the loop's stdin
    and leaves what it does not read. `runc run` copies its stdin into the command's pipe
    ahead, to the end, whether the command reads it or not: on OCI the loop saw its first
    line only. A run whose stdin has something to read is now `runc create` + `runc start`,
    which pass the stdin on as it is. The control: a command that does read the rest ends
    the loop after one line, so the test sees a swallowed stdin."""
    if backend == "oci":
        request.getfixturevalue("runc")
    with open(os.path.join(sbxc.project, "sandbox.policy.yaml"), "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n")
    with open(os.path.join(sbxc.project, "list"), "w") as f:
        f.write("a\nb\nc\n")
    exec_ = " ".join(sbxc_argv("exec", "--"))
    r = run(["sh", "-c", f'while read f; do {exec_} echo "item $f"; done < list'], env=base_env(sbxc.home),
            cwd=sbxc.project)
    assert r.rc == 0 and r.out == "item a\nitem b\nitem c\n", r
    r = run(["sh", "-c", f'while read f; do {exec_} sh -c "echo item $f; cat >/dev/null"; done < list'],
            env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 0 and r.out == "item a\n", r  # the control


def test_oci_stdin_with_something_to_read_is_the_callers_own(runc, sbxc):
    """The command's stdin is the caller's pipe itself (the same pipe, not runc's copy) when
    there is something to read; with /dev/null as stdin the run keeps the single `runc run`,
    whose pipe the command then has (nothing is lost: there is nothing to read)."""
    pol = "sbxc: 1\nextends: [builtin:default]\nbackend: oci\nnetwork: false\n"
    rd, wr = os.pipe()
    try:
        os.write(wr, b"hello\n")
        os.close(wr)
        wr = -1
        r = sbxc(pol, "sh", "-c", "readlink /proc/self/fd/0; cat", stdin=rd)
        assert r.rc == 0 and r.out == f"pipe:[{os.fstat(rd).st_ino}]\nhello\n", r
    finally:
        os.close(rd)
        if wr >= 0:
            os.close(wr)
    r = sbxc(pol, "sh", "-c", "readlink /proc/self/fd/0")
    assert r.rc == 0 and r.out.startswith("pipe:["), r  # runc run's own pipe, not /dev/null
