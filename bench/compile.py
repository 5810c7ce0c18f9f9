"""Compile time against policy size: generated policies with 10 … 10,000 filesystem rules.

    .venv/bin/python bench/compile.py [--repeat N]

Each policy extends builtin:default and adds N rules over a generated tree of real folders
(a mix of read, write, mask and optional rules, nested three levels deep, so path
resolution and precedence do real work). Two timings per size, the best of N runs:
``compile`` is compile_policy (load, check, normalize to the Plan); ``check`` adds lowering
for every backend, as ``sbxc compile --check`` does; then each backend's lowering alone
(``sbxc compile -o`` pays compile plus one of them). The ratio column is the growth per
10x step: linear growth is about 10x; the target is at most 12x, and 1,000 rules checked
in under 0.5 s.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

SIZES = (10, 100, 1000, 10000)


def make_case(root: str, n: int) -> str:
    proj = os.path.join(root, f"p{n}")
    lines = ["sbxc: 1", "extends: [builtin:default]", "filesystem:"]
    verbs = ("read", "write", "mask", "read?")
    for i in range(n):
        d = os.path.join(proj, f"a{i % 10}", f"b{i % 100}", f"c{i}")
        verb = verbs[i % len(verbs)]
        if verb != "read?":
            os.makedirs(d, exist_ok=True)
        lines.append(f"  - {verb} {{project}}/a{i % 10}/b{i % 100}/c{i}")
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return proj


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated rule counts")
    ap.add_argument("--no-lower", action="store_true", help="time compile_policy only")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    from sbxc.backends import BACKENDS
    from sbxc.compiler.api import compile_policy
    from sbxc.commands.build import lower_all
    from sbxc.runtime.probe import probe_host

    host = probe_host(full=False)
    env = dict(os.environ)
    root = tempfile.mkdtemp(prefix="sbxc-bench-", dir="/var/tmp")
    rows = []
    try:
        # Warm-up: grammar load, libseccomp's syscall table, imports.
        warm = make_case(root, 1)
        compile_policy(None, cwd=warm, environ=env, host=host, overrides={})
        for n in sizes:
            proj = make_case(root, n)

            def comp():
                r = compile_policy(None, cwd=proj, environ=env, host=host, overrides={})
                assert r.plan is not None, [d.message for d in r.diagnostics][:3]
                return r

            def check():
                r = comp()
                lower_all(r.plan, host, BACKENDS)

            c = best(comp, args.repeat)
            per = {}
            if not args.no_lower:
                plan = comp().plan
                for name in BACKENDS:
                    per[name] = best(lambda: lower_all(plan, host, (name,)), args.repeat)
            rows.append((n, c, c if args.no_lower else best(check, args.repeat), per))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    names = list(rows[0][3]) if rows and rows[0][3] else []
    print(f"{'rules':>6}  {'compile s':>9}  {'ratio':>6}  {'check s':>8}  {'ratio':>6}"
          + "".join(f"  {'lower ' + n:>18}  {'ratio':>6}" for n in names))
    prev = None
    for n, c, k, per in rows:
        rc = f"{c / prev[1]:.1f}x" if prev else ""
        rk = f"{k / prev[2]:.1f}x" if prev else ""
        line = f"{n:>6}  {c:>9.4f}  {rc:>6}  {k:>8.4f}  {rk:>6}"
        for name in names:
            rp = f"{per[name] / prev[3][name]:.1f}x" if prev else ""
            line += f"  {per[name]:>18.4f}  {rp:>6}"
        print(line)
        prev = (n, c, k, per)
    at_1000 = next((k for n, c, k, _ in rows if n == 1000), None)
    if at_1000 is not None:
        print(f"1,000 rules checked in {at_1000:.3f} s (target < 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
