"""``sbxc exec``: the one runtime core. Loads a plan, checks it against this host, prepares
the cache and the environment, hands off to a backend runner, waits, passes the status on.

Hot path: this module imports only builtins (``os``, ``_signal``, ``marshal`` via the
plan cache). No ``re``, ``json`` (except for ``--plan`` on a marshal-cache miss),
``argparse``, ``subprocess``, ``dataclasses``, ``fnmatch``: each costs milliseconds on
every run (see bench/README.md).

The runner protocol
-------------------
Each backend has a module ``sbxc.runtime.<name>_run`` (``bwrap_run``, ``landlock_run``,
``sbpl_run``) with one function::

    prepare(planfile: dict, cmd: list[str], env: dict[str, str], ctx: Context) -> LaunchSpec

``planfile`` is the loaded plan (sbxc.planfile layout); ``cmd`` the command and its
arguments exactly as the user gave them; ``env`` the command's environment, already
filtered (env.pass globs, cache variables, env.set); ``ctx`` the run's facts (below).
It raises ``sbxc.runtime.errors.Refusal`` for anything that stops the run (exit 125).
It must not start any process; ``exec_main`` forks once and execs ``spec.argv``.

``LaunchSpec`` (defined here) carries:

- ``argv``: what to execve, ``argv[0]`` an absolute path (``bwrap``, or the command
  itself for a runner that confines its own process).
- ``env``: the environment for that execve. For bwrap it is the command's own, so that
  bwrap's process (pid 1 inside) carries no secret of the caller.
- ``pass_fds``: descriptors that stay open across the exec; every other descriptor the
  caller left open is closed in the child before the exec.
- ``child_setup``: ``None`` or a callable run in the forked child just before the exec
  (e.g. Landlock's restrict_self, loading BPF). Raising ``Refusal`` there ends the child
  with 125 and the refusal line; the command never starts.
- ``exec_is_command``: True when ``argv[0]`` is the user's command (exec failures become
  126/127 as in a shell); False when it is the sandbox tool (exec failure: 125).
- ``started``: ``None`` or a callable telling whether the sandbox has finished its set-up
  (bwrap: it has consumed the seccomp pipe). Until then stderr is held back, so bwrap's own
  error message is not shown raw but as one ``sbxc:`` line.
- ``setup_failed``: ``None`` or ``(status, early_stderr: str) -> Refusal | None``, asked
  after the child ended: a Refusal when the sandbox failed before the command ran.
- ``command_status``: ``None`` or ``(status, first_stderr: bytes) -> int`` to map a
  launcher's "could not exec the command" to 126/127 (bwrap exits 1 for that).
- ``cleanups``: callables run after the child ended (in reverse order), also on failure.
- ``after_exit``: ``None`` or a callable run once the child has ended and been waited
  for, before the cleanups and before the post-run policy check, also on failure: a
  runner without a PID namespace ends the processes the command left behind there
  (Landlock), so none of them can still write to what those look at.
- ``own_pgrp``: True to put the child in a process group of its own (before
  ``child_setup``), so the terminal's Ctrl-C reaches sbxc only and sbxc decides where it
  goes. Leave False when ``child_setup`` calls ``setsid`` (a group leader cannot).
- ``signal_target``: ``None`` or a callable returning the process group that forwarded
  signals should go to (the command's, inside the sandbox), or ``None`` when not known
  yet; signals then go to the child process itself.

``Context`` carries ``project``, ``cwd``, ``uid``, ``is_root``, ``network`` (``on``/``off``/
``rules``, after flags), ``cache`` (the cachedir ``CacheSetup`` or None), ``plans_dir``
(the plan cache folder that no sandbox may write; hide or deny it), ``warn(line)``,
``environ`` (the caller's environment: for finding the sandbox tool, never for the
command). docs/runtime.md has the same protocol as a table.
"""
from __future__ import annotations

import os
import sys

from .errors import REFUSED, Refusal, one_line

USAGE = "usage: sbxc exec [--policy P | --plan F] [--backend B] [--network[=true|false]] -- CMD..."

RUNNERS = {
    "bwrap": "sbxc.runtime.bwrap_run",
    "landlock": "sbxc.runtime.landlock_run",
    "sandbox-exec": "sbxc.runtime.sbpl_run",
}
BACKEND_CHOICES = ("auto", "bwrap", "landlock", "sandbox-exec")

