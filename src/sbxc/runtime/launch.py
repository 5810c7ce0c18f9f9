"""``sbxc exec``: the one runtime core. Loads a plan, asks whether it still holds on this
host, prepares the cache and the environment, hands off to a backend runner, supervises
the run, checks the policy files afterwards, passes the status on.

Where the parts are: the plan comes from the plan cache (``plancache``, compiled by the
function the ``exec`` command hands in on a miss) or a ``--plan`` file (``planload``);
``staleness`` says whether it holds; the runner protocol is ``spec``; the fork, the stderr
relay, signal forwarding and the wait are ``supervise``; the post-run watch is
``planstore`` (with the taints) and the run's record ``journal``.

Hot path: this module imports only builtins (``os``, ``_signal``, ``marshal`` via the
plan cache). No ``re``, ``json`` (except for ``--plan`` on a marshal-cache miss),
``argparse``, ``subprocess``, ``dataclasses``, ``fnmatch``: each costs milliseconds on
every run (see bench/README.md).
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from ..layout import PLAN_FORMAT
from .errors import REFUSED, NotStartable, PlanOutdated, Refusal, one_line
from .spec import Context, Feedback, RunState
from .staleness import HostNow, recheck_paths, why_stale

# backend name (sbxc.layout.BACKENDS) -> its runner
SESSION_RUNNERS = ("bwrap", "landlock", "oci")
"""The runners that put a session's workspace in the project's place."""

RUNNERS = {
    "bwrap": "sbxc.runtime.bwrap_run",
    "landlock": "sbxc.runtime.landlock_run",
    "sandbox-exec": "sbxc.runtime.sbpl_run",
    "oci": "sbxc.runtime.oci_run",
}


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
    # Network off: the plan's settings that make tools fail at once instead of retrying
    # (planfile.OFFLINE_ENV); a value the policy passes or sets wins.
    for k, v in rt.get("offline_env", ()):
        env.setdefault(k, v)
    return env


def url_passwords(env: dict, set_names) -> list:
    """The names of passed variables (not ``env.set`` ones) whose value holds a URL with a
    password (``scheme://user:secret@host``, in any of its space-separated parts, as
    PIP_EXTRA_INDEX_URL lists them): the command can read it. No value is returned."""
    out = []
    for k, v in env.items():
        if "://" not in v or "@" not in v or k in set_names:
            continue
        for part in v.split():
            at = part.find("://")
            if at < 0:
                continue
            authority = part[at + 3:].split("/", 1)[0]
            if "@" in authority and ":" in authority.rpartition("@")[0]:
                out.append(k)
                break
    return sorted(out)


def load_plan(policy, plan, backend, network, now: HostNow, cwd: str, compile, later=None) -> dict:
    """The plan file for this run: ``plan`` (a --plan file, checked where it lies) or the
    plan cache's for ``policy`` (compiled by ``compile`` on a miss). ``later``: see
    ``plancache.plan_for_policy``."""
    if plan is not None:
        from .planload import load_plan_file

        return load_plan_file(plan, backend, network, cwd)
    from . import plancache

    return plancache.plan_for_policy(policy, backend, network, now, cwd, compile, later)


def run_exec(policy, plan, backend, network, cmd: list, environ, cwd: str, compile, state) -> int:
    """``sbxc exec`` once its command line is read: the plan (``load_plan``), its warnings,
    the policy watch, then ``launch``. ``compile`` compiles a policy on a plan-cache miss
    (handed in by the ``exec`` command: the runtime never imports the compiler)."""
    from .planstore import policy_watch

    now = HostNow(environ)
    later = []
    pf = load_plan(policy, plan, backend, network, now, cwd, compile, later)
    # Policy files usually lie in the project, which the command may write: watch
    # them, so that a command that rewrote, planted or removed a policy (to loosen the
    # next run) is named after it ends and that policy refused until accepted. Watched:
    # the plan's own sources (--policy or discovery) and every discovery candidate
    # from here up (also for --plan: its command may plant one for a later run).
    # A plan from the plan cache was re-checked against the filesystem just now (or
    # compiled just now): only a --plan file still needs it.
    sources = pf.get("sources") if plan is None else ()
    try:
        return launch(pf, cmd, environ, cwd, watch=lambda: policy_watch(sources, cwd),
                      paths_checked=plan is None, state=state, now=now, later=later)
    except PlanOutdated:
        # The cached plan was made by other compiler code (found by its last checks;
        # nothing of the command ran): compiled anew, with every check made up front.
        now = HostNow(environ)
        pf = load_plan(policy, plan, backend, network, now, cwd, compile)
        sources = pf.get("sources") if plan is None else ()
        return launch(pf, cmd, environ, cwd, watch=lambda: policy_watch(sources, cwd),
                      paths_checked=plan is None, state=state, now=now)


POST_RUN_FIX = ("review the files that command could write (the next sbxc exec refuses the policy files among "
                "them until you accept them with 'sbxc compile --check PATH')")


def after_start_line(what: str, state) -> str:
    status = "its exit status is unknown" if state.status is None else f"it exited with status {state.status}"
    return (f"sbxc: warning: the command ran ({status}), but sbxc's checks after it did not complete "
            f"({one_line(what, 300)}); {POST_RUN_FIX}")


def launch(pf: dict, cmd: list, environ, cwd: str, watch=(), paths_checked: bool = False, state=None,
           now=None, workspace=None, later=()) -> int:
    """Run ``cmd`` under the loaded plan file ``pf``; 125 on any refusal. ``watch``: (policy
    file, state) pairs to check for changes once the command has ended (``policy_watch``).
    ``paths_checked``: the plan's paths were just re-checked (the plan cache does that
    before serving a plan), so the check is not done twice on the hot path. ``state``: a
    ``RunState`` that learns when the command was started and its status. ``watch`` may
    also be a callable returning those pairs: it is then called with the run's last
    checks, right before the command can start. ``now``: the
    run's ``staleness.HostNow`` (the facts the plan cache already read). ``workspace``: a
    ``spec.Workspace`` when the run is a session's (``runtime/session_exec``). ``later``:
    checks of the plan itself deferred to the run's last checks (``plancache``); one may
    raise ``PlanOutdated``, which goes on to the caller after the sandbox was ended."""
    state = state if state is not None else RunState()
    now = now if now is not None else HostNow(environ)
    pending = list(later)

    def settle():
        # The plan's deferred checks, now: before a refusal or a 127 that the plan itself
        # may have caused (a plan of other code, or stale, is compiled again instead).
        while pending:
            pending.pop(0)()

    try:
        if not isinstance(pf, dict) or pf.get("format") != PLAN_FORMAT:
            raise Refusal("the plan file has an unknown format", "recompile it with this sbxc (sbxc compile -o PLAN)")
        backend = pf.get("backend")
        if backend not in RUNNERS:
            raise Refusal(f"the plan names an unknown backend {one_line(str(backend), 40)!r}", "recompile the plan")
        if backend == "sandbox-exec" and sys.platform != "darwin":
            raise Refusal("the sandbox-exec backend needs macOS", "use --backend bwrap or --backend landlock on Linux")
        stale = why_stale(pf, now, paths=not paths_checked)
        if stale is not None:
            raise stale
        rt = pf["runtime"]
        points = (pf.get("lowered") or {}).get("host_points")
        if pending and points:
            # A cached plan's checks run beside the runner's set-up (bwrap's mounts): a
            # mount point under a writable rule that vanished (or changed) since the plan
            # was compiled would be made on the host before they could answer. So those
            # rules' checks come first; where one fails, all of them answer now, and a
            # plan that no longer holds is compiled again.
            points = set(points)
            try:
                recheck_paths([c for c in rt.get("checks", ()) if c[0] in points])
            except Refusal:
                settle()
        if workspace is not None:
            if backend not in SESSION_RUNNERS:
                # The runner would ignore the workspace and run in the host project.
                raise Refusal(f"session workspaces are not supported on the {backend} backend",
                              "run the session with --backend bwrap, landlock or oci")
            if rt.get("project") != workspace.project:
                raise Refusal(f"the session is of the project {workspace.project}, the policy's project is "
                              f"{rt.get('project')}", "run it with the session's policy (or from its project)")
            if cwd != workspace.project and not cwd.startswith(workspace.project.rstrip("/") + "/"):
                cwd = workspace.project  # a session's command starts in its workspace
        try:
            runner = __import__(RUNNERS[backend], fromlist=["prepare"])
        except ImportError:
            raise Refusal(f"the {backend} runtime is not part of this sbxc", "use another backend (sbxc doctor)") from None

        from .cachedir import prepare as prepare_cache

        cache = prepare_cache(rt.get("cache") or {}, project=rt.get("project", ""))
        try:
            env = build_env(rt, environ, cache.env)
            for name in url_passwords(env, {k for k, _ in rt.get("env_set", ())}):
                sys.stderr.write(f"sbxc: warning: {name} passes a URL with a password into the sandbox (env.pass), "
                                 "where the command can read it; give the tool its credentials another way, or "
                                 f"drop {name} from env.pass\n")
            from .probe import find_command

            look = env
            if workspace is not None:
                # What the session's command finds on its PATH is the workspace's copy
                # (where the runner shows the workspace at the project's path).
                from .session_mounts import lookup_env

                look = lookup_env(env, cwd, workspace, mounted=backend != "landlock")
            if "/" not in cmd[0] and not find_command(cmd[0], look):
                settle()  # the PATH came from the plan
                sys.stderr.write(f"sbxc: {one_line(cmd[0], 200)}: command not found\n")
                return 127
            from .planstore import plans_dir
            from .supervise import run

            proxy = None
            try:
                if "proxy" in rt:  # host rules: only then is the proxy imported
                    from .proxy_run import start_proxy

                    proxy = start_proxy(rt, backend, env)
                ctx = Context(project=rt.get("project", ""), cwd=cwd, uid=os.getuid(), is_root=os.geteuid() == 0,
                              network=rt.get("network", "on"), cache=cache, plans_dir=plans_dir(),
                              warn=lambda line: sys.stderr.write(one_line(line) + "\n"), environ=environ, host=now,
                              proxy=proxy, workspace=workspace)
                spec = runner.prepare(pf, list(cmd), env, ctx)
            except BaseException:
                if proxy is not None:
                    proxy.finish(cwd)
                raise
            record = [None]
            watched = [watch]

            def last_checks():
                # Called by the core before anything of the command can run; on bwrap
                # while bwrap sets the sandbox up (the command waits for the release,
                # see spec.LaunchSpec). First: the code sbxc runs from must be out of
                # the command's reach. Then a record, in the plans folder, that a run
                # which can write these folders is in progress. Only the completed
                # post-run checks remove it; whatever stops them (sbxc killed, its
                # limits lowered by the command, a bug) leaves it, and later runs refuse
                # what this one could write.
                settle()  # first: a plan that no longer holds would make every later step moot
                from . import hint, journal, runwarn  # noqa: F401 (hint and runwarn: for after the run)
                from .owncode import check as check_own_code

                check_own_code(rt.get("checks", ()), cache.dir)
                if cache.warning:
                    sys.stderr.write(cache.warning + "\n")
                if callable(watch):
                    watched[0] = watch()  # the policy files as they are before the command
                roots = journal.writable_roots(pf, cache.real_dir) + ([workspace.path] if workspace is not None else [])
                record[0] = journal.begin(roots)

            # The hint is for a network that is off: `network: false`, or per-port rules
            # on bwrap and OCI (narrowed to no network). Under Landlock the listed ports stay open.
            net_off = ctx.network == "off" or (ctx.network == "rules" and backend in ("bwrap", "oci"))
            import gc

            # Off since start-up (``sbxc exec`` leaves it off there); the run may last hours
            # with sbxc's own threads (the proxy) allocating all along.
            gc.enable()
            feedback = Feedback(net_off, backend == "landlock", rt.get("checks"), pf, cwd)
            try:
                status = run(spec, net_off, state, feedback, before_release=last_checks)
            except BaseException:
                if record[0] is not None and not state.started:
                    from . import journal

                    journal.abandon(record[0])  # the child was ended before the release
                raise
            finally:
                if proxy is not None:
                    proxy.finish(cwd)  # the refused hosts, one line each, after the command's output
            state.status = status
            import time

            # The sandbox's processes are gone (bwrap's PID namespace died with it; on
            # Landlock the reaper and after_exit ended them, checked again below).
            end = time.time_ns()
            # Only now: every process of the sandbox is gone (a later write would escape the
            # comparison). Keep this after any post-exit clean-up of the sandbox's processes.
            if record[0] is None:
                return status  # the last checks never ran (bwrap could not be started): nothing of the command did
            after_run(watched[0], record[0], status, end)
            return status
        finally:
            cache.cleanup()
    except Refusal as r:
        if state.started:
            raise  # exec_main words it: the command ran
        settle()  # a refusal the plan caused, when it no longer holds: compiled again instead
        sys.stderr.write(r.line() + "\n")
        return REFUSED
    except NotStartable as n:
        settle()
        sys.stderr.write(n.line() + "\n")
        return n.code


def after_run(watch, record, status: int, end: int) -> None:
    """The post-run checks, then the run's record is cleared. Any failure here (also an
    interrupt, or MemoryError after the command lowered sbxc's limits) leaves the record in
    place and prints one line saying that the command ran and what could not be checked;
    the command's status stands."""
    from . import journal
    from .supervise import processes_left
    from .planstore import note_policy_changes

    step = "checking the policy files"
    try:
        after = note_policy_changes(watch) or ()
        step = "checking that the command's processes are gone"
        if processes_left():
            raise RuntimeError("processes the command started are still running")
        step = "recording the run's end"
        journal.finish(record, end, after)
        return
    except BaseException as e:
        try:
            from .supervise import own_line

            own_line(f"sbxc: warning: the command ran (exit status {status}), but sbxc could not complete "
                     f"its checks after it ({step}: {one_line(type(e).__name__ + ': ' + str(e), 200)}); "
                     f"{POST_RUN_FIX}\n")
        except BaseException:
            pass
