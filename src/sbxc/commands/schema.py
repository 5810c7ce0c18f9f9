"""``sbxc schema``: the JSON Schema of the policy file, generated from the compiler's table of settings."""
from __future__ import annotations

import json
import sys


def main(argv) -> int:
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: sbxc schema\nPrints the JSON Schema of sandbox.policy.yaml.\n")
        return 0
    if argv:
        sys.stderr.write(f"sbxc schema: unexpected argument {argv[0]!r}\n")
        return 2
    from ..compiler.settings import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return 0
