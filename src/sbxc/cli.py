"""The ``sbxc`` command: dispatch only.

Each subcommand lives in its own module and is imported on demand, so ``sbxc exec``
loads the runtime and nothing of the compiler (no YAML parser, no Lark, no libseccomp).
"""
import sys

# command name -> (module, function); each function takes the remaining argv, returns the exit code
COMMANDS = {
    "exec": ("sbxc.commands.exec", "exec_entry"),  # exec_main, then os._exit (no teardown)
    "compile": ("sbxc.commands.compile", "main"),
    "print-config": ("sbxc.commands.print_config", "main"),
    "schema": ("sbxc.commands.schema", "main"),
    "doctor": ("sbxc.commands.doctor", "main"),
    "cache": ("sbxc.commands.cache", "main"),
    "init": ("sbxc.commands.init", "main"),
    "export": ("sbxc.commands.export", "main"),
    "explain": ("sbxc.commands.explain", "main"),
    "completion": ("sbxc.commands.completion", "main"),
    "help": ("sbxc.cli", "help_main"),
    "session": ("sbxc.commands.session", "main"),
}


def help_main(argv) -> int:
    """``sbxc help [COMMAND [SUBCOMMAND]]``: the same text as ``COMMAND --help``."""
    from .commands import _args, _help

    if not argv:
        sys.stdout.write(_help.top_help())
        return 0
    if argv[0] in ("-h", "--help"):
        argv = ["help"]
    cmd = _args.BY_NAME.get(argv[0])
    if cmd is None or len(argv) > 2:
        what = (_args.unknown("command", argv[0], list(_args.BY_NAME)) if cmd is None
                else f"unexpected argument {argv[2]!r}")
        sys.stderr.write(f"sbxc help: {what}\n")
        return 2
    if len(argv) == 2:
        sub = next((s for s in cmd.subcommands if s.name == argv[1]), None)
        if sub is None:
            names = [s.name for s in cmd.subcommands]
            sys.stderr.write(f"sbxc help: {_args.unknown(f'subcommand of {cmd.name}', argv[1], names) if names else f'{cmd.name} has no subcommands'}\n")
            return 2
        sys.stdout.write(_help.command_help(sub, parent=cmd.name))
        return 0
    sys.stdout.write(_help.command_help(cmd))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        from .commands._help import top_help

        sys.stdout.write(top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        from sbxc import __version__

        sys.stdout.write(f"sbxc {__version__}\n")
        return 0
    entry = COMMANDS.get(argv[0])
    if entry is None:
        from .commands._args import BY_NAME, unknown

        sys.stderr.write(f"sbxc: {unknown('command', argv[0], list(BY_NAME))}; sbxc help lists them\n")
        return 2
    from .fastos import os

    environ = os.environ

    from .layout import ROOT_ENV, root_env_problem

    problem = root_env_problem(environ)
    if problem:
        # Checked once here, so every layer below may take the value as a plain folder name:
        # a relative one would put plans and caches wherever the command happens to run.
        sys.stderr.write(f"sbxc: {problem}; set {ROOT_ENV} to an absolute folder outside the home folder, or unset it\n")
        return 125 if argv[0] == "exec" else 2
    if argv[0] == "exec":
        # exec words its own failures (125 before the command ran, the command's status
        # after) and leaves through os._exit: nothing of it comes back here.
        return __import__(entry[0], fromlist=[entry[1]]).exec_entry(argv[1:])
    try:
        module = __import__(entry[0], fromlist=[entry[1]])
        rc = getattr(module, entry[1])(argv[1:])
        sys.stdout.flush()  # output still buffered would otherwise fail at exit, unhandled
        return rc
    except BrokenPipeError:
        # The reader went away (`sbxc compile --check | head -1`): nothing is wrong with
        # the policy, and no traceback. Point stdout at /dev/null so the interpreter's
        # final flush cannot fail again, and exit as a process killed by SIGPIPE would.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except Exception as e:
        # A user's mistake is a diagnostic (exit 1) or a usage error (2); an exception is
        # sbxc's own bug: one line, exit 3, so no script takes it for a policy with errors
        # and no one reads a traceback as the policy's fault (docs/decisions.md).
        from .layout import INTERNAL_ERROR
        from .runtime.errors import one_line

        try:
            sys.stderr.write(f"sbxc: internal error: {type(e).__name__}: {one_line(str(e), 300)}; please report this\n")
        except OSError:
            pass
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