# SPEC §5: one fixed hint after a failed command whose stderr shows a network failure.
# Lower-case bytes; matched case-insensitively on stderr only. The text printed is the
# constant below, never anything taken from the output.
NETWORK_PATTERNS = (
    b"could not resolve host",
    b"name resolution",
    b"network is unreachable",
    b"connection refused",
    b"cannot assign requested address",
)
NETWORK_HINT = (
    "sbxc: hint: the network is off in this sandbox; if the command needs it, run "
    "`sbxc exec --network=true ...` or set `network: true` in the policy\n"
)
_OVERLAP = max(len(p) for p in NETWORK_PATTERNS) - 1

# Signals passed on to the sandbox process; the rest keep their default action.
# SIGWINCH too: the command has no controlling terminal under bwrap (new session), so a
# resize of the caller's terminal reaches it only this way.
_FORWARD = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


class HelpAsked(Exception):
    """``exec --help`` (before ``--``): print the usage and exit 0."""


class LaunchSpec:
    __slots__ = ("argv", "env", "pass_fds", "child_setup", "exec_is_command", "started",
                 "setup_failed", "command_status", "cleanups", "own_pgrp", "signal_target", "after_exit")

    def __init__(self, argv, env, pass_fds=(), child_setup=None, exec_is_command=False,
                 started=None, setup_failed=None, command_status=None, cleanups=None,
                 own_pgrp=False, signal_target=None, after_exit=None):
        self.argv = list(argv)
        self.env = env
        self.pass_fds = tuple(pass_fds)
        self.child_setup = child_setup
        self.exec_is_command = exec_is_command
        self.started = started
        self.setup_failed = setup_failed
        self.command_status = command_status
        self.cleanups = list(cleanups or ())
        self.own_pgrp = own_pgrp
        self.signal_target = signal_target
        self.after_exit = after_exit


class Context:
    __slots__ = ("project", "cwd", "uid", "is_root", "network", "cache", "plans_dir", "warn", "environ")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))


# ------------------------------------------------------------------ argument parsing

class Args:
    __slots__ = ("policy", "plan", "backend", "network", "session", "cmd")

    def __init__(self):
        self.policy = None
        self.plan = None
        self.backend = None
        self.network = None  # None: the plan decides; "on" / "off": the flag wins
        self.session = None
        self.cmd = []


def _bool_flag(value: str, name: str) -> str:
    v = value.lower()
    if v in ("true", "1", "yes", "on"):
        return "on"
    if v in ("false", "0", "no", "off"):
        return "off"
    raise Refusal(f"{name}={value!r} is not true or false", f"use {name}=true or {name}=false")


def parse_args(argv: list) -> Args:
    a = Args()
    i = 0
    n = len(argv)
    while i < n:
        arg = argv[i]
        if arg == "--":
            a.cmd = argv[i + 1:]
            break
        if not arg.startswith("-") or arg == "-":
            a.cmd = argv[i:]  # the command starts at the first word that is not an option
            break
        name, eq, value = arg.partition("=")
        if name in ("--policy", "--plan", "--backend", "--session"):
            if not eq:
                if i + 1 >= n:
                    raise Refusal(f"{name} needs a value", USAGE)
                i += 1
                value = argv[i]
            setattr(a, name[2:], value)
        elif name == "--network":
            a.network = _bool_flag(value, "--network") if eq else "on"
        elif name == "--no-network":
            a.network = "off"
        elif name in ("-h", "--help"):
            raise HelpAsked()
        else:
            raise Refusal(f"unknown option {one_line(arg, 60)!r} for exec", USAGE)
        i += 1
    if a.policy is not None and a.plan is not None:
        raise Refusal("--policy and --plan were both given", "give one of them")
    if a.backend is not None and a.backend not in BACKEND_CHOICES:
        raise Refusal(f"unknown backend {one_line(a.backend, 60)!r}", "use one of: " + ", ".join(BACKEND_CHOICES))
    if a.session is not None:
        raise Refusal("--session is not available in this version", "run without --session")
    if not a.cmd:
        raise Refusal("no command given", USAGE)
    return a


# ------------------------------------------------------------------ host and path checks

def current_home(environ) -> str:
    home = environ.get("HOME")
    if home:
        return home
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def host_mismatch(facts: dict, environ) -> str:
    """Why this host is not the one the plan assumed ('' when it is). Cheap facts only;
    backend-specific ones (bwrap's path, the Landlock ABI) are the runner's to check."""
    u = os.uname()
    platform = "darwin" if u.sysname == "Darwin" else "linux"
    if facts.get("platform", platform) != platform:
        return f"the plan is for {facts.get('platform')}, this host runs {platform}"
    if facts.get("arch", u.machine) != u.machine:
        return f"the plan is for {facts.get('arch')}, this host is {u.machine}"
    if facts.get("uid", -1) != os.getuid():
        return f"the plan was compiled for uid {facts.get('uid')}, this is uid {os.getuid()}"
    home = current_home(environ)
    if facts.get("home", home) != home:
        return f"the plan was compiled for home {facts.get('home')}, this home is {home}"
    return ""


