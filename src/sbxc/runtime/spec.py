"""The runner protocol: what the runtime core hands a backend's runner and what it gets back.

The runners import this module, never the core (``sbxc.runtime.launch``), which imports them.

Each backend has a module ``sbxc.runtime.<name>_run`` (``bwrap_run``, ``landlock_run``,
``sbpl_run``) with one function::

    prepare(planfile: dict, cmd: list[str], env: dict[str, str], ctx: Context) -> LaunchSpec

``planfile`` is the loaded plan (sbxc.planfile layout); ``cmd`` the command and its
arguments exactly as the user gave them; ``env`` the command's environment, already
filtered (env.pass globs, cache variables, env.set); ``ctx`` the run's facts (below).
It raises ``sbxc.runtime.errors.Refusal`` for anything that stops the run (exit 125).
It must not start any process; the core (``sbxc.runtime.launch``) forks once and execs
``spec.argv``.

``LaunchSpec`` carries:

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
- ``setup_failed``: ``None`` or ``(status, early_stderr: str) -> Refusal | NotStartable |
  None``, asked after the child ended: a Refusal when the sandbox failed before the
  command ran (125), a NotStartable when the sandbox found the command could not be
  executed (its 126/127, with sbxc's line; the sandbox's own words are dropped).
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
- ``own_session``: True to start the child in a session of its own (``setsid``, before
  ``child_setup``; ``own_pgrp`` then False): as with ``own_pgrp`` the terminal's Ctrl-C
  reaches sbxc only, and the caller's terminal is no controlling terminal of the child's,
  so a child that reads it is not stopped as a background job (SIGTTIN). runc copies
  its standard input to the command itself, in a goroutine that reads at once.
- ``signal_target``: ``None`` or a callable returning the process group that forwarded
  signals should go to (the command's, inside the sandbox), or ``None`` when not known
  yet; signals then go to the child process itself.
- ``launched``: ``None`` or ``(pid) -> None``, called once ``argv`` was exec'd (``pid``:
  the child's), before its stderr is relayed: bwrap waits on ``--block-fd`` until the
  runner has put the proxy's listener into its network namespace. It never raises; a
  failure it met is for ``setup_failed`` to report. Called before ``release``. It returns
  ``None`` (the core goes on waiting for that child), or, when it has waited for the child
  itself, the pid of the process the core waits for instead (OCI with host rules: the
  container's first process, sbxc's child once `runc create` exited), or 0 when there is
  none (the run ended before its command).
- ``deliver``: ``None`` or ``(signum, child_pid) -> None``, which then forwards each
  signal itself (OCI: the command is pid 1 of its PID namespace, see ``oci_run``).
- ``release``: ``None`` or a callable that lets the started child go on to the command,
  returning False when the child is already gone; ``release(False)`` makes it end
  without the command instead. With it, the core starts the child
  first and makes the run's last checks (``supervise.run``'s ``before_release``) while the
  child sets the sandbox up; after a failed check the child ends without reaching the
  command (bwrap: the seccomp program, which bwrap reads to end of file before the
  command, is written only by ``release``; OCI: runc's config.json, a FIFO it reads at
  its start, see ``oci_gate``).

``Context`` carries ``project``, ``cwd``, ``uid``, ``is_root``, ``network`` (``on``/``off``/
``rules``, after flags), ``cache`` (the cachedir ``CacheSetup`` or None), ``plans_dir``
(the plan cache folder that no sandbox may write; hide or deny it), ``warn(line)``,
``environ`` (the caller's environment: for finding the sandbox tool, never for the
command), ``host`` (the run's ``staleness.HostNow``: the trusted bwrap, the Landlock ABI,
read once; ``None`` outside the core, e.g. in a benchmark: the runner reads them then),
``proxy`` (the run's ``proxy_run.ProxyRun`` for a plan with host rules, else ``None``).
``workspace`` (``None``, or a ``Workspace``: the run is a session's, and the runner puts
its workspace in the project's place, ``runtime/session_mounts``).
docs/runtime.md has the same protocol as a table.
"""

def drain(fd: int, into: bytearray, limit: int, size: int = 65536) -> None:
    """Append to ``into`` what the non-blocking read end ``fd`` holds now, up to ``limit``
    bytes in all: a runner's own channel from its runtime (bwrap's status, runc's log),
    read when a decision needs it, also from a signal handler (so it never blocks)."""
    from ..fastos import os

    try:
        while len(into) < limit:
            chunk = os.read(fd, size)
            if not chunk:
                break
            into.extend(chunk)
    except BlockingIOError:
        pass


class LaunchSpec:
    __slots__ = ("argv", "env", "pass_fds", "child_setup", "exec_is_command", "started",
                 "setup_failed", "command_status", "cleanups", "own_pgrp", "own_session", "signal_target", "after_exit",
                 "deliver", "release", "launched")

    def __init__(self, argv, env, pass_fds=(), child_setup=None, exec_is_command=False,
                 started=None, setup_failed=None, command_status=None, cleanups=None,
                 own_pgrp=False, signal_target=None, after_exit=None, deliver=None, release=None,
                 launched=None, own_session=False):
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
        self.own_session = own_session
        self.signal_target = signal_target
        self.after_exit = after_exit
        self.deliver = deliver
        self.release = release
        self.launched = launched


class Context:
    __slots__ = ("project", "cwd", "uid", "is_root", "network", "cache", "plans_dir", "warn", "environ", "host",
                 "proxy", "workspace")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))


class RunState:
    """What ``exec_main`` must know to report a failure truthfully: whether the command's
    process was started (forked), and its status once known."""

    __slots__ = ("started", "status")

    def __init__(self):
        self.started = False
        self.status = None


class Workspace:
    """A session's workspace for one run: ``project`` (the real path it is a copy of) and
    ``path`` (the copy, in the sessions folder)."""

    __slots__ = ("project", "path")

    def __init__(self, project: str, path: str):
        self.project = project
        self.path = path


class Feedback:
    """What the core prints once the command ran (``supervise.run``'s ``feedback``): the
    plan's warnings (``runwarn.show_warnings`` for ``warn_plan`` run in ``cwd``, which
    prints them itself), then, after a failed run, the network hint when the plan turned
    the network off and the rule that refused a path (``hint``). ``checks``: the plan's
    ``runtime.checks`` (path, kind, access, span, written). Here, not in ``hint``, so that
    the core makes one before the start without importing ``hint`` and ``runwarn``: the
    run's last checks import them, while the sandbox is set up."""

    __slots__ = ("network_off", "landlock", "checks", "warn_plan", "cwd")

    def __init__(self, network_off: bool, landlock: bool, checks, warn_plan=None, cwd: str = ""):
        self.network_off = network_off
        self.landlock = landlock
        self.checks = checks or ()
        self.warn_plan = warn_plan
        self.cwd = cwd

    def __call__(self, rc: int, scan) -> str:
        if self.warn_plan is not None:
            try:
                from .runwarn import show_warnings

                show_warnings(self.warn_plan, self.cwd)
            except Exception:  # a warning that cannot be printed never changes the run's outcome
                pass
        if rc == 0 or scan is None:
            return ""
        from .hint import NETWORK_HINT, denial_line

        out = NETWORK_HINT if scan.network_hint() else ""
        if scan.denials:
            out += denial_line(scan, self.checks, self.landlock)
        return out
