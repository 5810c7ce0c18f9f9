"""``sbxc exec [--policy P | --plan F] [--backend B] [--network[=true|false]] -- CMD...``.

The command line, the exit status and the words of a failure; the run itself is the
runtime's (``sbxc.runtime.launch.run_exec``). On a plan-cache miss the runtime calls the
compile function handed in here, which imports the compiler only then
(``sbxc.commands.build.compile_for_exec``).

Hot path: a cached plan loads this module, the runtime and nothing of the compiler. No
``argparse`` (milliseconds of imports on every run): the grammar is small and parsed by
hand, with the same meaning as on the other commands.
"""
from __future__ import annotations

import os
import sys

from ..layout import BACKEND_CHOICES
from ..runtime.errors import REFUSED, Refusal, one_line

USAGE = ("usage: sbxc exec [--policy P | --plan F] [--backend B] [--network[=true|false]] "
         "[--session ID | --ephemeral] -- CMD...")


class HelpAsked(Exception):
    """``exec --help`` (before ``--``): print the usage and exit 0."""


class Args:
    __slots__ = ("policy", "plan", "backend", "network", "session", "ephemeral", "cmd")

    def __init__(self):
        self.policy = None
        self.plan = None
        self.backend = None
        self.network = None  # None: the plan decides; "on" / "off": the flag wins
        self.session = None
        self.ephemeral = False
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
        elif name == "--ephemeral" and not eq:
            a.ephemeral = True
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
    if a.session is not None and a.ephemeral:
        raise Refusal("--session and --ephemeral were both given", "give one of them")
    if not a.cmd:
        raise Refusal("no command given", USAGE)
    return a


def compile_on_miss(policy, backend, network, environ, cwd: str, gate=None) -> dict:
    """What the plan cache calls on a miss. The compiler is imported here, on a miss
    only: a cached run never loads YAML, Lark or libseccomp."""
    from .build import compile_for_exec

    return compile_for_exec(policy, backend, network, environ, cwd, gate)


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


def exec_main(argv, compile=compile_on_miss) -> int:
    from ..runtime.launch import after_start_line, run_exec
    from ..runtime.spec import RunState

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
        if not isinstance(e, Exception):
            raise
        # A bug or a malformed plan: still one line and 125, never a traceback with
        # status 1 that could pass for the command's own failure.
        sys.stderr.write(Refusal(f"internal error before the command started ({type(e).__name__}: {e})",
                                 "check the plan file (recompile it); please report this").line() + "\n")
        return REFUSED