def _kind_of(st_mode: int) -> str:
    import stat

    if stat.S_ISDIR(st_mode):
        return "dir"
    if stat.S_ISREG(st_mode):
        return "file"
    if stat.S_ISSOCK(st_mode):
        return "socket"
    if stat.S_ISLNK(st_mode):
        return "symlink"
    return "other"


def recheck_paths(checks) -> None:
    """Rules were resolved to real paths at compile time (SPEC §2). A path that became a
    symlink, or whose folders on the way did, could point the sandbox at something else;
    one that changed kind or vanished would make the backend create mount points on the
    host. Either way: refuse. (bwrap re-resolves when it mounts; the window between this
    check and that mount is the caller's own processes racing sbxc, see docs/runtime.md.)"""
    for path, kind, access in checks:
        if kind == "missing":
            if os.path.lexists(path):
                what = "masked by the policy" if access == "mask" else f"under a {access} rule"
                raise Refusal(f"{path} is {what} and appeared after the plan was compiled",
                              "compile the plan again (sbxc compile), then run")
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise Refusal(f"{path} no longer exists (the plan expected a {kind})",
                          "recompile the plan, or mark the rule optional with `?`") from None
        except OSError as e:
            raise Refusal(f"{path} cannot be checked ({e.strerror})", "check the path's permissions") from None
        now = _kind_of(st.st_mode)
        if now == "symlink":
            raise Refusal(f"{path} became a symlink since the plan was compiled",
                          "inspect it; recompile only if the link is intended")
        if now != kind:
            raise Refusal(f"{path} is now a {now}, the plan expected a {kind}", "recompile the plan")
        if os.path.realpath(path) != path:
            raise Refusal(f"a folder on the way to {path} became a symlink since the plan was compiled",
                          "inspect it; recompile only if the link is intended")


# ------------------------------------------------------------------ environment

def glob_match(pattern: str, name: str) -> bool:
    """``*`` any run of characters, ``?`` one character; everything else literal."""
    p = n = 0
    star = -1
    mark = 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            p += 1
            n += 1
        elif p < len(pattern) and pattern[p] == "*":
            star = p
            mark = n
            p += 1
        elif star != -1:
            p = star + 1
            mark += 1
            n = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def build_env(rt: dict, environ, cache_env) -> dict:
    """The command's environment: host variables named by env.pass, then the cache
    variables, then env.set (the policy's explicit values win)."""
    globs = rt.get("env_pass", ())
    literal = {g for g in globs if "*" not in g and "?" not in g}
    patterns = [g for g in globs if g not in literal]
    env = {}
    for k, v in environ.items():
        if k in literal or (patterns and any(glob_match(g, k) for g in patterns)):
            env[k] = v
    for k, v in cache_env or ():
        env[k] = v
    for k, v in rt.get("env_set", ()):
        env[k] = v
    return env


def find_program(name: str, env: dict) -> bool:
    """Whether a shell would find ``name`` (no slash) on the command's PATH, on the host.
    Only used to answer 127 early; a program found here may still be hidden inside."""
    for d in (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":"):
        p = (d or ".") + "/" + name
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return True
    return False


# ------------------------------------------------------------------ running

def _write_all(fd: int, data: bytes) -> bool:
    while data:
        try:
            n = os.write(fd, data)
        except OSError:
            return False  # stderr went away: keep draining so the command is not blocked
        data = data[n:]
    return True


def _close_fds_except(keep) -> None:
    """Close every descriptor from 3 up except ``keep``: one the caller left open (a
    socket, a secret file) must not reach the sandbox."""
    keep = sorted(k for k in keep if k > 2)
    lo = 3
    for k in keep:
        if k > lo:
            os.closerange(lo, k)
        lo = k + 1
    os.closerange(lo, 1 << 20)


def _ignore_signal(_signum, _frame) -> None:
    return None


def _relay_chunks(pid: int, err_r: int, wake_r: int):
    """Yield what arrives on ``err_r`` (bytes) and, once, the child's wait status (int).

    After the child has ended, only what is already in the pipe is taken (non-blocking):
    a background process of the command that keeps stderr open does not keep sbxc waiting.
    """
    import select

    while True:
        ready = select.select([err_r, wake_r], [], [])[0]
        if err_r in ready:
            chunk = os.read(err_r, 65536)
            if not chunk:
                return  # every writer is gone; the caller waits for the status
            yield chunk
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                os.set_blocking(err_r, False)
                try:
                    while True:
                        chunk = os.read(err_r, 65536)
                        if not chunk:
                            break
                        yield chunk
                except BlockingIOError:
                    pass
                yield status
                return


