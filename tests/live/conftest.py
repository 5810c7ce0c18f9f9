"""Fixtures for live tests: real sandboxes on this kernel, run through ``sbxc exec``.

Reusable by every backend's live tests:

- ``bwrap_works``: skips (with the reason) where bwrap is missing or cannot make its
  namespaces. CI installs bwrap and allows user namespaces, so nothing skips there.
- ``project``: an empty project folder (with ``src/``, ``.git/hooks/``, a file or two).
- ``home``: a fake home folder with ``~/.ssh/id_rsa``, ``~/.aws/credentials``,
  ``~/.netrc``, ``~/.config/tool/settings``, used as ``$HOME`` for sbxc.
- ``sbxc``: ``sbxc(policy_text, *cmd, args=(), env=None, ...) -> Result(rc, out, err)``
  writes the policy into the project and runs ``sbxc exec --policy`` on it.
- ``tcp_server``: a TCP server on 127.0.0.1 (the host's loopback) answering ``pong``;
  ``.port``, ``.hits``. Its thread ends with the test (bounded accept timeout).
- ``unix_server``: factory ``unix_server(path) -> server`` for a Unix socket answering
  ``pong``; removed afterwards.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
PYTHON = sys.executable
# The interpreter that commands inside a sandbox run: Debian's, which every policy that
# reads / can see. The venv running the tests may live under a folder a policy hides
# (a checkout under /tmp, which builtin:default replaces with a private tmpfs).
SANDBOX_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TIMEOUT = 60


class Result:
    __slots__ = ("rc", "out", "err")

    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __iter__(self):
        return iter((self.rc, self.out, self.err))

    def __repr__(self):
        return f"Result(rc={self.rc}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


def sbxc_argv(*args) -> list:
    """The command line that runs sbxc from this checkout (no install needed)."""
    return [PYTHON, "-m", "sbxc", *args]


def interpreter_rules() -> str:
    """Policy lines that keep this test run's own interpreter environment (its venv and
    the checkout's sources, which the editable install reads) visible inside a sandbox,
    for a test that runs ``sys.executable`` there: a checkout under /tmp is otherwise
    behind builtin:default's private /tmp. Where they already are visible these add
    nothing."""
    return f"filesystem:\n  - read {sys.prefix}\n  - read {SRC}\n"


def own_code_rules(writable: str = "/var/tmp") -> str:
    """Policy lines keeping sbxc's own code read-only for a test whose policy makes
    ``writable`` writable: sbxc refuses to run when the command could rewrite the code it
    runs from, and a copy of the checkout (or its venv) may lie there."""
    lines = ""
    for p in sorted({os.path.realpath(os.path.dirname(SRC)), os.path.realpath(sys.prefix)}):
        if p.startswith(writable.rstrip("/") + "/"):
            lines += f"  - read {p}\n"
    return lines


# `exec` warns once per policy change that Landlock as root refuses chmod and chown
# everywhere (sbxc.compiler.runwarnings); tests about other messages leave that line out.
ROOT_LANDLOCK_WARNING = "sbxc: warning: landlock as root: "


def without_plan_warnings(text: str) -> str:
    """``text`` (stderr) without the line above."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith(ROOT_LANDLOCK_WARNING))


def base_env(home: str, extra=None) -> dict:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONPATH": SRC,
        "SBXC_ROOT": os.environ.get("SBXC_ROOT"),
    }
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}


def run(argv, *, env, cwd, stdin=subprocess.DEVNULL, pass_fds=(), timeout=TIMEOUT) -> Result:
    p = subprocess.run(argv, env=env, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       pass_fds=pass_fds, timeout=timeout)
    return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))


@pytest.fixture(scope="session")
def bwrap_works():
    sys.path.insert(0, SRC) if SRC not in sys.path else None
    from sbxc.runtime.probe import host_program, userns_works

    bwrap = host_program("bwrap", os.environ)[0]
    if not bwrap:
        pytest.skip("bwrap is not installed")
    ok, why = userns_works(bwrap)
    if not ok:
        pytest.skip(f"bwrap cannot make namespaces here: {why}")
    return bwrap


def find_runc() -> str:
    """Debian's runc, as sbxc finds it; the test skips where it is missing (scripts/setup
    installs it; CI has it, so nothing skips there)."""
    from sbxc.runtime.probe import host_program

    found, why = host_program("runc", os.environ)
    if not found:
        pytest.skip(f"runc is not installed ({why or 'not in the system program folders'}); scripts/setup installs it")
    return found


@pytest.fixture(scope="session")
def runc():
    return find_runc()


