"""Start-up cost of ``sbxc exec --backend landlock`` with a cached plan, beside the bwrap
backend, raw bwrap with the same options as sbxc's bwrap run, and the bare command.

    .venv/bin/python bench/landlock.py [--runs 200] [--sbxc PATH] [--against SBXC]

Through the command a user runs after scripts/setup (the venv's ``bin/sbxc`` launcher).
Each variant runs ``/bin/true``; one warm-up run each (the first compiles and caches the
plan), then the rounds, alternating so that drift hits every variant alike. Prints the
median and p90 wall time, CPU time and peak resident memory of each variant's process
tree, and the stat and readlink calls of the sbxc process itself for each backend
(``strace -c`` without ``-f``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402
from benchutil import remove_project_cache  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sbxc", default="", help="the launcher (default: this venv's bin/sbxc)")
    ap.add_argument("--against", default="", metavar="SBXC",
                    help="another sbxc launcher (e.g. an older checkout's) whose cached runs join the alternation")
    args = ap.parse_args()
    sbxc = startup.installed_command(args.sbxc)
    cmd = "/bin/true"

    work, project = startup.make_project()
    try:
        env = startup.bench_env()
        landlock = [sbxc, "exec", "--backend", "landlock", "--", cmd]
        bwrap = [sbxc, "exec", "--backend", "bwrap", "--", cmd]
        variants = [
            ("bare /bin/true", lambda wrap=(): startup.spawn([cmd], env, cwd=project, wrap=wrap)),
            ("sbxc exec --backend landlock", lambda wrap=(): startup.spawn(landlock, env, cwd=project, wrap=wrap)),
        ]
        if args.against:
            other = startup.installed_command(args.against)
            o_landlock = [other, "exec", "--backend", "landlock", "--", cmd]
            variants.append(("--against: --backend landlock",
                             lambda wrap=(): startup.spawn(o_landlock, env, cwd=project, wrap=wrap)))
        from sbxc.runtime.probe import host_program, userns_works

        bw = host_program("bwrap", os.environ)[0]
        if bw and userns_works(bw)[0]:
            run_raw, _plan = startup.raw_bwrap(sbxc, project, work, env, cmd)
            variants += [
                ("sbxc exec --backend bwrap", lambda wrap=(): startup.spawn(bwrap, env, cwd=project, wrap=wrap)),
                ("raw bwrap (sbxc's options)", run_raw),
            ]
            if args.against:
                o_bwrap = [other, "exec", "--backend", "bwrap", "--", cmd]
                variants.append(("--against: --backend bwrap",
                                 lambda wrap=(): startup.spawn(o_bwrap, env, cwd=project, wrap=wrap)))
        else:
            print("bwrap cannot make namespaces here: Landlock alone")
        res = startup.alternate(variants, args.runs)
        startup.header(args.runs, cmd, sbxc)
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
        startup.print_table(res, "bare /bin/true")
        startup.print_rss_check(res)
        print()
        rows = [("sbxc exec --backend landlock (cached), launcher", landlock, env, project)]
        if any(name == "sbxc exec --backend bwrap" for name, _fn in variants):
            rows.append(("sbxc exec --backend bwrap (cached), launcher", bwrap, env, project))
        if args.against:
            rows.append(("--against: --backend landlock", o_landlock, env, project))
        startup.print_syscalls(rows)
    finally:
        remove_project_cache(project)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
