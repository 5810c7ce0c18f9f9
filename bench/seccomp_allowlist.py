"""Experiment: the builtin deny-list filter against an allow-list filter, on real workloads.

    .venv/bin/python bench/seccomp_allowlist.py [--strace]

Two allow lists are built for x86_64:

- ``broad``: every call this libseccomp knows, minus BUILTIN_DENY, HOST_IPC_DENY and the
  calls a build or test never makes (ADMIN_ONLY); any other number (a call newer than
  the list) answers ENOSYS, as on an older kernel, so programs fall back. Both allow
  lists keep every argument rule of the Landlock filter.
- ``observed``: only the calls the workloads below made under strace (``--strace``),
  plus what the loader itself needs: the tightest list the workloads allow.

Each workload runs in a fresh folder under the deny-list filter (Landlock's), the broad
and the observed allow list; the table gives its exit status under each, the BPF size
and the worst path (bench/seccomp.py). Nothing leaves this machine: the pip install is
of a local wheel with --no-index, npm and cargo work offline.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
sys.path.insert(0, HERE)

from seccomp import worst_path  # noqa: E402  (bench/seccomp.py)

from sbxc.backends import seccomp as sc  # noqa: E402
from sbxc.compiler.plan import NET_ON, Network, SyscallPlan  # noqa: E402

# Calls that only host administration, debuggers or obsolete programs make.
ADMIN_ONLY = {
    "acct", "afs_syscall", "create_module", "get_kernel_syms", "getpmsg", "putpmsg", "query_module",
    "security", "tuxcall", "vserver", "sysfs", "ustat", "lookup_dcookie", "uselib", "_sysctl",
    "nfsservctl", "iopl", "ioperm", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "quotactl_fd",
    "vhangup", "syslog", "mount", "umount2", "pivot_root", "chroot", "fanotify_init",
}

WHEEL_META = "Metadata-Version: 2.1\nName: sbxcdemo\nVersion: 0.1\n"


def _wheel(folder: str) -> str:
    path = os.path.join(folder, "sbxcdemo-0.1-py3-none-any.whl")
    files = {
        "sbxcdemo/__init__.py": "X = 1\n",
        "sbxcdemo-0.1.dist-info/METADATA": WHEEL_META,
        "sbxcdemo-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("sbxcdemo-0.1.dist-info/RECORD", "".join(f"{n},,\n" for n in files)
                   + "sbxcdemo-0.1.dist-info/RECORD,,\n")
    return path


def workloads(folder: str) -> dict:
    wheel = _wheel(folder)
    out = {
        "python venv + pip install": f"/usr/bin/python3 -m venv v && v/bin/pip install -q --no-index {wheel} "
                                     "&& v/bin/python -c 'import sbxcdemo'",
        "gcc + make": "printf 'int main(void){return 0;}\\n' > m.c && printf 'm: m.c\\n\\tgcc -O2 -o m m.c\\n' > Makefile "
                      "&& make -s && ./m",
        "git init/add/commit": "git init -q r && cd r && echo x > f && git add f && "
                               "git -c user.email=a@b -c user.name=n commit -qm m",
    }
    if shutil.which("npm"):
        out["npm init + pack"] = "mkdir n && cd n && npm init -y >/dev/null && npm pack --silent >/dev/null"
    if shutil.which("cargo"):
        out["cargo build (no deps)"] = "cargo new -q --offline c && cd c && cargo build -q --offline"
    return out


def _known_calls() -> set:
    import pyseccomp as s

    names = set()
    for nr in range(0, 1024):
        try:
            n = s.resolve_syscall(s.Arch.X86_64, nr)
        except Exception:
            continue
        if n:
            names.add(n.decode() if isinstance(n, bytes) else n)
    return names


def broad_allow() -> set:
    return _known_calls() - set(sc.BUILTIN_DENY) - set(sc.HOST_IPC_DENY) - ADMIN_ONLY


def allow_filter(allowed: set) -> bytes:
    """The Landlock filter (network on, no root) with ``allowed`` as an allow list on top:
    the same argument rules, every other call ENOSYS."""
    return sc.export(sc.build_filter(SyscallPlan(tuple(sorted(sc.BUILTIN_DENY))), "x86_64", purpose="landlock",
                                     network=Network(NET_ON), host_ipc=True, allow_only=allowed))


LOADER = r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
bpf = bytes.fromhex(open(sys.argv[1]).read())
class F(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
buf = ctypes.create_string_buffer(bpf, len(bpf))
prog = F(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.syscall(317, 1, 0, ctypes.byref(prog)) == 0, ctypes.get_errno()
os.execv("/bin/sh", ["/bin/sh", "-c", sys.argv[2]])
'''


def run_under(bpf: bytes | None, script: str, base: str) -> tuple[int, str]:
    work = tempfile.mkdtemp(dir=base)
    env = dict(os.environ, HOME=work, CARGO_HOME=os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")),
               RUSTUP_HOME=os.environ.get("RUSTUP_HOME", os.path.expanduser("~/.rustup")),
               npm_config_cache=os.path.join(work, ".npm"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    if bpf is None:
        argv = ["/bin/sh", "-c", script]
    else:
        hexf = os.path.join(work, ".bpf")
        with open(hexf, "w") as f:
            f.write(bpf.hex())
        argv = [sys.executable, "-c", LOADER, hexf, script]
    p = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, (p.stderr or p.stdout)[-300:]


def observed_calls(scripts: dict, base: str) -> set:
    seen = set()
    for script in scripts.values():
        work = tempfile.mkdtemp(dir=base)
        out = os.path.join(work, ".strace")
        env = dict(os.environ, HOME=work, npm_config_cache=os.path.join(work, ".npm"),
                   CARGO_HOME=os.path.expanduser("~/.cargo"), RUSTUP_HOME=os.path.expanduser("~/.rustup"))
        subprocess.run(["strace", "-f", "-qq", "-c", "-U", "name", "-o", out, "/bin/sh", "-c", script],
                       cwd=work, env=env, capture_output=True, timeout=600)
        with open(out) as f:
            for line in f:
                w = line.strip()
                if w and w != "name" and not w.startswith("-") and w.isidentifier():
                    seen.add(w)
    # the loader's own calls after the filter is in place, and the exec itself
    return seen | {"execve", "exit_group", "exit", "rt_sigreturn", "brk", "mmap", "munmap", "close"}


def main() -> int:
    base = tempfile.mkdtemp(prefix="sbxc-allow-")
    try:
        scripts = workloads(base)
        deny = sc.compile_filter(SyscallPlan(tuple(sorted(sc.BUILTIN_DENY))), "x86_64", purpose="landlock",
                                 network=Network(NET_ON), host_ipc=True)
        broad = broad_allow()
        filters = {"deny list (Landlock)": deny, "allow: broad": allow_filter(broad)}
        if "--strace" in sys.argv and shutil.which("strace"):
            obs = observed_calls(scripts, base)
            filters["allow: observed"] = allow_filter(obs)
            print(f"observed: {len(obs)} distinct calls across the workloads")
        print(f"broad allow list: {len(broad)} calls (of {len(_known_calls())} libseccomp knows)")
        print(f"{'filter':24} {'instructions':>12} {'worst path':>10}")
        for name, bpf in filters.items():
            print(f"{name:24} {len(bpf) // 8:12d} {worst_path(bpf):10d}")
        print()
        print(f"{'workload':28} " + " ".join(f"{n:>22}" for n in ["none", *filters]))
        for wname, script in scripts.items():
            row = [run_under(None, script, base)]
            row += [run_under(bpf, script, base) for bpf in filters.values()]
            print(f"{wname:28} " + " ".join(f"{'ok' if rc == 0 else 'exit %d' % rc:>22}" for rc, _ in row))
            for (rc, err), fname in zip(row, ["none", *filters]):
                if rc != 0:
                    print(f"    {fname}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
