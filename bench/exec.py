"""Start-up cost of ``sbxc exec`` against raw bwrap running the same options.

    .venv/bin/python bench/exec.py [--runs N] [--cmd /bin/true]

Variants, run alternately in one process tree so that drift hits them all alike:

- ``raw bwrap``: bwrap with exactly the options sbxc's bwrap runner builds for the plan
  (same masks, same seccomp program through a pipe, same environment);
- ``sbxc exec --plan``: a plan file (served from the plan cache's marshal copy);
- ``sbxc exec --policy``: the policy, plan taken from the plan cache;
- ``firejail --quiet --noprofile`` where firejail is installed.

Reports the median and p90 wall time, the difference and ratio to raw bwrap, and the
peak resident memory (``ru_maxrss`` from ``wait4``) of each variant's process tree.
Each sbxc variant is run once before timing so that the caches are warm, as they are
for every run after the first.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import remove_project_cache  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

POLICY = """\
sbxc: 1
extends: [builtin:default]
network: false
"""


def spawn(argv, env, pass_fds=(), cwd=None):
    """Fork/exec/wait4: (wall seconds, exit status, ru_maxrss KiB, CPU seconds)."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            if cwd:
                os.chdir(cwd)
            for fd in pass_fds:
                os.set_inheritable(fd, True)
            devnull = os.open("/dev/null", os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    t1 = time.perf_counter()
    return t1 - t0, os.waitstatus_to_exitcode(status), ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--cmd", default="/bin/true")
    ap.add_argument("--sbxc", default=os.path.join(os.path.dirname(sys.executable), "sbxc"))
    args = ap.parse_args()

    from sbxc.runtime import bwrap_run, cachedir, launch, planload, planstore, spec

    work = tempfile.mkdtemp(prefix="sbxc-bench-")
    try:
        project = os.path.join(work, "project")
        os.mkdir(project)
        with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
            f.write(POLICY)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TERM", "USER")}
        plan_path = os.path.join(work, "plan.json")
        t, rc, _, _ = spawn([args.sbxc, "compile", "-o", plan_path], env, cwd=project)
        if rc != 0:
            print("sbxc compile failed", file=sys.stderr)
            return 1

        # The exact bwrap command line sbxc builds (fresh descriptors for every run).
        pf = planload.load_planfile(plan_path)
        rt = pf["runtime"]

        def raw_spec():
            cache = cachedir.prepare(rt["cache"], project=rt["project"])
            cmd_env = launch.build_env(rt, env, cache.env)
            ctx = spec.Context(project=rt["project"], cwd=project, uid=os.getuid(), is_root=os.geteuid() == 0,
                                 network=rt["network"], cache=cache, plans_dir=planstore.plans_dir(),
                                 warn=print, environ=env)
            return bwrap_run.prepare(pf, [args.cmd], cmd_env, ctx)

        def run_raw():
            spec = raw_spec()
            try:
                return spawn(spec.argv, spec.env, spec.pass_fds, cwd=project)
            finally:
                for fn in spec.cleanups:
                    fn()

        variants = [
            ("raw bwrap", run_raw),
            ("sbxc exec --plan", lambda: spawn([args.sbxc, "exec", "--plan", plan_path, "--", args.cmd], env, cwd=project)),
            ("sbxc exec --policy (cached)", lambda: spawn([args.sbxc, "exec", "--", args.cmd], env, cwd=project)),
        ]
        # What a lean entry point would give (a proposal, not what `sbxc` is today): the
        # interpreter without site (-I -S: no .pth files, no sitecustomize), sbxc's folder
        # put on sys.path by the entry itself.
        pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("sbxc").__file__)))
        lean = [sys.executable, "-I", "-S", "-c",
                f"import sys; sys.path.insert(0, {pkg_dir!r}); from sbxc.cli import main; sys.exit(main(sys.argv[1:]))"]
        variants.append(("lean entry (-I -S), cached", lambda: spawn(lean + ["exec", "--", args.cmd], env, cwd=project)))
        firejail = shutil.which("firejail")
        if firejail:
            variants.append(("firejail --noprofile", lambda: spawn([firejail, "--quiet", "--noprofile", args.cmd], env, cwd=project)))

        for name, fn in variants:  # warm caches; check each variant works
            _, rc, _, _ = fn()
            if rc != 0:
                print(f"{name}: exit {rc}", file=sys.stderr)
                return 1
        times = {name: [] for name, _ in variants}
        rss = {name: 0 for name, _ in variants}
        cpu = {name: [] for name, _ in variants}
        for _ in range(args.runs):
            for name, fn in variants:
                dt, rc, maxrss, cpu_s = fn()
                cpu[name].append(cpu_s * 1000)
                if rc != 0:
                    print(f"{name}: exit {rc}", file=sys.stderr)
                    return 1
                times[name].append(dt * 1000)
                rss[name] = max(rss[name], maxrss)
        base = statistics.median(times["raw bwrap"])
        print(f"{args.runs} alternating runs of {args.cmd}, python {sys.version.split()[0]}, uid {os.getuid()}")
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"{'variant':30} {'median ms':>10} {'p90 ms':>8} {'+ms vs raw':>11} {'ratio':>6} {'CPU ms':>7} {'peak RSS MiB':>13}")
        for name, _ in variants:
            ts = sorted(times[name])
            med = statistics.median(ts)
            p90 = ts[int(len(ts) * 0.9) - 1]
            print(f"{name:30} {med:10.1f} {p90:8.1f} {med - base:11.1f} {med / base:6.2f} "
                  f"{statistics.median(cpu[name]):7.1f} {rss[name] / 1024:13.1f}")
    finally:
        # The project's cache folder lives under the cache root, not in work/.
        remove_project_cache(project)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