def run(spec: LaunchSpec, network_off: bool, state=None) -> int:
    """Fork, exec ``spec.argv``, relay stderr when it is not a terminal, wait, clean up.
    ``state`` (a ``RunState``) learns that the command's process was started."""
    import _signal

    interpose = not os.isatty(2)
    err_r = err_w = -1
    if interpose:
        err_r, err_w = os.pipe()  # both O_CLOEXEC; err_w becomes fd 2 in the child
    # Reports from the child between fork and exec (child_setup refusal, exec errno).
    rep_r, rep_w = os.pipe()

    child = [0]

    def forward(signum, _frame):
        if child[0] <= 0:
            return
        group = None
        if spec.signal_target is not None:
            try:
                group = spec.signal_target()
            except OSError:
                group = None
        try:
            if group:
                os.killpg(group, signum)
            else:
                os.kill(child[0], signum)
        except (ProcessLookupError, PermissionError):
            pass

    old = {}
    for name in _FORWARD:
        num = getattr(_signal, name)
        old[num] = _signal.signal(num, forward)
    # SIGCHLD wakes the relay loop (through the wakeup descriptor), so sbxc returns when
    # the command ends even if something it started in the background keeps stderr open.
    wake_r = wake_w = -1
    old_wakeup = None
    if interpose:
        wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        old[_signal.SIGCHLD] = _signal.signal(_signal.SIGCHLD, _ignore_signal)
        old_wakeup = _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        pid = os.fork()
        if pid == 0:
            _child(spec, err_w, rep_w)  # never returns
        child[0] = pid
        if state is not None:
            state.started = True  # from here on, no message may say the command did not run
        os.close(rep_w)
        if err_w >= 0:
            os.close(err_w)
        report = b""
        while True:
            chunk = os.read(rep_r, 4096)
            if not chunk:
                break
            report += chunk
        os.close(rep_r)

        first = b""
        matched = False
        status = None
        if interpose:
            held = []
            started = spec.started is None
            tail = b""
            scan = network_off
            for chunk in _relay_chunks(pid, err_r, wake_r):
                if isinstance(chunk, int):
                    status = chunk  # the child ended (its wait status)
                    continue
                if not started:
                    if spec.started():
                        started = True
                        for h in held:
                            _write_all(2, h)
                        held = []
                    else:
                        held.append(chunk)
                        continue
                if len(first) < 256:
                    first += chunk[: 256 - len(first)]
                _write_all(2, chunk)
                if scan:
                    low = tail + chunk.lower()
                    for p in NETWORK_PATTERNS:
                        if p in low:
                            matched = True
                            scan = False
                            break
                    tail = low[-_OVERLAP:]
            os.close(err_r)
            early = b"".join(held)
        else:
            early = b""
        while status is None:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = 0
        child[0] = 0
        rc = os.waitstatus_to_exitcode(status)
        if rc < 0:
            rc = 128 - rc  # died of signal N: report 128+N as a shell does

        if report:
            kind, _, text = report.decode("utf-8", "replace").partition(":")
            if kind == "refused":
                cause, _, fix = text.partition("\x00")
                sys.stderr.write(Refusal(cause, fix).line() + "\n")
                return REFUSED
            if kind == "exec":
                errno_, _, what = text.partition(":")
                if spec.exec_is_command:
                    code = 127 if errno_ == "2" else 126
                    sys.stderr.write(f"sbxc: {one_line(what)}: {'command not found' if code == 127 else 'cannot execute'}\n")
                    return code
                sys.stderr.write(Refusal(f"could not start {what} (errno {errno_})",
                                         "check the backend is installed (sbxc doctor)").line() + "\n")
                return REFUSED
        if spec.setup_failed is not None:
            refusal = spec.setup_failed(rc, early.decode("utf-8", "replace"))
            if refusal is not None:
                sys.stderr.write(refusal.line() + "\n")
                return REFUSED
        if early:
            _write_all(2, early)  # the runner judged it the command's own output
        if spec.command_status is not None:
            rc = spec.command_status(rc, first)
        if matched and rc != 0:
            _write_all(2, NETWORK_HINT.encode())
        return rc
    finally:
        if old_wakeup is not None:
            _signal.set_wakeup_fd(old_wakeup)
        for num, h in old.items():
            _signal.signal(num, h)
        for fd in (wake_r, wake_w):
            if fd >= 0:
                os.close(fd)
        if spec.after_exit is not None:
            try:
                spec.after_exit()
            except Exception as e:
                sys.stderr.write(f"sbxc: warning: ending the command's processes failed: {one_line(str(e))}\n")
        for fn in reversed(spec.cleanups):
            try:
                fn()
            except Exception as e:  # a failed cleanup is reported, never hidden
                sys.stderr.write(f"sbxc: warning: cleanup failed: {one_line(str(e))}\n")


