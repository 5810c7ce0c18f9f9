"""A complete session through the Python API: start, run two commands, review, apply one
file, stop. Run it from a checkout: python3 examples/session_api.py [PROJECT]

Without PROJECT it makes a small throwaway project in a temporary folder.
"""
import os
import sys
import tempfile

import sbxc


def main() -> int:
    if len(sys.argv) > 1:
        project = sys.argv[1]
    else:
        project = tempfile.mkdtemp(prefix="sbxc-example-", dir="/var/tmp")
        with open(os.path.join(project, "notes.txt"), "w") as f:
            f.write("first line\n")
    with sbxc.Session.start(project) as s:
        print("session", s.id, "workspace made by", s.info["method"])
        r = s.run(["sh", "-c", "echo second line >> notes.txt; echo scratch > scratch.txt; cat notes.txt"])
        print("exit", r.status, "output:", r.stdout.decode())
        r = s.run(["cat"], input=b"stdin reaches the command\n", timeout=30)
        print("exit", r.status, "output:", r.stdout.decode())
        for change in s.diff():
            print(change["change"], change["path"])
        result = s.apply(["notes.txt"])  # scratch.txt stays in the workspace, discarded with it
        print("applied:", [a["path"] for a in result["applied"]], "refused:", result["refused"])
    with open(os.path.join(project, "notes.txt")) as f:
        print("host now has:", f.read(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
