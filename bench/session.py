"""Per-session workspaces: how long ``sbxc session start`` takes (cold, from the warm pool,
from a snapshot) against ``cp -a`` of the same tree, and ``exec --session`` against a
plain ``exec``; the pool's disk cost.

    .venv/bin/python bench/session.py [--files 10000] [--mb 200] [--runs 5] [--exec-runs 30]

The project is made in /var/tmp (on disk, as projects are): ``--files`` files of equal
size in 100 folders, ``--mb`` MiB in all, random bytes (nothing a file system could
compress or share). Everything runs through the launcher scripts/setup writes, in a root
of its own ($SBXC_ROOT under the benchmark's folder), removed at the end. Wall times are
of the whole command (interpreter start-up included), medians; the page cache is warm for
every variant alike (the first copy of each kind is thrown away).

Targets (ext4, no reflink): from the pool <= 50 ms, cold <= 1.2x cp -a, exec --session
<= plain exec + 5 ms.

"from the pool" is a start the pool's keeper vouched for (one question over its socket);
"from the pool, no keeper" is the same start after the keeper was told to leave, so the
start checks every entry itself (and spawns the refill that becomes the next keeper).
The load average is printed before and after: the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402


def make_tree(top: str, files: int, mb: int) -> None:
    size = (mb << 20) // files
    for d in range(100):
        os.makedirs(f"{top}/d{d:02}", exist_ok=True)
    for i in range(files):
        with open(f"{top}/d{i % 100:02}/f{i}", "wb") as f:
            f.write(os.urandom(size))


def timed(argv, env, cwd) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - t) * 1000
    if p.returncode != 0:
        sys.exit(f"{argv} failed: {p.stderr.decode()}")
    return ms, p.stdout.decode()


def wait_pool(root: str, want: int = 1, timeout: float = 600) -> None:
    """Until no refill is at work and ``want`` ready copies exist (in all pools)."""
    from sbxc.runtime.session_pool import refill_running

    pool = f"{root}/sessions/pool"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not os.path.isdir(pool):
            if want == 0:
                return
        else:
            fd = os.open(f"{root}/sessions", os.O_RDONLY | os.O_DIRECTORY)
            try:
                busy = refill_running(fd)
            finally:
                os.close(fd)
            ready = sum(n.startswith("e-") and os.path.isdir(f"{pool}/{k}/{n}/ws")
                        for k in os.listdir(pool) for n in os.listdir(f"{pool}/{k}"))
            if not busy and ready >= want:
                return
        time.sleep(0.05)
    sys.exit("the pool was not refilled in time")


def stop_keepers(root: str) -> None:
    from sbxc.runtime.session_ask import stop_keepers as stop

    if os.path.isdir(f"{root}/sessions"):
        fd = os.open(f"{root}/sessions", os.O_RDONLY | os.O_DIRECTORY)
        try:
            stop(fd)
        finally:
            os.close(fd)


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def du(path: str) -> int:
    return int(subprocess.run(["du", "-sb", path], stdout=subprocess.PIPE).stdout.split()[0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--exec-runs", type=int, default=30)
    ap.add_argument("--sbxc", default="")
    ap.add_argument("--pool-only", action="store_true",
                    help="only the two from-the-pool variants (to compare project sizes quickly)")
    args = ap.parse_args()
    sbxc = startup.installed_command(args.sbxc)
    work = tempfile.mkdtemp(prefix="sbxc-bench-session-", dir="/var/tmp")
    try:
        project = f"{work}/project"
        make_tree(project, args.files, args.mb)
        root = f"{work}/root"
        env = startup.bench_env()
        env["SBXC_ROOT"] = root

        def policy(pool: int) -> None:
            with open(f"{project}/sandbox.policy.yaml", "w") as f:
                f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: false\nworkspace: {{pool: {pool}}}\n")

        def start(*extra):
            ms, out = timed([sbxc, "session", "start", "--format", "json", *extra], env, project)
            return ms, json.loads(out)

        def stop(sid):
            timed([sbxc, "session", "stop", sid], env, project)

        print(f"load average before: {load()}")
        res = {"cp -a": [], "session start, cold": [], "session start, from the pool": [],
               "session start, from the pool, no keeper": [],
               "session start --from SNAPSHOT, cold": [], "session start --from SNAPSHOT, from the pool": []}
        policy(0)
        # cp -a and the cold start alternate, each after a sync: the write-back of one
        # 200 MB copy must not land on the other's clock.
        for i in range(0 if args.pool_only else args.runs + 1):
            dest = f"{work}/cp-{i}"
            os.sync()
            t = time.perf_counter()
            subprocess.run(["cp", "-a", project, dest], check=True)
            ms = (time.perf_counter() - t) * 1000
            shutil.rmtree(dest)
            if i:
                res["cp -a"].append(ms)
            os.sync()
            ms, got = start()
            assert got["method"] in ("copy", "reflink"), got
            stop(got["id"])
            if i:
                res["session start, cold"].append(ms)
        policy(1)
        ms, got = start()
        stop(got["id"])
        wait_pool(root)
        pool_bytes = du(f"{root}/sessions/pool")
        for i in range(args.runs + 1):
            wait_pool(root)
            ms, got = start()
            assert got["method"] == "pool" and got.get("pool_check") == "keeper", got
            stop(got["id"])
            if i:
                res["session start, from the pool"].append(ms)
        for i in range(args.runs + 1):
            wait_pool(root)
            stop_keepers(root)
            ms, got = start()
            assert got["method"] == "pool" and got.get("pool_check") == "entries", got
            stop(got["id"])
            if i:
                res["session start, from the pool, no keeper"].append(ms)
        wait_pool(root)
        if args.pool_only:
            stop_keepers(root)
            for name, xs in res.items():
                if xs:
                    print(f"{name:46} {statistics.median(xs):10.1f} {min(xs):8.1f}")
            print(f"project: {args.files} files; load average after: {load()}")
            return 0
        # The policy file lies in the project: rewriting it is a change the project's
        # keeper would answer by copying the project again, in the middle of the next
        # variants. It is told to leave first.
        stop_keepers(root)
        ms, snap = start()
        timed([sbxc, "session", "stop", snap["id"], "--snapshot", "bench"], env, project)
        stop_keepers(root)
        policy(0)
        for i in range(args.runs + 1):
            ms, got = start("--from", "bench")
            stop(got["id"])
            if i:
                res["session start --from SNAPSHOT, cold"].append(ms)
        policy(1)
        ms, got = start("--from", "bench")
        stop(got["id"])
        wait_pool(root)
        stop_keepers(root)
        for i in range(args.runs + 1):
            wait_pool(root, 2)
            ms, got = start("--from", "bench")
            assert got["method"] == "pool", got
            stop(got["id"])
            if i:
                res["session start --from SNAPSHOT, from the pool"].append(ms)

        # exec: plain against --session, alternated so drift hits both alike.
        wait_pool(root, 2)
        ms, got = start()
        sid = got["id"]
        wait_pool(root)  # the refill it started copies the project: not during the timings
        plain = [sbxc, "exec", "--", "/bin/true"]
        session = [sbxc, "exec", "--session", sid, "--", "/bin/true"]
        timed(plain, env, project)
        timed(session, env, project)
        ex = {"exec": [], "exec --session": []}
        for _ in range(args.exec_runs):
            ex["exec"].append(timed(plain, env, project)[0])
            ex["exec --session"].append(timed(session, env, project)[0])
        stop(sid)
        stop_keepers(root)

        size = du(project)
        print(f"project: {args.files} files, {size / 2**20:.0f} MiB (du -sb), in {work}")
        print(f"{'variant':46} {'median ms':>10} {'min ms':>8}")
        cp = statistics.median(res["cp -a"])
        for name, xs in list(res.items()) + list(ex.items()):
            print(f"{name:46} {statistics.median(xs):10.1f} {min(xs):8.1f}")
        cold = statistics.median(res["session start, cold"])
        print(f"cold / cp -a: {cold / cp:.2f}x (target <= 1.2x)")
        print(f"from the pool: {statistics.median(res['session start, from the pool']):.1f} ms (target <= 50 ms)")
        print(f"exec --session - exec: {statistics.median(ex['exec --session']) - statistics.median(ex['exec']):+.1f} ms "
              f"(target <= +5 ms)")
        print(f"load average after: {load()}")
        print(f"pool disk cost: {pool_bytes / 2**20:.0f} MiB for one ready copy of the project "
              f"({pool_bytes / size:.2f}x the project; pool: N costs N times that without reflink)")
    finally:
        # The last start's background refill may still be copying, and a keeper may be
        # watching: both end first.
        try:
            stop_keepers(f"{work}/root")
            wait_pool(f"{work}/root", 0, timeout=600)
        except SystemExit:
            pass
        subprocess.run(["rm", "-rf", work])
    return 0


if __name__ == "__main__":
    sys.exit(main())
