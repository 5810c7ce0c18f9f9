"""Wall time of ordinary toolchain work under its builtin profile against the same commands
run bare, side by side in one run.

    .venv/bin/python bench/toolchains.py [--runs 7] [--backend bwrap] [--backend landlock]
        [--only NAME ...]

Each workload is one shell script, run in its own project folder with everything it needs
made here first (nothing is fetched; the network is off under the profile):

- ``pip``: ``python -m venv --without-pip``, then ``pip install`` of a wheel built here
  into it (``--no-index``), then the package imported (builtin:python);
- ``pytest``: ``python -m pytest`` of a small test file (builtin:python);
- ``npm``: ``npm pack`` of a local package, ``npm install`` of the tarball into an app,
  ``npm test`` of the app (builtin:node);
- ``cargo``: ``cargo build --offline`` of a crate without dependencies, from a clean target
  folder, then the binary run (builtin:rust; Debian's cargo and rustc);
- ``git``: ``git init``, ``add``, ``commit`` of a fresh repository of 300 files (builtin:git);
- ``make``: ``make`` of a C program with gcc from a clean tree (builtin:default).

Each script first removes what its last run made, so every run does the same work. The
bare run gets a home folder of its own (the tools' caches land there, warm after the
first run), the same PATH and LANG; the sandboxed run is ``sbxc exec`` of a policy that
extends the profile, with ``network: false``, its plan cached and its per-project cache
warm (the first run of each variant is not timed). Bare and sandboxed runs alternate, in
turn first, so drift hits both alike. Reported per workload and backend: the median and
spread of each, the time sbxc adds and the ratio of the medians against the target (at
most 1.3x). The time added is mostly the fixed start-up of a sandbox (``bench/exec.py``,
some 20 ms here): any command shorter than about 70 ms exceeds the ratio on that alone.

Landlock as root refuses chmod of the command's own files and running what it built
(``compile --check`` says so before the run: "use bwrap for root"); a workload that cannot
run there is reported as such, with the first line of its error, and not timed.

Every run uses a private SBXC_ROOT under the benchmark's temporary folder: nothing is
written to the user's plans folder or caches, and it is all removed at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402

TARGET = 1.3
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def _tool(name: str) -> str:
    found = shutil.which(name, path=SYSTEM_PATH)
    if not found:
        sys.exit(f"toolchains: {name} is not installed (scripts/setup and .ci/run install it)")
    return found


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _wheel(folder: str) -> str:
    name = os.path.join(folder, "benchprobe-1.0-py3-none-any.whl")
    files = {
        "benchprobe/__init__.py": "VALUE = 'installed'\n",
        "benchprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: benchprobe\nVersion: 1.0\n",
        "benchprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + "benchprobe-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(name, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
        z.writestr("benchprobe-1.0.dist-info/RECORD", record)
    return os.path.basename(name)


def _python() -> str:
    """Debian's interpreter (with its venv module), the one a project would use."""
    return _tool("python3")


def make_pip(project: str):
    py = _python()
    wheel = _wheel(project)
    script = (f"rm -rf env && {py} -m venv --without-pip env && "
              f"{py} -m pip --python env/bin/python install --no-index --no-deps --disable-pip-version-check -q "
              f"{wheel} && env/bin/python -c 'import benchprobe; print(benchprobe.VALUE)'")
    return "python", script, "installed"


def make_pytest(project: str):
    _write(os.path.join(project, "test_sample.py"),
           "".join(f"def test_{i}():\n    assert sum(range({i})) == {i * (i - 1) // 2}\n\n" for i in range(20)))
    # The benchmark's own interpreter has pytest (a test dependency of sbxc).
    script = f"{sys.executable} -m pytest -q -p no:cacheprovider test_sample.py"
    return "python", script, "20 passed"


def make_npm(project: str):
    npm = _tool("npm")
    _write(os.path.join(project, "lib", "package.json"), '{"name": "bench-lib", "version": "1.0.0", "main": "index.js"}\n')
    _write(os.path.join(project, "lib", "index.js"), "module.exports = (a, b) => a + b;\n")
    _write(os.path.join(project, "app", "package.json"),
           '{"name": "app", "version": "1.0.0", "private": true, '
           '"scripts": {"test": "node -e \\"process.exit(require(\'bench-lib\')(2, 2) === 4 ? 0 : 1)\\" '
           '&& echo tests passed"}}\n')
    flags = "--no-audit --no-fund --no-update-notifier --offline"
    script = ("rm -rf lib/*.tgz app/node_modules app/package-lock.json && "
              f"cd lib && {npm} pack -q {flags} >/dev/null && cd ../app && "
              f"{npm} install {flags} ../lib/bench-lib-1.0.0.tgz >/dev/null && {npm} test {flags}")
    return "node", script, "tests passed"


def make_cargo(project: str):
    cargo, rustc = _tool("cargo"), _tool("rustc")
    _write(os.path.join(project, "hello", "Cargo.toml"),
           '[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n')
    _write(os.path.join(project, "hello", "src", "main.rs"), 'fn main() { println!("built by cargo"); }\n')
    script = f"cd hello && rm -rf target && RUSTC={rustc} {cargo} build --offline -q && ./target/debug/hello"
    return "rust", script, "built by cargo"


