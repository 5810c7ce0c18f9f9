"""``sbxc exec [--policy P | --plan F] [--backend B] [--network[=true|false]] [--format json [--status-fd N]] -- CMD...``.

The command line, the exit status and the words of a failure; the run itself is the
runtime's (``sbxc.runtime.launch.run_exec``). On a plan-cache miss the runtime calls the
compile function handed in here, which imports the compiler only then
(``sbxc.commands.build.compile_for_exec``).

Hot path: a cached plan loads this module, the runtime and nothing of the compiler. No
``argparse`` (milliseconds of imports on every run): the command line is read by
``_args``, the one grammar every command shares, which imports nothing heavy.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)
import sys

from ..runtime.errors import REFUSED, Refusal


class Args:
    __slots__ = ("policy", "plan", "backend", "network", "session", "ephemeral", "cmd", "format", "status_fd")

    def __init__(self, parsed: dict):
        self.policy = parsed["policy"]
        self.plan = parsed["plan"]
        self.backend = parsed["backend"]
        self.network = parsed["network"]  # None: the plan decides; "on" / "off": the flag wins
        self.session = parsed["session"]
        self.ephemeral = bool(parsed["ephemeral"])
        self.cmd = parsed["cmd"]
        self.format = parsed["format"] or "text"
        self.status_fd = parsed["status_fd"]


# What the grammar gives for a command line with no option before ``--`` (tested).
_NO_OPTIONS = {"policy": None, "plan": None, "backend": None, "network": None, "session": None, "ephemeral": None,
               "format": None, "status_fd": None}


def parse_args(argv: list):
    """exec's command line by the one grammar (``_grammar.EXEC``); None when help was asked
    for. A usage error is a Refusal: exit 125, since 2 could be the command's own status
    (docs/decisions.md). ``exec -- CMD...``, the usual form, has nothing before ``--`` for
    the grammar to read: its result is known without building exec's option table."""
    if len(argv) > 1 and argv[0] == "--":
        return Args(dict(_NO_OPTIONS, cmd=argv[1:]))
    from . import _grammar as _args  # exec needs only the grammar and its own entry (no other table)

    try:
        a = Args(_args.parse(_args.EXEC, argv))
    except _args.HelpAsked:
        return None
    except _args.Usage as e:
        raise Refusal(f"exec: {e}", "see sbxc help exec") from None
    if not a.cmd:
        took = [f"{w} {v}" for w, v in zip(argv, argv[1:]) if w == "--network" and v.lower() in _args.NETWORK.choices]
        raise Refusal("exec: no command given" + (f" ({took[0]!r}: that word is the value of --network)" if took else ""),
                      "put the command after --: sbxc exec [OPTIONS] -- CMD...")
    if a.status_fd is not None and a.format != "json":
        raise Refusal("exec: --status-fd needs --format json", "add --format json, or leave out --status-fd")
    return a


def compile_on_miss(policy, backend, network, environ, cwd: str, gate=None) -> dict:
    """What the plan cache calls on a miss. The compiler is imported here, on a miss
    only: a cached run never loads YAML, Lark or libseccomp."""
    import gc

    gc.enable()  # the compiler builds many short-lived cycles (parse trees); see exec_entry
    from .build import compile_for_exec

    return compile_for_exec(policy, backend, network, environ, cwd, gate)


def _die_of_sigint() -> None:
    import _signal

    try:
        sys.stderr.flush()
    except Exception:
        pass
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})
    os.kill(os.getpid(), _signal.SIGINT)
    os._exit(130)  # not reached


def exec_entry(argv) -> int:
    """``sbxc exec`` as a process: ``exec_main``, then leave without the interpreter's
    teardown (module and object clean-up costs ~3 ms here and has nothing left to do: the
    command has ended, sbxc's cleanups ran, and no other code is waiting at exit).

    The cyclic garbage collector is off until the command starts (``launch`` turns it on
    again, and so does a plan-cache miss before compiling): the imports and the plan
    build few cycles but enough objects to trigger a dozen collections, ~0.5 ms of every
    run for nothing to free."""
    import gc

    gc.disable()
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


def exec_main(argv, compile=compile_on_miss) -> int:
    status = []
    rc = _exec_main(argv, compile, status)
    if status:
        status[0].finish(rc)  # --format json: after every line sbxc wrote
    return rc


def _exec_main(argv, compile, status: list) -> int:
    from ..runtime.launch import after_start_line, run_exec
    from ..runtime.spec import RunState

    environ = os.environ
    _fill_std_fds()
    state = RunState()
    try:
        a = parse_args(list(argv))
        if a is None:
            from . import _grammar
            from ._help import command_help

            sys.stdout.write(command_help(_grammar.EXEC))
            return 0
        if a.format == "json":
            from ..runtime.runstatus import Recorder

            status.append(Recorder(a.status_fd, state))
        try:
            cwd = os.getcwd()
        except OSError:
            raise Refusal("the current folder is gone", "cd to an existing folder") from None
        if a.session is not None or a.ephemeral:
            from ..runtime.session_exec import run as run_in_session

            return run_in_session(a.session, a.ephemeral, a.policy, a.plan, a.backend, a.network, a.cmd, environ,
                                  cwd, compile, state)
        return run_exec(a.policy, a.plan, a.backend, a.network, a.cmd, environ, cwd, compile, state)
    except Refusal as r:
        if state.started:
            # Only a Refusal from before the fork reaches here once started is set (none
            # is raised after it); say so truthfully all the same.
            sys.stderr.write(after_start_line(f"{r.cause}", state) + "\n")
            return state.status if state.status is not None else REFUSED
        sys.stderr.write(r.line() + "\n")
        return REFUSED
    except BaseException as e:
        if state.started:
            # The command was started: saying "before the command started" would be false,
            # and 125 would pass for sbxc's refusal. The run's record stays (launch never
            # cleared it), so the next run refuses what this one could have written.
            try:
                sys.stderr.write(after_start_line(f"{type(e).__name__}: {e}", state) + "\n")
            except BaseException:
                pass
            return state.status if state.status is not None else REFUSED
        if isinstance(e, KeyboardInterrupt):
            # A Ctrl-C before the command started (once the core has its handlers, it
            # forwards one): nothing ran, and the cleanups on the way out have run. sbxc
            # ends as SIGINT's default action would end it, as the command would have.
            _die_of_sigint()
        if not isinstance(e, Exception):
            raise
        # A bug or a malformed plan: still one line and 125, never a traceback with
        # status 1 that could pass for the command's own failure.
        sys.stderr.write(Refusal(f"internal error before the command started ({type(e).__name__}: {e})",
                                 "check the plan file (recompile it); please report this").line() + "\n")
        return REFUSED