def runc_for(request) -> None:
    """Skip a case parametrized with ``backend="oci"`` when runc is missing (``find_runc``)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "oci":
        find_runc()


def remove_project_cache(project: str, root: str = "") -> None:
    """Delete the per-project cache folder sbxc made for a test's throwaway project (and
    its marker), so test runs do not pile folders up under the cache root."""
    from sbxc import cache
    from sbxc.runtime import cachedir

    cachedir.remove_project_at(root or cache.default_root(os.getuid(), os.environ), project, os.getuid())


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "src").mkdir(parents=True)
    (p / ".git" / "hooks").mkdir(parents=True)
    (p / ".git" / "config").write_text("[core]\n")
    (p / "README").write_text("hello\n")
    real = str(p.resolve())
    yield real
    remove_project_cache(real)


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (h / ".aws").mkdir()
    (h / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=SECRET\n")
    (h / ".netrc").write_text("machine example.com password SECRET\n")
    (h / ".config" / "tool").mkdir(parents=True)
    (h / ".config" / "tool" / "settings").write_text("visible\n")
    return str(h.resolve())


@pytest.fixture
def sbxc(bwrap_works, project, home):
    """Run ``sbxc exec`` with a policy text (None: no policy file, builtin:default)."""

    def go(policy, *cmd, args=(), env=None, cwd=None, stdin=subprocess.DEVNULL, pass_fds=(),
           policy_name="sandbox.policy.yaml", timeout=TIMEOUT) -> Result:
        ppath = os.path.join(project, policy_name)
        if policy is not None:
            with open(ppath, "w") as f:
                f.write(policy)
            flags = ["--policy", ppath]
        else:
            flags = []
        return run(sbxc_argv("exec", *flags, *args, "--", *cmd), env=base_env(home, env),
                   cwd=cwd or project, stdin=stdin, pass_fds=pass_fds, timeout=timeout)

    go.project = project
    go.home = home
    return go


class _TCPServer:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        deadline_loops = int(TIMEOUT * 5 * 4)  # bounded: never outlives a slow test by much
        for _ in range(deadline_loops):
            if self._stop.is_set():
                break
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.hits += 1
            try:
                c.settimeout(2)
                c.sendall(b"pong\n")
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self._stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def tcp_server():
    s = _TCPServer()
    yield s
    s.close()


class _UnixServer(_TCPServer):
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.hits = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self):
        super().close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def unix_server():
    made = []

    def make(path):
        s = _UnixServer(path)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def snapshot(*roots, depth=3) -> set:
    """Names (with kind) under each root, ``depth`` levels deep, for before/after checks."""
    out = set()
    for root in roots:
        base = root.rstrip("/") or "/"
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            if rel != "." and rel.count(os.sep) >= depth:
                dirnames[:] = []
                continue
            for n in dirnames:
                out.add((root, os.path.join(rel, n), "d"))
            for n in filenames:
                out.add((root, os.path.join(rel, n), "f"))
    return out


@pytest.fixture
def have():
    """``have("firejail")``: the path of a host program, or skip with the reason."""

    def need(name):
        p = shutil.which(name)
        if not p:
            pytest.skip(f"{name} is not installed")
        return p

    return need


@pytest.fixture
def tree(tmp_path):
    """The shared case tree (cases.build_tree) in a folder every user can traverse."""
    import cases

    os.chmod(tmp_path, 0o755)
    root = str(tmp_path / "tree")
    os.makedirs(root)
    cases.build_tree(root)
    return root


@pytest.fixture
def session_root(tmp_path, monkeypatch):
    """A root of this test's own (``SBXC_ROOT``): sessions, snapshots and the pool of one
    test are never another's. At the end, the pools' keepers are told to leave and the
    background refills are waited for, then all of it goes."""
    root = tmp_path / "sbxc-root"
    monkeypatch.setenv("SBXC_ROOT", str(root))
    yield str(root)
    from sbxc.runtime.session_ask import stop_keepers
    from sbxc.runtime.session_pool import refill_running
    from sbxc.runtime.sessions import open_store
    from sbxc.runtime.trees import remove_path

    if (root / "sessions").is_dir():
        fd = open_store(os.environ, create=False)
        try:
            stop_keepers(fd)
            deadline = time.time() + 60
            while refill_running(fd) and time.time() < deadline:
                time.sleep(0.05)
        finally:
            os.close(fd)
    remove_path(str(root))


# --- a person's terminal --------------------------------------------------------------------

def set_tty_size(fd, rows, cols):
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def pty_run_interactive(argv, env, cwd, timeout=60, interact=True, then=b""):
    """Run ``argv`` as the session leader of a fresh pseudo-terminal, its controlling
    terminal (a person's shell: stdin, stdout and stderr all on it, job control applies);
    its exit code and everything it printed. ``interact``: type ``hello`` once ``READY``
    was printed, then, once ``got hello`` was, type ``then`` or (none given) resize the
    terminal. A run that does not end in ``timeout`` s fails the test."""
    import pty
    import select
    import signal

    pid, master = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    set_tty_size(master, 24, 80)
    got = b""
    step = 0
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline and status is None:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal is gone
                chunk = b""
                time.sleep(0.01)
            got += chunk
        if not interact:
            pass
        elif step == 0 and b"READY" in got:
            os.write(master, b"hello\n")
            step = 1
        elif step == 1 and b"got hello" in got:
            if then:
                os.write(master, then)  # typed: a Ctrl-C, say, which the terminal sends its foreground group
            else:
                set_tty_size(master, 33, 101)  # the kernel signals the terminal's foreground group: sbxc
            step = 2
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
    try:
        while select.select([master], [], [], 0.2)[0]:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    os.close(master)
    if status is None:
        states = subprocess.run(["ps", "-o", "pid,pgid,sid,stat,wchan:20,comm", "-s", str(pid)],
                                capture_output=True, text=True).stdout
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"timed out; output so far: {got!r}; its processes then:\n{states}")
    return os.waitstatus_to_exitcode(status), got


def pty_run(argv, env, cwd, timeout=60):
    """``pty_run_interactive`` with nothing typed."""
    return pty_run_interactive(argv, env, cwd, timeout, interact=False)


def processes_naming(text: str) -> list:
    """The pids whose command line holds ``text`` (a path, a marker)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                continue
    return found


def reap_the_killed_oci_run(root: str) -> None:
    """An OCI run killed with its sbxc leaves its bundle folder (its lock died with sbxc);
    a later run's reaper takes it once stale. Taken here as that reaper would, once no
    process names the runs folder any more (the watcher's `runc delete`), so later tests
    find no run folders: exactly one is taken."""
    from sbxc.runtime import rundirs

    runs = os.path.join(root, "plans", "runs")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and processes_naming(runs):
        time.sleep(0.05)
    assert not processes_naming(runs)
    assert rundirs.reap_run_dirs(runs, now=time.time() + 2 * rundirs.STALE_AFTER) == 1