def make_git(project: str):
    git = _tool("git")
    # A small project's worth of files: 300 of them in 10 folders.
    for i in range(300):
        _write(os.path.join(project, "files", f"d{i % 10}", f"f{i}.txt"), f"line {i}\n" * 20)
    script = (f"rm -rf repo && {git} init -q repo && cp -r files repo/ && cd repo && {git} add files && "
              f"{git} -c user.name=b -c user.email=b@example.invalid commit -q -m first && {git} log --format=%s")
    return "git", script, "first"


def make_make(project: str):
    make = _tool("make")
    _tool("gcc")
    for i in range(4):
        _write(os.path.join(project, f"part{i}.c"), f"int part{i}(void) {{ return {i}; }}\n")
    _write(os.path.join(project, "main.c"),
           "#include <stdio.h>\n" + "".join(f"int part{i}(void);\n" for i in range(4))
           + 'int main(void) { printf("built by make %d\\n", part0() + part1() + part2() + part3()); return 0; }\n')
    objs = " ".join(f"part{i}.o" for i in range(4)) + " main.o"
    _write(os.path.join(project, "Makefile"), f"hello: {objs}\n\tgcc -o hello {objs}\n%.o: %.c\n\tgcc -O1 -c $<\n")
    script = f"rm -f hello *.o && {make} -s && ./hello"
    return "default", script, "built by make 6"


WORKLOADS = {"pip": make_pip, "pytest": make_pytest, "npm": make_npm, "cargo": make_cargo, "git": make_git,
             "make": make_make}


def _run(argv, env, cwd, timeout=600):
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    return time.perf_counter() - t, r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--backend", action="append", choices=("bwrap", "landlock"))
    ap.add_argument("--only", action="append", choices=sorted(WORKLOADS))
    ap.add_argument("--sbxc", default="", help="the launcher (default: this venv's bin/sbxc)")
    args = ap.parse_args()
    backends = args.backend or ["bwrap", "landlock"]
    names = args.only or list(WORKLOADS)
    sbxc = startup.installed_command(args.sbxc)
    work = tempfile.mkdtemp(prefix="sbxc-bench-tools-", dir="/var/tmp")
    rows = []
    try:
        root = os.path.join(work, "sbxc-root")
        for backend in backends:
            for name in names:
                project = os.path.join(work, f"{backend}-{name}")
                home = os.path.join(work, f"home-{backend}-{name}")
                os.makedirs(project)
                os.makedirs(home)
                profile, script, expect = WORKLOADS[name](project)
                # The policy sits beside the work; the interpreter running pytest may live
                # under a folder the default profile does not show (a checkout in /tmp).
                with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
                    f.write(f"sbxc: 1\nextends: [builtin:{profile}]\nbackend: {backend}\nnetwork: false\n"
                            f"filesystem:\n  - read {sys.prefix}\n")
                env = {"PATH": SYSTEM_PATH, "HOME": home, "LANG": "C.UTF-8", "SBXC_ROOT": root}
                bare = ["sh", "-c", script]
                boxed = [sbxc, "exec", "--", "sh", "-c", script]
                _, r = _run(bare, env, project)
                if r.returncode != 0 or expect not in r.stdout:
                    sys.exit(f"toolchains: {name} fails bare (exit {r.returncode}): {(r.stderr or r.stdout)[-400:]}")
                _, r = _run(boxed, env, project)
                if r.returncode != 0 or expect not in r.stdout:
                    first = ((r.stderr or r.stdout).strip().splitlines() or [""])[0]
                    rows.append((backend, name, None, None, f"does not run here (exit {r.returncode}): {first[:160]}"))
                    continue
                times = {"bare": [], "sbxc": []}
                for i in range(args.runs):
                    order = [("bare", bare), ("sbxc", boxed)]
                    for label, argv in (order if i % 2 == 0 else order[::-1]):
                        dt, r = _run(argv, env, project)
                        if r.returncode != 0 or expect not in r.stdout:
                            sys.exit(f"toolchains: {name} ({label}, {backend}) failed: {(r.stderr or r.stdout)[-400:]}")
                        times[label].append(dt * 1000)
                rows.append((backend, name, times["bare"], times["sbxc"], ""))
        print(f"{args.runs} alternating runs per workload, uid {os.getuid()}, {os.cpu_count()} CPUs, command {sbxc}")
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
        print(f"{'backend':9} {'workload':8} {'bare ms':>9} {'(min-max)':>15} {'sbxc ms':>9} {'(min-max)':>15} "
              f"{'+ms':>6} {'ratio':>6}  target <= {TARGET}x")
        worst = 0.0
        for backend, name, bare_t, boxed_t, note in rows:
            if bare_t is None:
                print(f"{backend:9} {name:8} {note}")
                continue
            b, s = statistics.median(bare_t), statistics.median(boxed_t)
            ratio = s / b
            worst = max(worst, ratio)
            print(f"{backend:9} {name:8} {b:9.0f} {f'({min(bare_t):.0f}-{max(bare_t):.0f})':>15} {s:9.0f} "
                  f"{f'({min(boxed_t):.0f}-{max(boxed_t):.0f})':>15} {s - b:+6.0f} {ratio:6.2f}  {'met' if ratio <= TARGET else 'NOT met'}")
        print(f"largest ratio: {worst:.2f} (target: at most {TARGET})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
