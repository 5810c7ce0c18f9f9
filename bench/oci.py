"""Start-up cost of ``sbxc exec --backend oci`` with a cached plan, beside ``runc run`` of
the same bundle made by hand and ``sbxc exec --backend bwrap``.

    .venv/bin/python bench/oci.py [--runs 100] [--sbxc PATH] [--against SBXC] [--terminal]

Through the command a user runs after scripts/setup (the venv's ``bin/sbxc`` launcher).
The bundle for raw runc is the one ``sbxc compile --backend oci -o DIR`` writes for the
benchmark's project, with ``/bin/true`` as its command: the same mounts, masks, namespaces
and seccomp profile sbxc's runner hands runc (sbxc adds the run's environment and a mount
over its plans folder). Each variant runs ``/bin/true``; one warm-up each (the first
compiles and caches the plan), then the rounds, alternating so that drift hits every
variant alike. As a user, runc runs rootless in both (``--rootless true``). With
``--against SBXC`` the same OCI run through another launcher (an older checkout's
``bin/sbxc``, set up with scripts/setup) joins the alternation, so a change is measured
beside the code before it. With ``--terminal`` a run whose stdin is a terminal joins it too
(such runs are `runc create` + `runc start`: docs/kubernetes.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402
from benchutil import remove_project_cache  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--sbxc", default="", help="the launcher (default: this venv's bin/sbxc)")
    ap.add_argument("--against", default="", metavar="SBXC",
                    help="another sbxc launcher (e.g. an older checkout's) whose OCI run joins the alternation")
    ap.add_argument("--terminal", action="store_true",
                    help="also an OCI run whose stdin is a terminal (a pseudo-terminal of the benchmark's): "
                         "runc create + runc start, not runc run")
    args = ap.parse_args()
    sbxc = startup.installed_command(args.sbxc)
    cmd = "/bin/true"
    from sbxc.runtime.probe import host_program

    runc = host_program("runc", os.environ)[0]
    if not runc:
        sys.exit("runc is not installed (scripts/setup installs it)")

    work, project = startup.make_project()
    try:
        env = startup.bench_env()
        bundle = os.path.join(work, "bundle")
        _, rc, _, _ = startup.spawn([sbxc, "compile", "--backend", "oci", "-o", bundle], env, cwd=project)
        if rc != 0:
            sys.exit("sbxc compile --backend oci -o failed")
        cfg_path = os.path.join(bundle, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["process"]["args"] = [cmd]
        cfg["process"]["env"] = [f"{k}={v}" for k, v in sorted(env.items())]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        state = os.path.join(work, "state")
        os.mkdir(state, 0o700)
        log = os.path.join(work, "runc.log")
        rootless = ["--rootless", "true"] if os.geteuid() != 0 else []
        seq = [0]

        def raw(wrap=()):
            seq[0] += 1
            argv = [runc, "--root", state, "--log", log, *rootless, "run", "--bundle", bundle, f"bench-{seq[0]}"]
            return startup.spawn(argv, env, cwd=bundle, wrap=wrap)

        oci = [sbxc, "exec", "--backend", "oci", "--", cmd]
        bwrap = [sbxc, "exec", "--backend", "bwrap", "--", cmd]
        variants = [
            ("raw runc run (same bundle)", raw),
            ("sbxc exec --backend oci", lambda wrap=(): startup.spawn(oci, env, cwd=project, wrap=wrap)),
            ("sbxc exec --backend bwrap", lambda wrap=(): startup.spawn(bwrap, env, cwd=project, wrap=wrap)),
            startup.floor_variant(sbxc, env, project),
        ]
        if args.terminal:
            import pty

            _master, slave = pty.openpty()  # both stay open for the whole run
            variants.append(("sbxc exec --backend oci, stdin a terminal",
                             lambda wrap=(): startup.spawn(oci, env, cwd=project, wrap=wrap, stdin=slave)))
        if args.against:
            other = [startup.installed_command(args.against), "exec", "--backend", "oci", "--", cmd]
            variants.append(("--against: exec --backend oci",
                             lambda wrap=(): startup.spawn(other, env, cwd=project, wrap=wrap)))
        # sbxc's run makes the project's cache folder, which the bundle binds: sbxc first.
        for name, fn in (variants[1], variants[0], *variants[2:]):
            _t, status, _r, _c = fn()
            if status != 0:
                sys.exit(f"{name} failed (status {status}): {open(log).read()[-500:] if os.path.exists(log) else ''}")
        res = startup.alternate(variants, args.runs)
        startup.header(args.runs, cmd, sbxc)
        print(f"runc: {runc}; uid {os.geteuid()}{' (rootless)' if rootless else ''}")
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
        startup.print_table(res, "raw runc run (same bundle)")
        startup.print_rss_check(res)
        print()
        startup.print_syscalls([("sbxc exec --backend oci (cached), launcher", oci, env, project)])
    finally:
        remove_project_cache(project)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
