"""argparse for the compiler's commands: a usage error is an exit code (2), not SystemExit."""
import argparse


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)
