"""Start-up cost of ``sbxc exec`` against raw bwrap running the same options.

    .venv/bin/python bench/exec.py [--runs 200] [--cmd /bin/true] [--sbxc PATH] [--against SBXC]

Measured through the command a user runs after scripts/setup: the venv's ``bin/sbxc``
launcher, which the ``sbxc`` on PATH links to (``--sbxc`` names another one). Variants,
run alternately so that drift hits them all alike:

- ``raw bwrap``: bwrap with exactly the options sbxc's bwrap runner builds for the plan
  (same masks, same seccomp program through a pipe, same environment);
- ``sbxc exec --policy``, the plan from the plan cache (a hit), through the launcher;
- ``sbxc exec --plan``: a plan file (served from the plan cache's marshal copy);
- the same cached run through pip's console script, for comparison;
- ``python3 -I -S -c pass``: the launcher's interpreter doing nothing, the floor;
- ``firejail --quiet --noprofile`` where firejail is installed;
- with ``--against SBXC``: the cached run through another launcher (an older checkout's
  ``bin/sbxc``), so that a change is measured in the same alternation as the baseline.

Reports the median and p90 wall time, the difference and ratio to raw bwrap, the median
CPU time of the process tree and its peak resident memory (``ru_maxrss`` from ``wait4``:
the largest process of the tree), then the stat and readlink calls of the sbxc process
itself during one cached run (``strace -c`` without ``-f``), beside the interpreter's own.
Each variant is run once before timing, so the caches are warm as for every run after
the first.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402
from benchutil import remove_project_cache  # noqa: E402

TARGET_MS = 12.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--cmd", default="/bin/true")
    ap.add_argument("--sbxc", default="", help="the launcher (default: this venv's bin/sbxc)")
    ap.add_argument("--against", default="", metavar="SBXC",
                    help="another sbxc launcher (e.g. an older checkout's) whose cached run joins the alternation")
    args = ap.parse_args()
    sbxc = startup.installed_command(args.sbxc)
    venv_bin = os.path.dirname(sbxc)

    work, project = startup.make_project()
    try:
        env = startup.bench_env()
        run_raw, plan_path = startup.raw_bwrap(sbxc, project, work, env, args.cmd)
        legacy = startup.console_script(work, venv_bin)
        cached = [sbxc, "exec", "--", args.cmd]
        variants = [
            ("raw bwrap", run_raw),
            ("sbxc exec --policy (cached)", lambda wrap=(): startup.spawn(cached, env, cwd=project, wrap=wrap)),
            ("sbxc exec --plan", lambda wrap=(): startup.spawn([sbxc, "exec", "--plan", plan_path, "--", args.cmd], env,
                                                       cwd=project, wrap=wrap)),
            ("pip console script, cached", lambda wrap=(): startup.spawn([legacy, "exec", "--", args.cmd], env, cwd=project, wrap=wrap)),
            startup.floor_variant(sbxc, env, project),
        ]
        if args.against:
            other = [startup.installed_command(args.against), "exec", "--", args.cmd]
            variants.append(("--against: exec --policy (cached)",
                             lambda wrap=(): startup.spawn(other, env, cwd=project, wrap=wrap)))
        firejail = shutil.which("firejail")
        if firejail:
            variants.append(("firejail --noprofile",
                             lambda wrap=(): startup.spawn([firejail, "--quiet", "--noprofile", args.cmd], env, cwd=project, wrap=wrap)))
        res = startup.alternate(variants, args.runs)
        startup.header(args.runs, args.cmd, sbxc)
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
        startup.print_table(res, "raw bwrap")
        over = statistics.median(res["sbxc exec --policy (cached)"]["wall"]) - statistics.median(res["raw bwrap"]["wall"])
        print(f"cached sbxc exec over raw bwrap: {over:+.1f} ms (target: at most +{TARGET_MS:.0f} ms): "
              f"{'met' if over <= TARGET_MS else 'NOT met'}")
        startup.print_rss_check(res)
        print()
        python = os.path.join(venv_bin, "python3")
        rows = [("--against: exec --policy (cached)", other, env, project)] if args.against else []
        startup.print_syscalls(rows + [
            ("sbxc exec --policy (cached), launcher", cached, env, project),
            ("sbxc exec --plan, launcher", [sbxc, "exec", "--plan", plan_path, "--", args.cmd], env, project),
            ("pip console script, cached", [legacy, "exec", "--", args.cmd], env, project),
            ("interpreter alone: python3 -I -S -c pass", [python, "-I", "-S", "-c", "pass"], env, project),
        ])
    finally:
        # The project's cache folder lives under the cache root, not in work/.
        remove_project_cache(project)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