def _child(spec: LaunchSpec, err_w: int, rep_w: int) -> None:
    """In the forked child: stderr into the relay, close stray descriptors, set up, exec."""
    code = REFUSED
    try:
        import _signal

        # Python ignores SIGPIPE and SIGXFSZ for itself; an ignored signal stays ignored
        # across exec, so `yes | head` inside would see EPIPE instead of dying as in a shell.
        for name in ("SIGPIPE", "SIGXFSZ"):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
        if spec.own_pgrp:
            os.setpgid(0, 0)
        if err_w >= 0:
            os.dup2(err_w, 2)  # dup2 clears O_CLOEXEC on fd 2
        for fd in spec.pass_fds:
            os.set_inheritable(fd, True)
        _close_fds_except(tuple(spec.pass_fds) + (rep_w,))
        if spec.child_setup is not None:
            spec.child_setup()
        try:
            os.execve(spec.argv[0], spec.argv, spec.env)
        except OSError as e:
            os.write(rep_w, f"exec:{e.errno}:{spec.argv[0]}".encode("utf-8", "replace"))
            code = 127 if e.errno == 2 else 126
    except Refusal as r:
        os.write(rep_w, f"refused:{r.cause}\x00{r.fix}".encode("utf-8", "replace"))
    except BaseException as e:  # anything else before the exec is a refusal, not a crash
        try:
            os.write(rep_w, f"refused:could not set up the sandbox ({e!r})\x00please report this".encode("utf-8", "replace"))
        except BaseException:
            pass
    os._exit(code)


# ------------------------------------------------------------------ the entry point

def access_at(checks, path: str) -> str:
    """The access the deepest rule containing ``path`` gives (``none`` when none does)."""
    best, depth = "none", -1
    for rpath, _kind, access in checks:
        inside = path == rpath or path.startswith(rpath.rstrip("/") + "/")
        d = 0 if rpath == "/" else rpath.count("/")
        if inside and d > depth:
            best, depth = access, d
    return best


