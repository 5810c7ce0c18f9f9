"""The builtin seccomp filter's size and worst-case path, binary tree against libseccomp's
default (linear) layout.

    .venv/bin/python bench/seccomp.py

Instruction count is the program's length; the worst path is the longest run of
instructions any one syscall can execute before a verdict (the per-syscall cost the
kernel pays on every call). The filter is classic BPF with forward jumps only, so the
longest path is a simple pass from the end of the program to its start.
"""
from __future__ import annotations

import os
import struct
import sys

BPF_JMP, BPF_RET, BPF_JA = 0x05, 0x06, 0x00


def instructions(bpf: bytes) -> list:
    return [struct.unpack_from("=HBBI", bpf, i) for i in range(0, len(bpf), 8)]


def worst_path(bpf: bytes) -> int:
    prog = instructions(bpf)
    n = len(prog)
    longest = [0] * (n + 1)
    for pc in range(n - 1, -1, -1):
        code, jt, jf, k = prog[pc]
        cls = code & 0x07
        if cls == BPF_RET:
            nxt = []
        elif cls == BPF_JMP:
            nxt = [pc + 1 + k] if (code & 0xF0) == BPF_JA else [pc + 1 + jt, pc + 1 + jf]
        else:
            nxt = [pc + 1]
        longest[pc] = 1 + max((longest[t] for t in nxt if t < n), default=0)
    return longest[0]


def main() -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from sbxc.backends import seccomp as sc
    from sbxc.compiler.plan import NET_OFF, NET_ON, NET_RULES, BUILTIN_SPAN, Network, NetRule, SyscallPlan

    plan = SyscallPlan(tuple(sorted(sc.BUILTIN_DENY)))
    rows = []
    nets = {
        "on": Network(NET_ON),
        "off": Network(NET_OFF),
        "rules": Network(NET_RULES, (NetRule("connect", "tcp", 443, 443, BUILTIN_SPAN),)),
    }
    for purpose, mode in (("bwrap", "on"), ("landlock", "on"), ("landlock", "off"), ("landlock", "rules")):
        for opt in (True, False):
            bpf = sc.export(sc.build_filter(plan, "x86_64", purpose=purpose, network=nets[mode], optimize=opt))
            rows.append((purpose, mode, "binary tree" if opt else "libseccomp default", len(bpf) // 8, worst_path(bpf)))
    print(f"builtin deny list: {len(sc.BUILTIN_DENY)} syscalls + {len(sc.BUILTIN_ARG_FILTERS)} argument filters")
    print(f"{'purpose':9} {'network':8} {'layout':20} {'instructions':>12} {'worst path':>10}")
    for r in rows:
        print(f"{r[0]:9} {r[1]:8} {r[2]:20} {r[3]:12d} {r[4]:10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
