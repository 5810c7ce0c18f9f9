"""The shared inside-the-sandbox case list, and the helpers that run a plan under a backend.

One fixture tree, one policy (built as a ``Plan`` directly, so the cases do not depend on
the frontend), one list of (path, operation) cases. ``test_cross_backend.py`` runs the list
under every Linux backend and compares each answer with ``sbxc.compiler.decide``; the
Landlock and seccomp live tests reuse ``run_plan`` for their own cases.

Run as a script (``python cases.py run PLANFILE -- CMD...``) it is the driver: it loads the
plan file and hands it to the runtime core, as ``sbxc exec --plan`` does, but without the
plan cache's checks of the file's owner (the tests write plans into pytest's tmp dirs).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")


def _imports():
    if SRC not in sys.path:
        sys.path.insert(0, SRC)


_imports()

from sbxc.compiler.plan import (  # noqa: E402
    BUILTIN_SPAN, CachePlan, EnvPlan, LandlockPlan, Network, NetRule, NET_OFF, NET_ON, NET_RULES,
    Plan, PathRule, SyscallPlan, fs_sort_key,
)


def rule(path: str, access: str, kind: str = "dir", written: str = "") -> PathRule:
    return PathRule(path, access, kind, BUILTIN_SPAN, written or path)


def make_plan(rules, *, project: str, network: str = NET_ON, ports=(), unix: bool = False,
              deny=(), env_pass=("PATH", "HOME", "LANG"), min_abi: int = 1, best_effort: bool = False) -> Plan:
    from sbxc.backends.seccomp import BUILTIN_DENY

    net_rules = tuple(NetRule(op, "tcp", lo, hi, BUILTIN_SPAN) for op, lo, hi in ports)
    return Plan(
        project=project, home=os.environ.get("HOME", "/root"), home_mode="read-only", uid=os.getuid(),
        backend="landlock", fs=tuple(sorted(rules, key=fs_sort_key)), skipped=(),
        network=Network(network, net_rules), env=EnvPlan(tuple(env_pass), ()),
        cache=CachePlan(False, "", "", (), ()),
        syscalls=SyscallPlan(tuple(sorted(set(BUILTIN_DENY) | set(deny))), unix),
        landlock=LandlockPlan(min_abi, best_effort),
    )


def planfile_for(plan: Plan, backend: str) -> dict:
    from sbxc.commands.build import lower
    from sbxc.planfile import build
    from sbxc.runtime.probe import probe_host

    host = probe_host(full=False)
    lowered = lower(backend, plan, host)
    return build(plan, host, backend, lowered.data, lowered.verdicts)


@dataclass
class Result:
    rc: int
    out: str
    err: str


def run_plan(plan: Plan, backend: str, cmd, *, cwd: str, tmp: str, env=None, pass_fds=(), timeout=60) -> Result:
    """Compile ``plan`` for ``backend`` and run ``cmd`` under it through the runtime core."""
    pf = planfile_for(plan, backend)
    return run_planfile(pf, cmd, cwd=cwd, tmp=tmp, env=env, pass_fds=pass_fds, timeout=timeout)


def run_planfile(pf: dict, cmd, *, cwd: str, tmp: str, env=None, pass_fds=(), timeout=60) -> Result:
    path = os.path.join(tmp, f"plan-{os.getpid()}-{os.urandom(4).hex()}.json")
    with open(path, "w") as f:
        json.dump(pf, f)
    e = dict(os.environ if env is None else env)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "run", path, "--", *cmd], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout, pass_fds=pass_fds)
    return Result(p.returncode, p.stdout, p.stderr)


# ---------------------------------------------------------------- the shared case list

def build_tree(root: str) -> dict:
    """The fixture tree; returns the named paths. ``root`` must be traversable by the user."""
    paths = {
        "root": root,
        "proj": f"{root}/proj",
        "home": f"{root}/home",
    }
    files = {
        "proj/a.txt": "project file\n",
        "proj/sub/b.txt": "sub file\n",
        "proj/.git/config": "[core]\n",
        "proj/.git/hooks/pre-commit": "#!/bin/sh\nexit 0\n",
        "proj/secret/key.txt": "PROJECT-SECRET\n",
        "home/docs/d.txt": "doc\n",
        "home/.ssh/id_rsa": "SSH-SECRET\n",
        "home/.netrc": "NETRC-SECRET\n",
        "outside/o.txt": "outside\n",
    }
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    return paths


def shared_rules(root: str, variant: str = "a") -> list:
    if variant == "b":
        # a writable home with a masked file and a read-only folder in it; no hooks rule
        return [
            rule("/", "read"),
            rule(f"{root}/home", "write"),
            rule(f"{root}/home/.netrc", "mask", "file"),
            rule(f"{root}/home/docs", "read"),
            rule(f"{root}/home/.ssh", "mask"),
            rule(f"{root}/proj", "write"),
            rule(f"{root}/proj/secret", "mask"),
        ]
    return [
        rule("/", "read"),
        rule(f"{root}/proj", "write"),
        rule(f"{root}/proj/.git/hooks", "read"),
        rule(f"{root}/proj/secret", "mask"),
        rule(f"{root}/home/.ssh", "mask"),
        rule(f"{root}/home/.netrc", "mask", "file"),
    ]


# (name, relative path, op). Ops: read (cat), list (ls), write (append to an existing
# file), create (a new file), delete (rm), mkdir.
CASES = (
    ("read project file", "proj/a.txt", "read"),
    ("write project file", "proj/a.txt", "write"),
    ("create in project subfolder", "proj/sub/new.txt", "create"),
    ("delete in project subfolder", "proj/sub/b.txt", "delete"),
    ("create at project top level", "proj/new-top.txt", "create"),
    ("list project", "proj", "list"),
    ("read hook", "proj/.git/hooks/pre-commit", "read"),
    ("write hook", "proj/.git/hooks/pre-commit", "write"),
    ("create hook", "proj/.git/hooks/post-checkout", "create"),
    ("delete hook", "proj/.git/hooks/pre-commit", "delete"),
    ("write git config", "proj/.git/config", "write"),
    ("read masked project file", "proj/secret/key.txt", "read"),
    ("list masked project folder", "proj/secret", "list"),
    ("create in masked project folder", "proj/secret/x", "create"),
    ("read masked ssh key", "home/.ssh/id_rsa", "read"),
    ("list masked ssh folder", "home/.ssh", "list"),
    ("read masked netrc", "home/.netrc", "read"),
    ("write masked netrc", "home/.netrc", "write"),
    ("read home doc", "home/docs/d.txt", "read"),
    ("write home doc", "home/docs/d.txt", "write"),
    ("create in home", "home/docs/new.txt", "create"),
    ("read outside", "outside/o.txt", "read"),
    ("write outside", "outside/o.txt", "write"),
    ("create outside", "outside/new.txt", "create"),
    ("read /etc/passwd", "/etc/passwd", "read"),
)

_PROBE = {
    # "read" and "list" mean seeing the host's bytes and entries (every fixture file and
    # folder is non-empty): a mask may show an empty file or folder (SPEC §2).
    "read": 'cat -- "$p" 2>/dev/null | grep -q .',
    "list": 'ls -A -- "$p" 2>/dev/null | grep -q .',
    "write": '( : >> "$p" ) 2>/dev/null',
    "create": '[ ! -e "$p" ] && ( : > "$p" ) 2>/dev/null',
    "delete": 'rm -f -- "$p" 2>/dev/null && [ ! -e "$p" ]',
}


def case_path(root: str, rel: str) -> str:
    return rel if rel.startswith("/") else f"{root}/{rel}"


def probe_script(root: str) -> str:
    """One shell script that tries every case and prints ``name<TAB>0|1``. Cases that
    change the tree use their own files, so their order does not matter except for
    delete, which comes last."""
    lines = []
    ordered = sorted(CASES, key=lambda c: c[2] == "delete")
    for name, rel, op in ordered:
        p = case_path(root, rel)
        lines.append(f"p='{p}'; if {_PROBE[op]}; then echo '{name}\t1'; else echo '{name}\t0'; fi")
    return "\n".join(lines) + "\n"


def parse_probe(out: str) -> dict:
    res = {}
    for line in out.splitlines():
        if "\t" in line:
            name, v = line.rsplit("\t", 1)
            res[name] = v == "1"
    return res


def main(argv) -> int:
    if len(argv) >= 3 and argv[0] == "run" and argv[2] == "--":
        with open(argv[1]) as f:
            pf = json.load(f)
        from sbxc.runtime import launch

        return launch.launch(pf, argv[3:], os.environ, os.getcwd())
    sys.stderr.write("usage: cases.py run PLANFILE -- CMD...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def landlock_abi() -> int:
    from sbxc.runtime.probe import landlock_abi as abi

    return abi()
