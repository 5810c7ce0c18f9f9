"""Shared by bench/exec.py and bench/landlock.py: running variants alternately, the
installed command, raw bwrap with sbxc's own options, and the parent's system calls."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

POLICY = """\
sbxc: 1
extends: [builtin:default]
network: false
"""

STAT_CALLS = ("stat", "lstat", "fstat", "newfstatat", "fstatat64", "statx", "stat64", "lstat64", "fstat64")
READLINK_CALLS = ("readlink", "readlinkat")
RSS_LIMIT_MIB = 30


TIME = "/usr/bin/time"  # GNU time (Debian's `time` package), for peak memory only


def spawn(argv, env, pass_fds=(), cwd=None, wrap=(), stdin=None):
    """Fork/exec/wait4: (wall seconds, exit status, ru_maxrss KiB, CPU seconds). ``wrap``:
    a command line to run ``argv`` through (see peak_rss); ``stdin``: a descriptor to give
    it as its standard input (else /dev/null). No variant gets a terminal unless asked:
    sbxc runs differently on one (a relay for stderr; on OCI runc create + start), so
    stdout is /dev/null, and stderr too when the benchmark's own is a terminal."""
    argv = [*wrap, *argv]
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            if cwd:
                os.chdir(cwd)
            for fd in pass_fds:
                os.set_inheritable(fd, True)
            os.dup2(stdin if stdin is not None else os.open("/dev/null", os.O_RDONLY), 0)
            devnull = os.open("/dev/null", os.O_WRONLY)
            os.dup2(devnull, 1)
            if os.isatty(2):
                os.dup2(devnull, 2)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    t1 = time.perf_counter()
    return t1 - t0, os.waitstatus_to_exitcode(status), ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def installed_command(explicit: str = "") -> str:
    """The `sbxc` a user runs after scripts/setup: this venv's bin/sbxc (what the PATH
    entry links to). Refuses pip's console script, which would measure something else."""
    path = explicit or os.path.join(os.path.dirname(sys.executable), "sbxc")
    with open(path) as f:
        first = f.readline()
    if not first.rstrip().endswith(" -IS") and "-IS" not in f.readline():
        sys.exit(f"{path} is not the launcher scripts/setup writes (first line {first.strip()!r}); run scripts/setup")
    on_path = shutil.which("sbxc")
    if on_path and os.path.realpath(on_path) != os.path.realpath(path):
        print(f"note: sbxc on PATH is {on_path} -> {os.path.realpath(on_path)}, not {path}")
    return path


def console_script(work: str, venv_bin: str) -> str:
    """pip's console script for sbxc as pip 23+ writes it (older pips also `import re`),
    for comparison: the venv's interpreter with site."""
    path = os.path.join(work, "sbxc-console-script")
    with open(path, "w") as f:
        f.write(f"#!{venv_bin}/python\nimport sys\nfrom sbxc.cli import main\nif __name__ == '__main__':\n"
                "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n")
    os.chmod(path, 0o755)
    return path


def make_project() -> tuple:
    """A project under /var/tmp with the benchmark's policy, and a cache root of its own
    beside it (``$SBXC_ROOT``, set here for this process and passed on by ``bench_env``):
    the plans, caches and run folders the variants make go there and are removed with the
    benchmark's folder, never into the user's own root. Its plans folder holds only this
    benchmark's entries."""
    work = tempfile.mkdtemp(prefix="sbxc-bench-", dir="/var/tmp")
    project = os.path.join(work, "project")
    os.mkdir(project)
    root = os.path.join(work, "root")
    os.mkdir(root, 0o700)
    os.environ["SBXC_ROOT"] = root
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    return work, project


def bench_env() -> dict:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TERM", "USER", "SBXC_ROOT")}


def raw_bwrap(sbxc: str, project: str, work: str, env: dict, cmd: str, backend_flag=()):
    """A function running bwrap with exactly the options sbxc's bwrap runner builds for the
    project's plan (the same masks, the same seccomp program through a pipe, the same
    environment), with fresh descriptors each time."""
    from sbxc.runtime import bwrap_run, cachedir, launch, planload, planstore, spec

    plan_path = os.path.join(work, "plan-bwrap.json")
    _, rc, _, _ = spawn([sbxc, "compile", "--backend", "bwrap", "-o", plan_path], env, cwd=project)
    if rc != 0:
        sys.exit("sbxc compile failed")
    pf = planload.load_planfile(plan_path)
    rt = pf["runtime"]

    def run(wrap=()):
        cache = cachedir.prepare(rt["cache"], project=rt["project"])
        cmd_env = launch.build_env(rt, env, cache.env)
        ctx = spec.Context(project=rt["project"], cwd=project, uid=os.getuid(), is_root=os.geteuid() == 0,
                             network=rt["network"], cache=cache, plans_dir=planstore.plans_dir(),
                             warn=print, environ=env)
        ls = bwrap_run.prepare(pf, [cmd], cmd_env, ctx)
        if ls.release is not None:
            ls.release()  # raw bwrap gets its program up front, in the pipe, as a caller of bwrap would
        try:
            return spawn(ls.argv, ls.env, ls.pass_fds, cwd=project, wrap=wrap)
        finally:
            for fn in ls.cleanups:
                fn()
            cache.cleanup()

    return run, plan_path


