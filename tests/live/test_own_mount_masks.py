"""A ``mask`` under the sandbox's own /proc or /dev hides what is there inside.

bwrap and runc give every sandbox a fresh procfs and a minimal /dev, and both still show
host-wide state: the kernel's files in /proc (``/proc/cpuinfo``, the sysctls under
``/proc/sys``) and the few /dev entries (``/dev/shm``). A mask there must be mounted like
any other; the report once called it enforced while nothing covered it. Under Landlock
the same masks deny every access (the report says ``partial``: the names stay). The
control runs the same probe under the same backend without the masks and sees the files.

A rule on one process's entry (``/proc/self/...``, ``/proc/PID/...``, or a link into
them such as ``/proc/net`` or ``/dev/fd``) is refused when compiled (SBX056): resolved
by the compiler it would name the compiler's own process, never the command's.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import base_env, run, runc_for, sbxc_argv

pytestmark = pytest.mark.live

MASKS = "  - mask /proc/cpuinfo /proc/sys/kernel/hostname /dev/shm\n"
PROBE = ("head -c 200 /proc/cpuinfo 2>/dev/null | grep -c '^processor' ; "
         "echo host=$(cat /proc/sys/kernel/hostname 2>/dev/null) ; "
         "touch /dev/shm/sbxc-probe 2>/dev/null && echo SHM-WRITTEN && rm -f /dev/shm/sbxc-probe ; "
         "(echo x > /proc/cpuinfo) 2>/dev/null && echo CPUINFO-WRITTEN ; "
         "echo done")


def _policy(backend: str, masks: bool) -> str:
    return (f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\n"
            + ("filesystem:\n" + MASKS if masks else ""))


@pytest.mark.parametrize("backend", ["bwrap", "oci", "landlock"])
def test_masks_over_the_sandboxes_own_proc_and_dev(backend, sbxc, request):
    runc_for(request)
    hostname = open("/proc/sys/kernel/hostname").read().strip()
    assert hostname
    # Control: the same probe in the same sandbox, without the masks, sees all three.
    free = sbxc(_policy(backend, False), "/bin/sh", "-c", PROBE)
    assert free.rc == 0, free
    lines = free.out.split("\n")
    assert lines[0].strip() == "1" and f"host={hostname}" in free.out, free
    if backend != "landlock":  # builtin:default gives Landlock no /dev/shm to write
        assert "SHM-WRITTEN" in free.out, free
    assert "CPUINFO-WRITTEN" not in free.out, free  # unmasked, the kernel's file refuses it

    r = sbxc(_policy(backend, True), "/bin/sh", "-c", PROBE)
    assert r.rc == 0 and r.out.rstrip().endswith("done"), r
    lines = r.out.split("\n")
    assert lines[0].strip() == "0", r  # no CPU's line: the file reads empty or not at all
    assert "host=\n" in r.out and hostname not in r.out, r
    assert "SHM-WRITTEN" not in r.out, r

    # The report says what the run showed.
    report = run(sbxc_argv("compile", "--check", "--verbose", "--format", "json", "--backend", backend,
                           "--policy", os.path.join(sbxc.project, "sandbox.policy.yaml")),
                 env=base_env(sbxc.home), cwd=sbxc.project)
    assert report.rc == 0, report
    got = {v["subject"]: v["status"] for v in json.loads(report.out)["report"][backend]["verdicts"]}
    # On OCI a file there is masked with /dev/null (runc's maskedPaths), which takes a
    # write and drops it: partial, as the write above shows; its folder mask is a
    # read-only tmpfs. bwrap's empty read-only file refuses the write.
    assert ("CPUINFO-WRITTEN" in r.out) == (backend == "oci"), r
    want = {"bwrap": ("enforced", "enforced"), "oci": ("partial", "enforced"),
            "landlock": ("partial", "partial")}[backend]
    for path in ("/proc/cpuinfo", "/proc/sys/kernel/hostname"):
        assert got[f"mask {path}"] == want[0], got
    assert got["mask /dev/shm"] == want[1], got


@pytest.mark.parametrize("path", ["/proc/self/environ", "/proc/thread-self/status", "/proc/1/environ",
                                  "/proc/net/dev", "/proc/mounts", "/dev/fd", "/dev/stdin"])
def test_a_rule_on_one_process_entry_is_refused(path, sbxc):
    pol = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(pol, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - mask {path}\n")
    r = run(sbxc_argv("compile", "--check", "--policy", pol), env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 1 and "[SBX056]" in r.out and "sandbox.policy.yaml:4:10: error" in r.out, r
    # Control: a kernel-wide file of /proc compiles.
    with open(pol, "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\nfilesystem:\n  - mask /proc/cpuinfo\n")
    r = run(sbxc_argv("compile", "--check", "--policy", pol), env=base_env(sbxc.home), cwd=sbxc.project)
    assert r.rc == 0, r


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
def test_a_mask_of_a_host_network_device_sysctl(backend, sbxc, request):
    """/proc/sys/net/ipv4/conf holds one folder per device of the opener's network
    namespace. With the network off the sandbox's namespace has loopback only: a mask of
    the host's device there has nothing to cover (bwrap could not even make its mount
    point, and every run failed with 125). With the network on, the device is there and
    the mask covers it (the control: the same file, read without the mask)."""
    runc_for(request)
    conf = "/proc/sys/net/ipv4/conf"
    devices = sorted(d for d in os.listdir(conf) if d not in ("all", "default", "lo"))
    assert devices, "this host has no network device but loopback"
    path = f"{conf}/{devices[0]}"
    probe = f"cat {path}/forwarding 2>/dev/null; echo rc=$?"
    base = f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\n"
    r = sbxc(base + f"network: false\nfilesystem:\n  - mask {path}\n", "/bin/sh", "-c", probe)
    assert r.rc == 0 and "rc=" in r.out, r
    if backend == "bwrap":
        free = sbxc(base + "network: true\n", "/bin/sh", "-c", probe)
        assert free.rc == 0 and free.out.split("\n")[0] in ("0", "1"), free
        r = sbxc(base + f"network: true\nfilesystem:\n  - mask {path}\n", "/bin/sh", "-c", probe)
        assert r.rc == 0 and r.out.split("\n")[0].startswith("rc="), r


@pytest.mark.parametrize("whole", ["/proc", "/dev"])
def test_runc_cannot_mask_its_own_proc_or_dev_whole(whole, sbxc):
    """runc reads /proc/self/fd and /dev/null while it sets the container up: a mask of
    either folder as a whole is not enforceable on OCI (compiled as an error, not reported
    enforced and then refused by every run). bwrap runs it (the control)."""
    pol = os.path.join(sbxc.project, "sandbox.policy.yaml")
    with open(pol, "w") as f:
        f.write(f"sbxc: 1\nextends: [builtin:default]\nnetwork: false\nfilesystem:\n  - mask {whole}\n")
    r = run(sbxc_argv("compile", "--check", "--backend", "oci", "--policy", pol), env=base_env(sbxc.home),
            cwd=sbxc.project)
    assert r.rc == 1 and f"oci: mask {whole}: not enforceable" in r.out, r
    r = sbxc(open(pol).read(), "/bin/echo", "ran", args=("--backend", "bwrap"))
    assert (r.rc, r.out) == (0, "ran\n"), r


@pytest.mark.parametrize("backend", ["bwrap", "oci"])
def test_a_mask_of_a_missing_path_below_a_dev_entry_needs_nothing(backend, sbxc, request):
    """Below an entry of the sandbox's own /dev, what this host lacks the sandbox lacks too:
    nothing is mounted (bwrap could not make /dev/pts/0 and refused every run; under
    /dev/shm the mount point would have made the path appear). The control: /dev/shm
    itself, an entry of the sandbox's /dev, is still masked."""
    runc_for(request)
    for path in ("/dev/pts/0", "/dev/shm/sbxc-nofile"):
        assert not os.path.exists(path) or path == "/dev/pts/0" and not os.path.exists(path)
    pol = (f"sbxc: 1\nextends: [builtin:default]\nbackend: {backend}\nnetwork: false\nfilesystem:\n"
           "  - mask /dev/pts/0 /dev/shm/sbxc-nofile\n")
    probe = "ls -d /dev/pts/0 /dev/shm/sbxc-nofile 2>/dev/null; touch /dev/shm/x && echo SHM-WRITTEN; echo done"
    r = sbxc(pol, "/bin/sh", "-c", probe)
    assert r.rc == 0 and r.out.endswith("done\n") and "/dev/" not in r.out.replace("SHM-WRITTEN", ""), r
    assert "SHM-WRITTEN" in r.out, r  # /dev/shm itself stays the sandbox's, writable
    r = sbxc(pol.replace("/dev/shm/sbxc-nofile", "/dev/shm"), "/bin/sh", "-c", probe)
    assert r.rc == 0 and "SHM-WRITTEN" not in r.out, r
