"""Where a cached ``sbxc exec`` spends its time: the phases of one run, timed in fresh
processes started as the launcher starts them (``-I -S``, the launcher's ``sys.path``).

    .venv/bin/python bench/phases.py [--runs 40] [--backend bwrap|landlock|oci] [--cmd /bin/true]

Each run is a new interpreter that runs the launcher's own start (its ``sys.path`` and
its loader of the hot-path bundle), imports the hot path in two steps (timed), then runs
``exec_entry`` with the main steps wrapped in timers (each wrapper adds ~1 µs). Prints the
median of every phase over the runs, in µs; a phase that runs twice in a run counts twice.
The project is made under /var/tmp with the policy bench/exec.py uses, in a private
``SBXC_ROOT``, and compiled once before the timed runs (so every run is a cache hit).
"""
import argparse
import ast
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402

CHILD = r'''
import sys, time
T0 = time.perf_counter_ns()
PRELUDE
import os
marks = []
def wrap(mod, name):
    f = getattr(mod, name)
    def timed(*a, **k):
        t = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            marks.append((mod.__name__.rsplit(".", 1)[-1] + "." + name, (time.perf_counter_ns() - t) / 1e3))
    setattr(mod, name, timed)
import sbxc.cli
import sbxc.commands.exec as ex
from sbxc.runtime import launch
T1 = time.perf_counter_ns()
from sbxc.runtime import plancache, planstore, staleness, cachedir, journal, probe, supervise, owncode, RUNNER
T2 = time.perf_counter_ns()
for m, n in [(plancache, "compiler_stamp"), (plancache, "userns_facts"), (plancache, "open_plans_dir"),
             (plancache, "read_entry"), (staleness, "why_stale"), (launch, "load_plan"), (planstore, "policy_watch"),
             (cachedir, "prepare"), (owncode, "check"), (launch, "build_env"), (journal, "begin"), (RUNNER, "prepare"),
             (supervise, "run"), (planstore, "note_policy_changes"), (journal, "finish"), (launch, "after_run")] + EXTRA:
    wrap(m, n)
real_exit = os._exit
def leave(rc):
    T3 = time.perf_counter_ns()
    sys.stderr.write("PHASES " + repr([("imports: cli, exec, launch", (T1 - T0) / 1e3),
                                       ("imports: the rest of the hot path", (T2 - T1) / 1e3),
                                       ("exec_main", (T3 - T2) / 1e3)] + marks) + "\n")
    real_exit(rc)
os._exit = leave
ex.exec_entry(sys.argv[2:])  # sys.argv: -c, "exec", ...
'''


# The OCI runner's own steps (not ``dumps``: it calls itself, and each call would be timed).
OCI_EXTRA = """[(m, n) for m, n in [(__import__("sbxc.runtime.oci_run", fromlist=["x"]), n) for n in
    ("_config", "make_run_dir", "_shared_parts")]] + [(__import__("sbxc.runtime.oci_watch", fromlist=["x"]).Watcher, n)
    for n in ("start", "finish")] + [(__import__("sbxc.runtime.oci_gate", fromlist=["x"]).Gate, "release"),
    (__import__("sbxc.runtime.probe", fromlist=["x"]), "host_program")]"""


def launcher_prelude(sbxc: str) -> str:
    """What the launcher runs before ``from sbxc.cli import main``: its ``sys.path`` line
    and, when it has one, its loader of the hot-path bundle (scripts/write-launcher)."""
    with open(sbxc) as f:
        text = f.read()
    head, sep, _ = text.partition("from sbxc.cli import main\n")
    if not sep or "sys.path += " not in head:
        sys.exit(f"{sbxc}: no sys.path line; is it the launcher scripts/setup writes?")
    return "\n".join(ln for ln in head.splitlines() if not ln.startswith("#!"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--backend", default="bwrap", choices=("bwrap", "landlock", "oci"))
    ap.add_argument("--cmd", default="/bin/true")
    ap.add_argument("--sbxc", default="", help="the launcher (default: this venv's bin/sbxc)")
    args = ap.parse_args()
    sbxc = startup.installed_command(args.sbxc)
    python = os.path.join(os.path.dirname(sbxc), "python3")
    runner = {"bwrap": "bwrap_run", "landlock": "landlock_run", "oci": "oci_run"}[args.backend]
    code = (CHILD.replace("EXTRA", OCI_EXTRA if args.backend == "oci" else "[]")
            .replace("PRELUDE", launcher_prelude(sbxc)).replace("RUNNER", runner))
    work, project = startup.make_project()
    root = tempfile.mkdtemp(prefix="sbxc-bench-root-", dir="/var/tmp")
    try:
        env = dict(startup.bench_env(), SBXC_ROOT=root)
        argv = ["exec", "--backend", args.backend, "--", args.cmd]
        subprocess.run([sbxc, *argv], env=env, cwd=project, check=True, stdout=subprocess.DEVNULL)
        phases = {}
        for _ in range(args.runs):
            p = subprocess.run([python, "-I", "-S", "-c", code, *argv], env=env, cwd=project,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            line = [x for x in p.stderr.splitlines() if x.startswith("PHASES ")]
            if p.returncode != 0 or not line:
                sys.exit(f"run failed ({p.returncode}): {p.stderr[-2000:]}")
            sums = {}
            for name, us in ast.literal_eval(line[0][len("PHASES "):]):
                sums[name] = sums.get(name, 0.0) + us
            for name, us in sums.items():
                phases.setdefault(name, []).append(us)
        print(f"{args.runs} fresh processes, backend {args.backend}, uid {os.getuid()}, "
              f"load average (1 min) {os.getloadavg()[0]:.2f}")
        for name, values in phases.items():
            print(f"  {name:40} {statistics.median(values):8.0f} µs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