def alternate(variants, runs: int) -> dict:
    """Each variant once to warm the caches (and check it works), then ``runs`` rounds of
    all of them in turn, so drift hits every variant alike."""
    for name, fn in variants:
        _, rc, _, _ = fn()
        if rc != 0:
            sys.exit(f"{name}: exit {rc}")
    res = {name: {"wall": [], "cpu": [], "rss": None} for name, _ in variants}
    for _ in range(runs):
        for name, fn in variants:
            dt, rc, _maxrss, cpu_s = fn()
            if rc != 0:
                sys.exit(f"{name}: exit {rc}")
            r = res[name]
            r["wall"].append(dt * 1000)
            r["cpu"].append(cpu_s * 1000)
    for name, fn in variants:
        res[name]["rss"] = peak_rss(fn)
    return res


def peak_rss(fn, runs: int = 5):
    """Largest resident set (KiB) of the variant's process tree over a few runs, or None.
    Through GNU time: wait4's ru_maxrss of a child forked from this benchmark would count
    the benchmark's own ~10 MiB (the peak survives exec), whatever the child then runs."""
    if not os.access(TIME, os.X_OK):
        return None
    fd, out = tempfile.mkstemp(prefix="sbxc-rss-")
    os.close(fd)
    peak = 0
    try:
        for _ in range(runs):
            _, rc, _, _ = fn(wrap=(TIME, "-f", "%M", "-o", out))
            if rc != 0:
                return None
            with open(out) as f:
                peak = max(peak, int(f.read().split()[-1]))
    finally:
        os.unlink(out)
    return peak


def print_table(res: dict, base_name: str) -> None:
    """One line per variant. ``+ms vs raw``: the difference of the medians; ``paired``: the
    median of the per-round differences (each round runs every variant once, one after
    the other), which drift between rounds moves less."""
    base = statistics.median(res[base_name]["wall"])
    base_runs = res[base_name]["wall"]
    print(f"{'variant':36} {'median ms':>10} {'p90 ms':>8} {'+ms vs raw':>11} {'paired':>7} {'ratio':>6} {'CPU ms':>7} "
          f"{'peak RSS MiB':>13}")
    for name, r in res.items():
        ts = sorted(r["wall"])
        med = statistics.median(ts)
        p90 = ts[int(len(ts) * 0.9) - 1]
        paired = statistics.median(a - b for a, b in zip(r["wall"], base_runs))
        rss = "-" if r["rss"] is None else f"{r['rss'] / 1024:.1f}"
        print(f"{name:36} {med:10.1f} {p90:8.1f} {med - base:11.1f} {paired:7.1f} {med / base:6.2f} "
              f"{statistics.median(r['cpu']):7.1f} {rss:>13}")


def syscall_counts(argv, env, cwd) -> dict:
    """System calls of the process itself (strace -c without -f: not bwrap's, not the
    command's), by name; {} when strace is not installed."""
    strace = shutil.which("strace")
    if not strace:
        return {}
    fd, out = tempfile.mkstemp(prefix="sbxc-strace-")
    os.close(fd)
    try:
        p = subprocess.run([strace, "-c", "-o", out, "--", *argv], env=env, cwd=cwd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if p.returncode != 0:
            return {}
        counts = {}
        for line in open(out):
            parts = line.split()
            # % time, seconds, usecs/call, calls, [errors], syscall
            if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[3].isdigit():
                counts[parts[-1]] = int(parts[3])
        return counts
    finally:
        os.unlink(out)


def print_syscalls(rows) -> None:
    """rows: (label, argv, env, cwd). One line each: stat-family and readlink calls."""
    if not shutil.which("strace"):
        print("strace is not installed: no system call counts")
        return
    print(f"{'process (strace -c, the process itself)':52} {'stat*':>6} {'readlink':>9} {'openat':>7} {'getdents':>9} {'all':>6}")
    for label, argv, env, cwd in rows:
        c = syscall_counts(argv, env, cwd)
        print(f"{label:52} {sum(c.get(n, 0) for n in STAT_CALLS):6} {sum(c.get(n, 0) for n in READLINK_CALLS):9} "
              f"{c.get('openat', 0):7} {c.get('getdents64', 0):9} {sum(c.values()):6}")


def print_rss_check(res: dict) -> None:
    if any(r["rss"] is None for r in res.values()):
        print(f"peak RSS not measured: {TIME} (Debian's `time` package) is not installed")
        return
    worst = max(r["rss"] for r in res.values()) / 1024
    print(f"peak RSS over all variants: {worst:.1f} MiB ({'under' if worst < RSS_LIMIT_MIB else 'OVER'} "
          f"the {RSS_LIMIT_MIB} MiB limit)")


def header(runs: int, cmd: str, sbxc: str) -> None:
    print(f"{runs} alternating runs of {cmd}, python {sys.version.split()[0]}, uid {os.getuid()}, "
          f"{os.cpu_count()} CPUs, command {sbxc}")


def floor_variant(sbxc: str, env: dict, project: str):
    """The variant "python3 -I -S -c pass": the launcher's interpreter starting and doing
    nothing, the floor of what sbxc can add, timed in the same alternation."""
    python = os.path.join(os.path.dirname(sbxc), "python3")
    return ("python3 -I -S -c pass",
            lambda wrap=(): spawn([python, "-I", "-S", "-c", "pass"], env, cwd=project, wrap=wrap))
