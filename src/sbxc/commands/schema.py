"""``sbxc schema``: the JSON Schema of the policy file, generated from the compiler's table of settings."""
from __future__ import annotations

import json
import sys

from . import _args, _help


def main(argv) -> int:
    args, code = _help.run_parse(_args.SCHEMA, argv, sys.stdout, sys.stderr)
    if args is None:
        return code
    from ..compiler.settings import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return 0
