"""Start-up cost of ``sbxc exec --backend landlock`` with a cached plan, against the bare
command and against the bwrap backend (and raw bwrap, for scale).

    .venv/bin/python bench/landlock.py [RUNS]

Each variant runs ``/bin/true`` RUNS times (default 60) after two warm-up runs (the first
compiles and caches the plan); runs are interleaved so drift hits every variant alike.
Prints the median and the 90th percentile wall time in milliseconds.
Target (issue 4): landlock median <= 25 ms on the reference machine.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import remove_project_cache  # noqa: E402
import time

POLICY = """sbxc: 1
extends: [builtin:default]
network: false
"""


def sbxc_bin() -> str:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for cand in (os.path.join(os.path.dirname(sys.executable), "sbxc"), os.path.join(here, ".venv", "bin", "sbxc")):
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("sbxc") or "sbxc"


def main(argv) -> int:
    runs = int(argv[0]) if argv else 60
    work = tempfile.mkdtemp(prefix="sbxc-bench-", dir="/var/tmp")
    proj = os.path.join(work, "proj")
    os.makedirs(proj)
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write(POLICY)
    sbxc = sbxc_bin()
    variants = {
        "bare /bin/true": ["/bin/true"],
        "sbxc exec --backend landlock": [sbxc, "exec", "--backend", "landlock", "--", "/bin/true"],
    }
    bwrap = shutil.which("bwrap")
    if bwrap and subprocess.run([bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true"],
                                capture_output=True).returncode == 0:
        variants["sbxc exec --backend bwrap"] = [sbxc, "exec", "--backend", "bwrap", "--", "/bin/true"]
        variants["raw bwrap --ro-bind / / --dev --proc"] = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev",
                                                            "--proc", "/proc", "--", "/bin/true"]
    times = {k: [] for k in variants}
    try:
        for cmd in variants.values():
            for _ in range(2):
                p = subprocess.run(cmd, cwd=proj, capture_output=True)
                if p.returncode != 0:
                    print(f"failed: {cmd}: {p.stderr.decode(errors='replace').strip()}")
                    return 1
        for _ in range(runs):
            for name, cmd in variants.items():
                t = time.perf_counter()
                subprocess.run(cmd, cwd=proj, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[name].append((time.perf_counter() - t) * 1000)
    finally:
        # The project's cache folder lives under the cache root, not in work/.
        remove_project_cache(proj)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'variant':40} {'median ms':>10} {'p90 ms':>8}   ({runs} runs, uid {os.getuid()})")
    for name, ts in times.items():
        ts.sort()
        print(f"{name:40} {statistics.median(ts):10.1f} {ts[int(len(ts) * 0.9) - 1]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
