"""argparse for the compiler's commands: a usage error is an exit code (2), not SystemExit."""
import argparse


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)


def parse(parser: argparse.ArgumentParser, argv, stderr):
    """``(args, None)``, or ``(None, exit code)``: 2 after a usage error, 0 after ``--help``."""
    try:
        return parser.parse_args(argv), None
    except Usage as e:
        stderr.write(f"{parser.prog}: {e}\n")
        return None, 2
    except SystemExit as e:
        return None, 0 if e.code in (0, None) else 2


def absolute_path(text: str) -> str:
    """argparse type: an absolute path (a relative one would silently mean the current folder's)."""
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"must be an absolute path, not {text!r}")
    return text
