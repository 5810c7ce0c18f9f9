"""Per-project caches through real ``sbxc exec`` runs, on bwrap and on Landlock (SPEC §6).

Each test gets a private folder in /var/tmp (where the default cache root lives) holding
the projects, their policies and a cache root named by the policy.
"""
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest

from sbxc import cache
from sbxc.runtime import cachedir, probe, trees

pytestmark = pytest.mark.live

UID = os.getuid()
SBXC = [sys.executable, "-m", "sbxc"]
from conftest import SANDBOX_PYTHON, runc_for, without_plan_warnings  # noqa: E402
CACHE_VARS = {v for vs in cache.TOOLS.values() for v in vs}
NOBODY = 65534
HOST = probe.probe_host(os.environ, full=True)


def _backend_param(name):
    if name == "bwrap":
        why = "" if HOST.bwrap and HOST.userns else "bwrap with user namespaces is not available here"
    else:
        why = "" if HOST.landlock_abi > 0 else "Landlock is not available in this kernel"
    return pytest.param(name, marks=pytest.mark.skipif(bool(why), reason=why), id=name)


BACKENDS = [_backend_param("bwrap"), _backend_param("landlock")]


SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def clean_env():
    """This environment without any cache variable, able to run sbxc from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONPATH"] = os.pathsep.join([SRC] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@pytest.fixture
def ws():
    """A private work folder in /var/tmp; removed afterwards even where tools made
    read-only folders or a test gave a folder to another user. (Leftover throwaways are
    checked per test by path: other suites may run sandboxes on this host meanwhile.)"""
    d = tempfile.mkdtemp(prefix="sbxc-cachetest-", dir="/var/tmp")
    yield Workspace(d)
    for dp, dns, _fns in os.walk(d):
        for n in dns:
            p = os.path.join(dp, n)
            if not os.path.islink(p) and UID == 0 and os.lstat(p).st_uid != UID:
                os.chown(p, UID, -1, follow_symlinks=False)
    fd = os.open("/var/tmp", os.O_PATH | os.O_DIRECTORY)
    try:
        trees.remove_tree(fd, os.path.basename(d))
    finally:
        os.close(fd)


class Workspace:
    def __init__(self, path):
        self.path = path
        self.root = os.path.join(path, "cache-root")

    def project(self, name, root=None, extra=""):
        p = os.path.join(self.path, name)
        os.makedirs(p, exist_ok=True)
        with open(os.path.join(p, "sandbox.policy.yaml"), "w") as f:
            f.write("sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
                    f"cache:\n  root: {json.dumps(root or self.root)}\n{extra}")
        return p

    def cache_dir(self, project, root=None):
        return cache.project_dir(root or self.root, os.path.realpath(project))


def run(project, backend, *cmd, timeout=120):
    return subprocess.run(SBXC + ["exec", "--backend", backend, "--", *cmd], cwd=project,
                          capture_output=True, text=True, env=clean_env(), timeout=timeout)


def sh(project, backend, script, **kw):
    return run(project, backend, "/bin/sh", "-c", script, **kw)


# --- a real tool: pip's wheel cache ---------------------------------------------------------

BACKEND_PY = '''\
import base64, hashlib, os, zipfile
NAME, VER = "tinypkg", "0.1"
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    di = NAME + "-" + VER + ".dist-info"
    files = {NAME + "/__init__.py": "VALUE = 42\\n",
             di + "/METADATA": "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VER + "\\n",
             di + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    fn = NAME + "-" + VER + "-py3-none-any.whl"
    rec = []
    with zipfile.ZipFile(os.path.join(wheel_directory, fn), "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
            h = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
            rec.append(p + ",sha256=" + h + "," + str(len(t)))
        rec.append(di + "/RECORD,,")
        z.writestr(di + "/RECORD", "\\n".join(rec) + "\\n")
    return fn
'''


def make_sdist(folder):
    """tinypkg-0.1.tar.gz whose build backend lives in the archive (no setuptools, no
    network): pip builds a wheel from it and keeps that wheel in PIP_CACHE_DIR/wheels."""
    src = os.path.join(folder, "build", "tinypkg-0.1")
    os.makedirs(src)
    with open(os.path.join(src, "pyproject.toml"), "w") as f:
        f.write('[build-system]\nrequires = []\nbuild-backend = "tinybackend"\nbackend-path = ["."]\n'
                '[project]\nname = "tinypkg"\nversion = "0.1"\n')
    with open(os.path.join(src, "tinybackend.py"), "w") as f:
        f.write(BACKEND_PY)
    links = os.path.join(folder, "links")
    os.makedirs(links)
    with tarfile.open(os.path.join(links, "tinypkg-0.1.tar.gz"), "w:gz") as t:
        t.add(src, arcname="tinypkg-0.1")
    return links


def find_files(top, name):
    return [os.path.join(dp, n) for dp, _dns, fns in os.walk(top) for n in fns if n == name]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pip_cache_survives_between_commands(ws, backend):
    links = make_sdist(ws.path)
    proj = ws.project("proj")
    d = ws.cache_dir(proj)

    def install(n):
        return run(proj, backend, SANDBOX_PYTHON, "-m", "pip", "install", "--no-index", "--find-links", links,
                   "--disable-pip-version-check", "--target", os.path.join(proj, f"out{n}"), "tinypkg")

    first = install(1)
    if backend == "landlock" and os.geteuid() == 0:
        # As root, Landlock's plan refuses chmod everywhere (SECURITY.md, metadata), and
        # building a wheel sets modes: the documented narrowing, not a cache failure. The
        # unprivileged CI pass runs the cache round trip on Landlock.
        assert first.returncode != 0 and "Operation not permitted" in first.stdout + first.stderr, first
        assert not os.path.exists(os.path.join(proj, "out1", "tinypkg", "__init__.py"))
        return
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Building wheel for tinypkg" in first.stdout
    assert f"Stored in directory: {d}/pip/wheels" in first.stdout
    wheels = find_files(os.path.join(d, "pip"), "tinypkg-0.1-py3-none-any.whl")
    assert len(wheels) == 1  # the cache on the host holds the built wheel

    second = install(2)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Using cached tinypkg-0.1-py3-none-any.whl" in second.stdout
    assert "Building wheel" not in second.stdout
    assert os.path.exists(os.path.join(proj, "out2", "tinypkg", "__init__.py"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_xdg_cache_file_survives_between_commands(ws, backend):
    proj = ws.project("proj")
    d = ws.cache_dir(proj)
    token = f"note-{os.getpid()}-{time.time_ns()}"
    r1 = sh(proj, backend, f'echo {token} > "$XDG_CACHE_HOME/note" && printf %s "$XDG_CACHE_HOME"')
    assert r1.returncode == 0, r1.stderr
    assert r1.stdout == f"{d}/xdg"
    assert "warning" not in without_plan_warnings(r1.stderr)
    r2 = sh(proj, backend, 'cat "$XDG_CACHE_HOME/note"')
    assert r2.returncode == 0 and r2.stdout.strip() == token, r2.stderr
    # where `sbxc cache path` says, on the host, owned by the caller, 0700
    p = subprocess.run(SBXC + ["cache", "path"], cwd=proj, capture_output=True, text=True, env=clean_env())
    assert p.stdout.strip() == d
    st = os.lstat(d)
    assert st.st_uid == UID and stat.S_IMODE(st.st_mode) == 0o700
    assert open(os.path.join(d, "xdg", "note")).read().strip() == token


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_cache_variable_points_into_the_project_cache(ws, backend):
    proj = ws.project("proj")
    d = ws.cache_dir(proj)
    r = run(proj, backend, "/usr/bin/env")
    assert r.returncode == 0, r.stderr
    seen = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert {k: seen.get(k) for k in CACHE_VARS} == dict(cache.cache_env(cache.DEFAULT_TOOLS, d))
    # and each is writable there, the home is not
    script = " && ".join(f'touch "${v}/w"' for v in sorted(CACHE_VARS))
    r = sh(proj, backend, script)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_tools_selects_the_variables(ws, backend):
    proj = ws.project("proj", extra="  tools: [go]\n")
    r = run(proj, backend, "/usr/bin/env")
    assert r.returncode == 0, r.stderr
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines()}
    assert names & CACHE_VARS == {"GOMODCACHE", "GOCACHE"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_project_cannot_see_the_cache(ws, backend):
    a = ws.project("a")
    b = ws.project("b")
    da = ws.cache_dir(a)
    r = sh(a, backend, 'echo secret-of-a > "$XDG_CACHE_HOME/note"')
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(da, "xdg", "note"))
    probe_a = f'''
cat {shlex.quote(da)}/xdg/note && echo READ-A
ls {shlex.quote(da)} && echo LISTED-A
ls -a {shlex.quote(ws.root)}
echo x > {shlex.quote(da)}/xdg/planted && echo WROTE-A
true'''
    r = sh(b, backend, probe_a)
    assert "secret-of-a" not in r.stdout and "READ-A" not in r.stdout
    assert "LISTED-A" not in r.stdout and "WROTE-A" not in r.stdout
    assert os.path.basename(da) not in r.stdout  # not even its name in a listing of the root
    assert not os.path.exists(os.path.join(da, "xdg", "planted"))
    assert open(os.path.join(da, "xdg", "note")).read() == "secret-of-a\n"


@pytest.mark.parametrize("backend", BACKENDS + [pytest.param("oci", id="oci")])
def test_a_throwaway_cache_keeps_other_projects_caches_masked(ws, backend, request):
    """A command can make its own project's cache folder suspect (it owns the folder: a
    chmod), so that the next run gets a throwaway. That run must still hide the cache
    root, which holds every other project's cache: the plan's mask stays on it and the
    throwaway gets one of its own. Before, the mask moved to the throwaway and left the
    root readable under `read /`."""
    runc_for(request)
    a = ws.project("a")
    b = ws.project("b")
    da, db = ws.cache_dir(a), ws.cache_dir(b)
    r = sh(a, backend, 'echo secret-of-a > "$XDG_CACHE_HOME/note"')
    assert r.returncode == 0, r.stderr
    # The control: a file beside the cache root, which the same command reads.
    beside = os.path.join(ws.path, "beside-the-root")
    with open(beside, "w") as f:
        f.write("readable-beside\n")
    os.chmod(beside, 0o644)
    probe = (f'cat {shlex.quote(da)}/xdg/note; ls -a {shlex.quote(ws.root)}; cat {shlex.quote(beside)}; '
             'printf "cache=%s\\n" "$XDG_CACHE_HOME"')
    r1 = sh(b, backend, probe + '; chmod 755 "$(dirname "$XDG_CACHE_HOME")" && echo WIDENED; true')
    assert r1.returncode == 0, r1.stderr
    if "WIDENED" not in r1.stdout:
        # Landlock as root refuses every chmod (its seccomp rule): the host widens it instead.
        assert backend == "landlock" and UID == 0, r1.stdout + r1.stderr
        os.chmod(db, 0o755)
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o755
    assert "readable-beside" in r1.stdout and "secret-of-a" not in r1.stdout, r1.stdout
    r2 = sh(b, backend, probe)
    assert r2.returncode == 0, r2.stderr
    assert "throwaway" in r2.stderr and "has mode 0755" in r2.stderr, r2.stderr
    used = [ln for ln in r2.stdout.splitlines() if ln.startswith("cache=")]
    assert used and not used[0].startswith("cache=" + db), r2.stdout  # the throwaway was in use
    assert "readable-beside" in r2.stdout, r2.stdout + r2.stderr  # the command could read around the root
    assert "secret-of-a" not in r2.stdout, "another project's cache was readable: " + r2.stdout
    assert os.path.basename(da) not in r2.stdout, "the cache root could be listed: " + r2.stdout


# --- nothing outside the sandbox gets the variables ----------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_variables_reach_only_the_sandboxed_command(ws, backend):
    proj = ws.project("proj")
    inside = os.path.join(proj, "inside.env")
    script = (f'{shlex.join(SBXC)} exec --backend {backend} -- /bin/sh -c "env > inside.env" & '
              'env > sibling-during.env; wait; env > sibling-after.env')
    r = subprocess.run(["/bin/sh", "-c", script], cwd=proj, capture_output=True, text=True, env=clean_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = open(inside).read()
    assert all(f"\n{v}=" in "\n" + got for v in CACHE_VARS)  # the command has them ...
    for name in ("sibling-during.env", "sibling-after.env"):  # ... its siblings do not
        text = "\n" + open(os.path.join(proj, name)).read()
        assert not [v for v in CACHE_VARS if f"\n{v}=" in text], name


@pytest.mark.parametrize("backend", BACKENDS)
def test_sbxc_own_environment_has_no_cache_variables(ws, backend, monkeypatch, capfd):
    """exec_main in this very process: afterwards our environment is unchanged, while the
    command it ran had the variables."""
    from sbxc.commands.exec import exec_main

    proj = ws.project("proj")
    for v in CACHE_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.chdir(proj)
    before = dict(os.environ)
    status = exec_main(["--backend", backend, "--", "/bin/sh", "-c", "env > inside.env"])
    capfd.readouterr()
    assert status == 0
    assert dict(os.environ) == before
    assert "XDG_CACHE_HOME=" in open(os.path.join(proj, "inside.env")).read()


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_sbxc_process_environment(ws, backend):
    """While the command runs, the sbxc process that launched it shows no cache variable."""
    proj = ws.project("proj")
    script = 'i=0; touch ready; while [ ! -e go ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done'
    p = subprocess.Popen(SBXC + ["exec", "--backend", backend, "--", "/bin/sh", "-c", script], cwd=proj,
                         env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(proj, "ready")) and time.time() < deadline and p.poll() is None:
            time.sleep(0.02)
        assert os.path.exists(os.path.join(proj, "ready")), p.stderr.read() if p.poll() is not None else ""
        with open(f"/proc/{p.pid}/environ", "rb") as f:
            names = {e.split(b"=", 1)[0].decode() for e in f.read().split(b"\0") if e}
        assert not names & CACHE_VARS
    finally:
        open(os.path.join(proj, "go"), "w").close()
        p.communicate(timeout=60)
    assert p.returncode == 0


# --- suspect folders ------------------------------------------------------------------------

def suspect_root(ws, how):
    """A cache root that must not be used; returns (root path, problem text, folder to
    watch for writes or None)."""
    if how == "symlink":
        target = os.path.join(ws.path, "target")
        os.mkdir(target, 0o700)
        root = os.path.join(ws.path, "linked-root")
        os.symlink(target, root)
        return root, "is a symlink", target
    if how == "mode-0755":
        root = os.path.join(ws.path, "open-root")
        os.mkdir(root)
        os.chmod(root, 0o755)
        return root, "has mode 0755, wider than 0700", root
    if how == "other-owner":
        if UID == 0:
            root = os.path.join(ws.path, "their-root")
            os.mkdir(root, 0o700)
            os.chown(root, NOBODY, NOBODY)
            return root, f"is owned by uid {NOBODY}", root
        # Unprivileged we cannot give a folder away; /var/tmp itself is one we do not
        # own (root does), a realistic wrong root, and the project folder would go in it.
        return "/var/tmp", "is owned by uid 0", None
    raise AssertionError(how)


def snapshot(top):
    if top is None:
        return None
    out = []
    for dp, dns, fns in os.walk(top):
        for n in dns + fns:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            out.append((p, st.st_mode, st.st_size, st.st_mtime_ns))
    st = os.lstat(top)
    return sorted(out), st.st_mode, st.st_mtime_ns


@pytest.mark.parametrize("how", ["symlink", "other-owner", "mode-0755"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_suspect_root_gives_a_throwaway_cache_and_one_warning(ws, backend, how):
    root, problem, watch = suspect_root(ws, how)
    proj = ws.project("proj", root=root)
    planned = ws.cache_dir(proj, root)
    before = snapshot(watch)
    script = ('printf "%s\\n" "$XDG_CACHE_HOME"; echo planted > "$XDG_CACHE_HOME/planted" && echo WROTE; '
              'mkdir -p "$PIP_CACHE_DIR/wheels" && echo MADE; ls -A "$XDG_CACHE_HOME"')
    r = sh(proj, backend, script)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in without_plan_warnings(r.stderr).splitlines() if ln.startswith("sbxc:")]
    assert len(warnings) == 1, r.stderr
    w = warnings[0]
    assert w.startswith("sbxc: warning: ") and problem in w and "throwaway" in w and "fix:" in w
    used = r.stdout.splitlines()[0]
    assert used.startswith(("/var/tmp/" + cachedir.THROWAWAY_PREFIX, "/tmp/" + cachedir.THROWAWAY_PREFIX)), used
    assert used.endswith("/" + os.path.basename(planned) + "/xdg")
    assert "WROTE" in r.stdout and "MADE" in r.stdout  # the command had a working cache
    # nothing went through the suspect folder, and the throwaway is gone (fixture checks too)
    assert snapshot(watch) == before
    assert not os.path.lexists(planned)
    assert not os.path.lexists(os.path.dirname(os.path.dirname(used))), "the throwaway was left on the host"
    # the next run starts empty again: nothing of the first run's cache survives
    r2 = sh(proj, backend, 'ls -A "$XDG_CACHE_HOME"; echo END')
    assert r2.returncode == 0 and r2.stdout.strip() == "END", r2.stdout + r2.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_symlinked_project_folder_gives_a_throwaway(ws, backend):
    proj = ws.project("proj")
    d = ws.cache_dir(proj)
    os.mkdir(ws.root, 0o700)
    target = os.path.join(ws.path, "target")
    os.mkdir(target, 0o700)
    os.symlink(target, d)
    r = sh(proj, backend, 'echo x > "$XDG_CACHE_HOME/planted"; printf %s "$XDG_CACHE_HOME"')
    assert r.returncode == 0, r.stderr
    assert "is a symlink" in r.stderr and "throwaway" in r.stderr
    assert os.listdir(target) == []
    assert os.path.islink(d)
    used = r.stdout
    assert os.path.basename(os.path.dirname(os.path.dirname(used))).startswith(cachedir.THROWAWAY_PREFIX), used
    assert not os.path.lexists(os.path.dirname(os.path.dirname(used)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_required_cache_refuses_instead(ws, backend):
    root, problem, watch = suspect_root(ws, "mode-0755")
    proj = ws.project("proj", root=root, extra="  required: true\n")
    r = sh(proj, backend, "echo RAN")
    assert r.returncode == 125
    assert "RAN" not in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("sbxc: ") and problem in lines[0] and "cache.required" in lines[0]
    assert os.listdir(root) == []


# --- doctor and clear after real runs --------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_doctor_size_matches_du_and_clear_empties(ws, backend):
    proj = ws.project("proj")
    d = ws.cache_dir(proj)
    r = sh(proj, backend, 'head -c 300000 /dev/urandom > "$XDG_CACHE_HOME/blob"; mkdir -p "$GOMODCACHE/m@v1" '
                          '&& echo x > "$GOMODCACHE/m@v1/f"')
    assert r.returncode == 0, r.stderr
    # Go leaves its module folders read-only; clearing must cope. Done from the host: as
    # root on Landlock, chmod is refused inside (SECURITY.md, metadata).
    for dp, dns, _fns in os.walk(d):
        if "m@v1" in dns:
            subprocess.run(["chmod", "-R", "a-w", os.path.join(dp, "m@v1")], check=True)
    doc = subprocess.run(SBXC + ["doctor"], cwd=proj, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    lines = doc.stdout.splitlines()
    i = lines.index(f"  {os.path.basename(d)}")
    fields = {ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip() for ln in lines[i + 1:i + 5]}
    du = int(subprocess.run(["du", "-sk", d], capture_output=True, text=True, check=True).stdout.split()[0])
    assert int(fields["size"].split()[0]) == du >= 300
    assert fields["project"] == os.path.realpath(proj)
    clear = shlex.split(fields["clear"])
    assert clear[0] == "sbxc"
    c = subprocess.run(SBXC + clear[1:], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert c.returncode == 0, c.stderr
    assert os.listdir(d) == []
    r = sh(proj, backend, 'ls -A "$XDG_CACHE_HOME"; echo END')
    assert r.returncode == 0 and r.stdout.strip() == "END"


@pytest.mark.parametrize("backend", BACKENDS)
def test_home_stays_read_only_with_caches_on(ws, backend):
    proj = ws.project("proj")
    home = os.path.expanduser("~")
    probe_name = f"sbxc-cache-probe-{os.getpid()}"
    r = sh(proj, backend, f'touch "$HOME/{probe_name}" && echo WROTE-HOME; touch "$XDG_CACHE_HOME/ok" && echo WROTE-CACHE')
    try:
        assert "WROTE-HOME" not in r.stdout and "WROTE-CACHE" in r.stdout, r.stdout + r.stderr
        assert not os.path.lexists(os.path.join(home, probe_name))
    finally:
        if os.path.lexists(os.path.join(home, probe_name)):
            os.unlink(os.path.join(home, probe_name))
    for k, v in cache.cache_env(cache.DEFAULT_TOOLS, ws.cache_dir(proj)):
        assert not v.startswith(home.rstrip("/") + "/"), k