_PLAN_FIX = "keep plan files outside anything sandboxed commands write (e.g. in a folder of your own outside the project)"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_plan_location(real: str, cwd: str) -> None:
    """Refuse a ``--plan`` file (``real``: its resolved path) that someone other than the
    caller, or a sandboxed command, could have written: it must be a regular file owned by
    the caller or root and not writable by group or others; every folder on the way owned
    by the caller or root and not writable by group or others, unless sticky (then the next
    step must be the caller's or root's, which the sticky bit keeps others from replacing);
    and it must not lie in the current folder's tree, where the commands run and usually
    write."""
    uid = os.getuid()
    trusted = (0, uid)
    try:
        st = os.stat(real)
    except OSError as e:
        raise Refusal(f"cannot read the plan {one_line(real, 200)} ({e.strerror})",
                      "check the path; make it with sbxc compile -o PLAN") from None
    if (st.st_mode & 0o170000) != 0o100000:
        raise Refusal(f"{one_line(real, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
    if st.st_uid not in trusted or st.st_mode & 0o022:
        who = f"owned by uid {st.st_uid}" if st.st_uid not in trusted else f"writable by others (mode {st.st_mode & 0o7777:04o})"
        raise Refusal(f"the plan {one_line(real, 200)} is {who}, so someone else could have rewritten it",
                      f"chmod go-w it and own it yourself; {_PLAN_FIX}")
    if _inside(real, cwd):
        raise Refusal(f"the plan {one_line(real, 200)} lies in the current folder's tree, where sandboxed commands "
                      "run, so one could have rewritten it", _PLAN_FIX)
    default_root = f"/var/tmp/sbxc-{uid}"  # as sbxc.cache.default_root (not imported: hot path)
    if _inside(real, default_root):
        raise Refusal(f"the plan {one_line(real, 200)} lies under the cache root {default_root}, whose project "
                      "folders sandboxed commands write", _PLAN_FIX)
    # Every folder on the way is owned by the caller or root (so are the file and the
    # next folder after a sticky one): in a sticky shared folder (/tmp) no one else can
    # then rename our entries away and put their own in their place.
    folder = "/"
    for part in [""] + real.split("/")[1:-1]:
        folder = folder.rstrip("/") + "/" + part if part else folder
        try:
            dst = os.stat(folder)
        except OSError as e:
            raise Refusal(f"cannot check {one_line(folder, 200)} on the way to the plan ({e.strerror})", _PLAN_FIX) from None
        if dst.st_uid not in trusted:
            fix = _PLAN_FIX
            from .cachedir import nested_overflow_uid  # error path only

            if dst.st_uid == nested_overflow_uid():
                # Owners outside this user namespace all show as the overflow uid: root
                # and any other user alike, so sbxc cannot tell that no one else writes it.
                fix = "run sbxc outside this user namespace, or use --policy instead of --plan"
            raise Refusal(f"{one_line(folder, 200)} (on the way to the plan) is owned by uid {dst.st_uid}", fix)
        if dst.st_mode & 0o022 and not dst.st_mode & 0o1000:
            raise Refusal(f"{one_line(folder, 200)} (on the way to the plan) is writable by others and not sticky",
                          _PLAN_FIX)


def _load_plan(a: Args, environ, cwd: str, warn) -> dict:
    from . import plancache

    if a.plan is not None:
        # A plan the sandbox can rewrite is a plan the previous command chose: it could
        # have granted itself anything for this run. Its contents cannot vouch for that
        # (a rewritten plan lists whatever suits it), so its place is checked first, from
        # the filesystem alone; the plan's own rules are a second opinion below.
        real = os.path.realpath(os.path.join(cwd, a.plan))
        check_plan_location(real, cwd)
        pf = plancache.load_planfile(real)
        project = (pf.get("runtime") or {}).get("project") or ""
        if isinstance(project, str) and project.startswith("/") and _inside(real, os.path.realpath(project)):
            raise Refusal(f"the plan {one_line(real, 200)} lies in its own project {one_line(project, 200)}, where "
                          "sandboxed commands usually write, so one could have rewritten it", _PLAN_FIX)
        cache_root = ((pf.get("runtime") or {}).get("cache") or {}).get("root") or ""
        if isinstance(cache_root, str) and cache_root.startswith("/") and _inside(real, os.path.realpath(cache_root)):
            raise Refusal(f"the plan {one_line(real, 200)} lies under its own cache root {one_line(cache_root, 200)}, "
                          "whose project folders sandboxed commands write", _PLAN_FIX)
        checks = (pf.get("runtime") or {}).get("checks") or ()
        if access_at(checks, real) == "write":
            raise Refusal(f"the plan {one_line(real, 200)} lies where this plan lets commands write, so a "
                          "sandboxed command could have rewritten it",
                          "keep plan files outside the folders the policy makes writable")
        if a.backend not in (None, "auto") and a.backend != pf.get("backend"):
            raise Refusal(f"the plan is for {pf.get('backend')}, --backend asks for {a.backend}",
                          "recompile with --backend, or drop the flag")
        net = pf.get("runtime", {}).get("network")
        if a.network is not None and a.network != ("on" if net == "on" else "off"):
            raise Refusal(f"--network={'true' if a.network == 'on' else 'false'} differs from the plan (network {net})",
                          "recompile the plan with that setting, or use --policy")
        return pf
    return plancache.plan_for_policy(a.policy, a.backend, a.network, environ, cwd, warn)


def exec_entry(argv) -> int:
    """``sbxc exec`` as a process: ``exec_main``, then leave without the interpreter's
    teardown (module and object clean-up costs ~3 ms here and has nothing left to do: the
    command has ended, sbxc's cleanups ran, and no other code is waiting at exit)."""
    rc = exec_main(argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(rc)


def _fill_std_fds() -> None:
    """A caller may start sbxc with stdin, stdout or stderr closed. The descriptors sbxc
    opens would then take those numbers and the command would find a pipe of sbxc's as
    its stdout. /dev/null takes their place instead."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open("/dev/null", os.O_RDWR)
            if got != fd:
                os.dup2(got, fd)  # dup2 makes fd inheritable
                os.close(got)
            else:
                os.set_inheritable(fd, True)  # os.open's descriptors are close-on-exec


def exec_main(argv) -> int:
    environ = os.environ
    _fill_std_fds()
    state = RunState()
    try:
        try:
            a = parse_args(list(argv))
        except HelpAsked:
            sys.stdout.write(USAGE + "\n")
            return 0
        try:
            cwd = os.getcwd()
        except OSError:
            raise Refusal("the current folder is gone", "cd to an existing folder") from None
        warnings = []
        warn = warnings.append
        pf = _load_plan(a, environ, cwd, warn)
        for w in warnings:
            sys.stderr.write(one_line(w) + "\n")
        # Policy files usually lie in the project, which the command may write: watch
        # them, so that a command that rewrote, planted or removed a policy (to loosen the
        # next run) is named after it ends and that policy refused until accepted. Watched:
        # the plan's own sources (--policy or discovery) and every discovery candidate
        # from here up (also for --plan: its command may plant one for a later run).
        # A plan from the plan cache was re-checked against the filesystem just now (or
        # compiled just now): only a --plan file still needs it.
        return launch(pf, a.cmd, environ, cwd, watch=policy_watch(pf.get("sources") if a.plan is None else (), cwd),
                      paths_checked=a.plan is None, state=state)
    except Refusal as r:
        if state.started:
            # Only a Refusal from before the fork reaches here once started is set (none
            # is raised after it); say so truthfully all the same.
            sys.stderr.write(_after_start_line(f"{r.cause}", state) + "\n")
            return state.status if state.status is not None else REFUSED
        sys.stderr.write(r.line() + "\n")
        return REFUSED
    except BaseException as e:
        if state.started:
            # The command was started: saying "before the command started" would be false,
            # and 125 would pass for sbxc's refusal. The run's record stays (launch never
            # cleared it), so the next run refuses what this one could have written.
            try:
                sys.stderr.write(_after_start_line(f"{type(e).__name__}: {e}", state) + "\n")
            except BaseException:
                pass
            return state.status if state.status is not None else REFUSED
        if not isinstance(e, Exception):
            raise
        # A bug or a malformed plan: still one line and 125, never a traceback with
        # status 1 that could pass for the command's own failure.
        sys.stderr.write(Refusal(f"internal error before the command started ({type(e).__name__}: {e})",
                                 "check the plan file (recompile it); please report this").line() + "\n")
        return REFUSED


class RunState:
    """What ``exec_main`` must know to report a failure truthfully: whether the command's
    process was started (forked), and its status once known."""

    __slots__ = ("started", "status")

    def __init__(self):
        self.started = False
        self.status = None


POST_RUN_FIX = ("review the files that command could write (the next sbxc exec refuses the policy files among "
                "them until you accept them with 'sbxc compile --check PATH')")


def _after_start_line(what: str, state) -> str:
    status = "its exit status is unknown" if state.status is None else f"it exited with status {state.status}"
    return (f"sbxc: warning: the command ran ({status}), but sbxc's checks after it did not complete "
            f"({one_line(what, 300)}); {POST_RUN_FIX}")


def policy_watch(sources, cwd: str) -> list:
    """(path, state) pairs to compare after the run: the plan's absolute sources with the
    sha256 the plan was built from (just verified by the plan cache or the compiler), and
    every discovery candidate from ``cwd`` up with its state now ("" missing). Most
    candidates do not exist: one failed open each."""
    from .plancache import candidates, policy_state

    watch = [(p, d) for p, d in sources or () if isinstance(p, str) and p.startswith("/")]
    seen = {p for p, _d in watch}
    for cand in candidates(cwd):
        if cand not in seen:
            watch.append((cand, policy_state(cand)))
    return watch


def note_policy_changes(watch) -> None:
    """After the command (and every process of its sandbox) has ended: for each watched
    policy file that appeared, changed or vanished, one warning line, and a taint entry in
    the plans folder so that the next ``exec`` refuses it until it is accepted. Returns
    (real path, state) of every watched file as read now, for the run journal."""
    from .plancache import policy_state, record_taints

    changed = []
    after = []
    for path, before in watch or ():
        now = policy_state(path)  # bounded: an oversized file is not hashed
        after.append((os.path.realpath(path), now))
        if now != before:
            changed.append((path, before, now))
    if not changed:
        return after
    # Recorded first, printed after: an interrupt while printing must not lose the taints.
    recorded = record_taints([(path, now) for path, _before, now in changed])
    for path, before, now in changed:
        shown = one_line(path, 300)
        what = "appeared" if not before else ("was removed" if not now else "changed")
        sys.stderr.write(f"sbxc: warning: the policy file {shown} {what} while the command ran (a sandboxed command "
                         f"may have loosened the next run); sbxc refuses it until you review it and run "
                         f"'sbxc compile --check{'' if not now else ' ' + shown}'\n")
    if not recorded:
        sys.stderr.write("sbxc: warning: these changes could not be recorded (the plan cache folder is unusable or "
                         "its disk is full), so the next run cannot refuse them; review them before running sbxc again\n")
    return after


def launch(pf: dict, cmd: list, environ, cwd: str, watch=(), paths_checked: bool = False, state=None) -> int:
    """Run ``cmd`` under the loaded plan file ``pf``; 125 on any refusal. ``watch``: (policy
    file, state) pairs to check for changes once the command has ended (``policy_watch``).
    ``paths_checked``: the plan's paths were just re-checked (the plan cache does that
    before serving a plan), so the check is not done twice on the hot path. ``state``: a
    ``RunState`` that learns when the command was started and its status."""
    state = state if state is not None else RunState()
    try:
        if not isinstance(pf, dict) or pf.get("format") != "sbxc-plan/1":
            raise Refusal("the plan file has an unknown format", "recompile it with this sbxc (sbxc compile -o PLAN)")
        backend = pf.get("backend")
        if backend not in RUNNERS:
            raise Refusal(f"the plan names an unknown backend {one_line(str(backend), 40)!r}", "recompile the plan")
        if backend == "sandbox-exec" and sys.platform != "darwin":
            raise Refusal("the sandbox-exec backend needs macOS", "use --backend bwrap or --backend landlock on Linux")
        why = host_mismatch(pf.get("host") or {}, environ)
        if why:
            raise Refusal(why, "recompile the plan on this host (sbxc compile -o PLAN), or use --policy")
        rt = pf["runtime"]
        if not paths_checked:
            recheck_paths(rt.get("checks", ()))
        try:
            runner = __import__(RUNNERS[backend], fromlist=["prepare"])
        except ImportError:
            raise Refusal(f"the {backend} runtime is not part of this sbxc", "use another backend (sbxc doctor)") from None

        from .cachedir import prepare as prepare_cache

        cache = prepare_cache(rt.get("cache") or {}, project=rt.get("project", ""))
        try:
            from .owncode import check as check_own_code

            check_own_code(rt.get("checks", ()), cache.dir)
            if cache.warning:
                sys.stderr.write(cache.warning + "\n")
            env = build_env(rt, environ, cache.env)
            if "/" not in cmd[0] and not find_program(cmd[0], env):
                sys.stderr.write(f"sbxc: {one_line(cmd[0], 200)}: command not found\n")
                return 127
            from . import journal, plancache

            # Before anything of the command can run: a record, in the plans folder, that a
            # run which can write these folders is in progress. Only the completed post-run
            # checks remove it; whatever stops them (sbxc killed, its limits lowered by the
            # command, a bug) leaves it, and later runs refuse what this one could write.
            record = journal.begin(journal.writable_roots(pf, cache.dir))
            try:
                ctx = Context(project=rt.get("project", ""), cwd=cwd, uid=os.getuid(), is_root=os.geteuid() == 0,
                              network=rt.get("network", "on"), cache=cache, plans_dir=plancache.plans_dir(),
                              warn=lambda line: sys.stderr.write(one_line(line) + "\n"), environ=environ)
                spec = runner.prepare(pf, list(cmd), env, ctx)
            except BaseException:
                journal.abandon(record)
                raise
            # The hint is for a network that is off: `network: false`, or per-port rules
            # on bwrap (narrowed to no network). Under Landlock the listed ports stay open.
            net_off = ctx.network == "off" or (ctx.network == "rules" and backend == "bwrap")
            status = run(spec, net_off, state)
            state.status = status
            import time

            # The sandbox's processes are gone (bwrap's PID namespace died with it; on
            # Landlock the reaper and after_exit ended them, checked again below).
            end = time.time_ns()
            # Only now: every process of the sandbox is gone (a later write would escape the
            # comparison). Keep this after any post-exit clean-up of the sandbox's processes.
            after_run(watch, record, status, end)
            return status
        finally:
            cache.cleanup()
    except Refusal as r:
        if state.started:
            raise  # exec_main words it: the command ran
        sys.stderr.write(r.line() + "\n")
        return REFUSED


def _processes_left() -> int:
    """Children of sbxc still running once the sandbox's own process was waited for: on
    Landlock sbxc is a child subreaper, so a process of the command that its reaper could
    not end comes here. Zombies are reaped on the way."""
    left = 0
    for _ in range(1 << 16):
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return left
        if pid == 0:
            return 1
    return left


def after_run(watch, record, status: int, end: int) -> None:
    """The post-run checks, then the run's record is cleared. Any failure here (also an
    interrupt, or MemoryError after the command lowered sbxc's limits) leaves the record in
    place and prints one line saying that the command ran and what could not be checked;
    the command's status stands."""
    from . import journal

    step = "checking the policy files"
    try:
        after = note_policy_changes(watch) or ()
        step = "checking that the command's processes are gone"
        if _processes_left():
            raise RuntimeError("processes the command started are still running")
        step = "recording the run's end"
        journal.finish(record, end, after)
        return
    except BaseException as e:
        try:
            sys.stderr.write(f"sbxc: warning: the command ran (exit status {status}), but sbxc could not complete "
                             f"its checks after it ({step}: {one_line(type(e).__name__ + ': ' + str(e), 200)}); "
                             f"{POST_RUN_FIX}\n")
        except BaseException:
            pass
