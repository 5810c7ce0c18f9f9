"""OCI backend: ``lower(plan, host) -> Lowered`` with an OCI runtime-spec ``config.json``.

Pure: no disk, no environment, no clock. The same lowering feeds ``sbxc exec --backend
oci`` (runc), ``sbxc compile --backend oci -o DIR`` (a bundle) and ``sbxc export
kubernetes``.

``Lowered.data``::

    {"config": {...},           # config.json without the run's command, environment and folder
     "network": "on" | "off" | "rules" | "hosts",
     "links": [[link, target], ...]}  # only when there are any: symlinks to make in rootfs

The runtime fills in ``process.args``, ``process.env`` and ``process.cwd``; everything
else is here. Paths in the config are relative to the bundle where they are sbxc's own:
``root.path`` is ``rootfs`` (an empty folder the runtime makes) and masked files are
bound from ``sbxc-empty`` (an empty regular file beside it). runc resolves both against
the bundle folder.

How each kind of rule is mounted, and why (the same reasoning as the bwrap backend):

- ``read`` -> a recursive bind with ``rro`` (every mount below is read-only too, through
  mount_setattr; a plain ``ro`` would only cover the top one), ``nosuid``, ``nodev`` and
  their recursive forms ``rnosuid``, ``rnodev``;
  ``write`` -> the same, read-write; ``tmpfs`` -> a tmpfs mount.
- ``mask`` of a folder -> a tmpfs that ``linux.readonlyPaths`` turns read-only after every
  other mount: runc applies readonlyPaths last, so deeper rules (the project under a
  hidden home, the cache under its masked root) still get their mount points made in it.
- ``mask`` of a file, socket or device -> the empty regular file bound read-only. runc's
  own ``maskedPaths`` would bind /dev/null, which anyone may write to (the write vanishes,
  but "no write" is what a mask promises); connecting to a regular file fails. Under
  ``/proc`` and ``/dev`` maskedPaths is the only way (runc mounts nothing else there), so
  a file masked there is ``partial``.
- ``mask`` of a missing path: nothing to hide; under a writable parent the verdict is
  ``partial`` (runc would create the mount point on the host to mount on it).
- A rule below a ``write`` rule: the folders between the two are bound onto themselves,
  so that renaming a parent cannot step around the deeper rule (EBUSY on a mount point).
- ``/proc``, ``/dev``: the sandbox's own (a fresh procfs for the PID namespace with
  ``/proc/sys`` read-only and the kernel files runtimes usually mask; a minimal /dev).

Identity: as root, uid 0 is mapped onto itself. A user's runc (rootless) can map one id
only, and runc needs the container's root mapped, so the caller's uid shows as 0 inside:
the same files, no capabilities (every capability set is empty, no new privileges).
"""
from __future__ import annotations

from ..compiler.plan import (
    BUILTIN_SPAN, KIND_DIR, KIND_MISSING, KIND_OTHER, MASK, NET_HOSTS, NET_OFF, NET_ON, NET_RULES,
    READ, TMPFS, WRITE, Plan, is_within, path_depth,
)
from ..verdict import ENFORCED, HOST_MOUNTS, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED, verdict
from .lowered import Lowered
from .mountrules import folders_between as _between, host_network_verdicts, parent_rule as _parent_rule, settled
from .mountrules import rule_subject as _subject, session_verdicts

NAME = "oci"
OCI_VERSION = "1.0.2"
EMPTY_FILE = "sbxc-empty"
"""The bundle's empty regular file that masked files are bound from (relative to the bundle)."""
ROOTFS = "rootfs"

_SPEC_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}
_BIND = ("rbind", "nosuid", "nodev", "rnosuid", "rnodev")
"""``nosuid``/``nodev`` reach the top mount only; ``rnosuid``/``rnodev`` (mount_setattr with
AT_RECURSIVE, as ``rro``) every mount below it too, as bwrap's binds do: a device node on a
mount under a ``read`` rule stays unusable without the device cgroup (rootless runc has
none)."""

# Kernel files that container runtimes hide by default: they show host-wide state (kernel
# memory, keys of other users, timers, scheduler internals). Hiding them is narrower
# than bwrap's /proc, never wider.
PROC_MASKED = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
               "/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats", "/sys/firmware")
# /proc/sys: a sysctl file answers for the opener's namespaces, but some (drop_caches)
# check only the owner's write bit, which uid 0 in a user namespace has on a fresh procfs.
PROC_READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

_DEV_MOUNTS = (
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
     "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
     "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
)


DEV_FILES = ("null", "zero", "full", "random", "urandom", "tty", "console", "pts", "ptmx", "shm", "mqueue", "fd",
             "stdin", "stdout", "stderr", "core")
"""What runc's own /dev holds (``_DEV_MOUNTS`` and the nodes and links runc makes): a mask
of one of these goes through maskedPaths."""


def bind(path: str, writable: bool) -> dict:
    return {"destination": path, "type": "bind", "source": path,
            "options": list(_BIND) + (["rw"] if writable else ["rro"])}


def tmpfs(path: str) -> dict:
    return {"destination": path, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=0755"]}


def empty_file(path: str) -> dict:
    return {"destination": path, "type": "bind", "source": EMPTY_FILE, "options": ["bind", "ro", "nosuid", "nodev", "noexec"]}


def filesystem(plan: Plan):
    """(mounts, readonly paths, verdicts, links to make in the rootfs) for ``plan.fs``:
    mounts in setup order, parents before children."""
    verdicts = []
    ops: list[tuple[tuple[int, str, int], dict]] = []
    readonly: list[str] = []
    masked: list[str] = []
    self_binds: set[str] = set()
    by_path = {r.path: r for r in plan.fs}
    seq = 0

    def add(path: str, mount: dict) -> None:
        nonlocal seq
        seq += 1
        ops.append(((path_depth(path), path, seq), mount))

    add("/proc", {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "nodev", "noexec"]})
    for m in _DEV_MOUNTS:
        add(m["destination"], {k: (list(v) if isinstance(v, list) else v) for k, v in m.items()})

    for rule in plan.fs:
        subj = _subject(rule, plan)
        p = rule.path
        parent = _parent_rule(by_path, p)
        parent_access = parent.access if parent is not None else None
        cache_rule = rule.origin == "cache"  # made by the runtime before runc starts
        missing = rule.kind == KIND_MISSING and not cache_rule
        if rule.access == MASK and p in ("/proc", "/dev"):
            # runc needs its own: it reads /proc/self/fd and /dev/null while it sets up.
            verdicts.append(verdict(NAME, subj, NOT_ENFORCEABLE, rule.span,
                                    f"runc cannot start a container without {p}; mask the paths in it instead"))
            continue
        done = settled(NAME, rule, subj, parent_access, missing, DEV_FILES, plan.network.mode != NET_ON)
        if done is not None:
            verdicts.append(done)
            continue
        if rule.access == MASK and (is_within(p, "/proc") or is_within(p, "/dev")):
            # Over runc's own /proc or /dev: runc refuses mounts into /proc (but for a few
            # files) and makes /dev's nodes after the config's mounts, so such a mask goes
            # through maskedPaths, which runc applies once everything else is there: a
            # read-only tmpfs over a folder, /dev/null over a file (reads find nothing;
            # a write is taken and dropped, where bwrap's empty file refuses it).
            masked.append(p)
            if rule.kind == KIND_DIR:
                verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
            else:
                verdicts.append(verdict(NAME, subj, PARTIAL, rule.span,
                                        "runc masks it with /dev/null (maskedPaths; it mounts nothing else "
                                        "there): reads find nothing, but a write is accepted and dropped, "
                                        "and the path shows as a character device"))
            continue

        if rule.access != MASK and missing:
            verdicts.append(verdict(NAME, subj, NOT_ENFORCEABLE, rule.span,
                                    "the path does not exist; runc cannot mount it"))
            continue

        if parent_access == WRITE:
            for d in _between(parent.path, p):
                if d not in by_path and d not in self_binds:
                    self_binds.add(d)
                    add(d, bind(d, True))

        kind = KIND_DIR if cache_rule else rule.kind
        if rule.access == MASK:
            if kind == KIND_DIR:
                add(p, tmpfs(p))
                readonly.append(p)
            else:
                add(p, empty_file(p))
            verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
        elif rule.access == TMPFS:
            if kind == KIND_DIR:
                add(p, tmpfs(p))
                verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
            else:
                add(p, empty_file(p))
                verdicts.append(verdict(NAME, subj, NARROWED, rule.span,
                                        f"a tmpfs needs a folder and this is a {kind}: it is shown empty and read-only"))
        elif rule.access in (READ, WRITE):
            add(p, bind(p, rule.access == WRITE))
            if kind == KIND_OTHER:
                verdicts.append(verdict(NAME, subj, NARROWED, rule.span,
                                        "the binds are nodev: a device node there cannot be opened"))
            else:
                verdicts.append(verdict(NAME, subj, ENFORCED, rule.span))
        else:
            raise ValueError(f"unknown access {rule.access!r}")

    for s in plan.skipped:
        verdicts.append(verdict(NAME, f"{s.access}? {s.path}", SKIPPED, s.span, s.reason))
    # A link on the way to a rule's spelling (merged-/usr /bin -> usr/bin): under a bind of
    # the host's folder it is there already; in the root it is made in the bundle's rootfs
    # folder (``links``: the runner and ``sbxc compile -o`` make them, with the host's
    # target text, before runc mounts anything); in a tmpfs it cannot be (runc mounts the
    # tmpfs over the rootfs, and OCI has no way to make a file in it).
    links = []
    for link, target, span in plan.links:
        holder = _parent_rule(by_path, link)
        if holder is None:
            links.append([link, target])
        elif holder.access == TMPFS:
            verdicts.append(verdict(NAME, f"link {link}", NARROWED, span,
                                    f"{link} is a symlink (to {target}) on the host, inside a tmpfs here, which OCI "
                                    "cannot make it in: the rule's real path is mounted, reach it by that path"))
        elif holder.access == MASK:
            verdicts.append(verdict(NAME, f"link {link}", NARROWED, span,
                                    f"{link} is a symlink (to {target}) on the host, inside a masked folder here, "
                                    "which stays empty: reach the rule's real path by that path"))
    mounts = [m for _key, m in sorted(ops, key=lambda o: o[0])]
    return mounts, readonly, masked, verdicts, links


_RUNC_HOME = ("runc sets HOME when the command's environment has none (an empty one too): to the "
              "home folder of the container's uid 0 in /etc/passwd as the sandbox shows it (/root on most "
              "hosts), else /")


def _env_verdict(plan: Plan):
    """runc 1.1 adds HOME to a process environment without one, and no config field stops
    it: exact only when the policy sets HOME itself."""
    import fnmatch

    if any(k == "HOME" for k, _ in plan.env.set):
        return verdict(NAME, "env", ENFORCED, plan.env.span)
    if any(fnmatch.fnmatchcase("HOME", p) for p in plan.env.passed):
        return verdict(NAME, "env", ENFORCED, plan.env.span,
                       "the caller's HOME passes; for a caller without one, runc sets it (from /etc/passwd)")
    return verdict(NAME, "env", PARTIAL, plan.env.span,
                   f"HOME is neither passed nor set, but {_RUNC_HOME}; set it (env.set) to choose the value")


# ------------------------------------------------------------------ seccomp as JSON

class _Recorder:
    """Stands in for a libseccomp filter: keeps the rules in the order they are added."""

    def __init__(self, default):
        self.default = default
        self.rules: list = []

    def add_rule(self, action, syscall, *args):
        self.rules.append((action, syscall, args))

    def add_arch(self, arch):
        pass

    def remove_arch(self, arch):
        pass

    def set_attr(self, attr, value):
        pass


class _Lib:
    """pyseccomp's interface as ``seccomp.build_filter`` uses it: syscall names and
    architectures come from libseccomp itself, the rules are recorded."""

    ALLOW = ("SCMP_ACT_ALLOW", None)
    EQ, NE, GE, GT, LE, LT, MASKED_EQ = ("SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_GE", "SCMP_CMP_GT",
                                         "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ")

    def __init__(self, real):
        self._real = real
        self.Arch = real.Arch
        self.Attr = real.Attr
        self.filter = None

    def ERRNO(self, errno_value):  # noqa: N802 (pyseccomp's name)
        return ("SCMP_ACT_ERRNO", errno_value)

    def Arg(self, index, op, value, value_two=0):  # noqa: N802
        return {"index": index, "op": op, "value": value, "valueTwo": value_two}

    def SyscallFilter(self, default):  # noqa: N802
        self.filter = _Recorder(default)
        return self.filter

    def system_arch(self):
        return self._real.system_arch()

    def resolve_syscall(self, arch, name):
        return self._real.resolve_syscall(arch, name)


def seccomp_json(plan: Plan, arch: str) -> dict:
    """The syscall policy in the runtime-spec's ``linux.seccomp`` form: the rules the BPF
    of the other backends is built from (``seccomp.build_filter``, purpose ``bwrap``: the
    namespaces do the rest), one entry per libseccomp rule and in the same order, so that
    runc's libseccomp builds the same filter. runc adds each entry's conditions as one rule
    (they are and-ed) as long as no argument is compared twice; that is checked here."""
    from . import seccomp

    if arch not in _SPEC_ARCH:
        raise ValueError(f"seccomp: unsupported architecture {arch!r}")
    lib = _Lib(seccomp._pyseccomp())
    seccomp.build_filter(plan.syscalls, arch, purpose="bwrap", network=plan.network, lib=lib)
    entries: list[dict] = []
    for (action, errno_value), syscall, args in lib.filter.rules:
        if not isinstance(syscall, str):
            # runc takes names and skips a name its libseccomp does not know: a call
            # refused by number only cannot be written here without silently vanishing.
            raise ValueError(f"seccomp: the call numbered {syscall} has no name runc would know")
        indexes = [a["index"] for a in args]
        if len(set(indexes)) != len(indexes):
            raise ValueError(f"seccomp: a rule for {syscall} compares one argument twice (runc would split it)")
        entry = {"names": [syscall], "action": action}
        if errno_value is not None:
            entry["errnoRet"] = errno_value
        if args:
            entry["args"] = [dict(a) if a["op"] == _Lib.MASKED_EQ else {k: a[k] for k in ("index", "op", "value")}
                             for a in args]
        last = entries[-1] if entries else None
        if (not args and last is not None and "args" not in last and last["action"] == action
                and last.get("errnoRet") == entry.get("errnoRet")):
            last["names"].append(syscall)  # consecutive unconditional rules of one action
        else:
            entries.append(entry)
    return {"defaultAction": "SCMP_ACT_ALLOW", "architectures": [_SPEC_ARCH[arch]], "syscalls": entries}


# ------------------------------------------------------------------ the config

def identity(uid: int, gid: int) -> tuple[dict, dict]:
    """(process.user, linux id mappings) for a caller with ``uid``/``gid`` (see the module
    docstring: a user's runc maps the caller as the container's root)."""
    if uid == 0:
        return {"uid": 0, "gid": 0}, {"uidMappings": [{"containerID": 0, "hostID": 0, "size": 1}],
                                      "gidMappings": [{"containerID": 0, "hostID": 0, "size": 1}]}
    return {"uid": 0, "gid": 0}, {"uidMappings": [{"containerID": 0, "hostID": uid, "size": 1}],
                                  "gidMappings": [{"containerID": 0, "hostID": gid, "size": 1}]}


def lower(plan: Plan, host) -> Lowered:
    mounts, readonly, masked, verdicts, links = filesystem(plan)
    net = plan.network
    namespaces = ["pid", "ipc", "uts", "mount", "cgroup", "user"]
    if net.mode in (NET_OFF, NET_RULES, NET_HOSTS):
        # A new network namespace with nothing in it: runc brings up its loopback only.
        namespaces.append("network")
    user, maps = identity(host.uid, host.gid)
    no_caps = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
    linux = {
        "namespaces": [{"type": t} for t in namespaces],
        **maps,
        # Private, not runc's default (slave): a mount the host makes while the command runs
        # (an automount, a USB stick, another container's overlay) would otherwise appear
        # inside, under a read-only rule, with its own options (writable, suid, devices).
        "rootfsPropagation": "rprivate",
        "maskedPaths": sorted(set(PROC_MASKED) | set(masked)),
        "readonlyPaths": sorted(set(PROC_READONLY) | set(readonly)),
    }
    try:
        linux["seccomp"] = seccomp_json(plan, host.arch)
        from .seccomp import families_verdict_text

        verdicts.append(verdict(NAME, "syscalls", ENFORCED, plan.syscalls.span))
        verdicts.append(verdict(NAME, "socket families", NARROWED, BUILTIN_SPAN, families_verdict_text()))
        # The profile lists the native architecture only: listing i386 or x32 would apply
        # the default ALLOW to their calls (socketcall and the rest). The runtime spec has
        # no field for the action on an unlisted one, and runc keeps libseccomp's: kill.
        verdicts.append(verdict(NAME, "other syscall ABIs", NARROWED, BUILTIN_SPAN,
                                "a call through another ABI (i386 int 0x80, x32) kills the process with SIGSYS "
                                "instead of failing with EPERM"))
    except Exception as e:  # missing libseccomp, unknown syscall, unsupported arch
        verdicts.append(verdict(NAME, "syscalls", NOT_ENFORCEABLE, plan.syscalls.span,
                                f"the seccomp profile could not be built: {e}"))

    if net.mode == NET_ON:
        verdicts += host_network_verdicts(NAME, net, host.landlock_abi)
    elif net.mode == NET_OFF:
        verdicts.append(verdict(NAME, "network: false", ENFORCED, net.span))
    else:
        for r in net.rules:
            ports = str(r.port_lo) if r.port_lo == r.port_hi else f"{r.port_lo}-{r.port_hi}"
            verdicts.append(verdict(NAME, f"{r.op} {r.proto} {ports}", NARROWED, r.span,
                                    "an OCI runtime cannot allow single ports: the network is off (use --backend "
                                    "landlock for per-port rules)"))
        from .bwrap import host_status, host_subject

        for h in getattr(net, "hosts", ()):
            # The runner makes the proxy's listener inside the container's own network
            # namespace between `runc create` and `runc start` (runtime/oci_run): that
            # namespace keeps loopback alone, so the proxy is the only way out.
            status, why = host_status(h, "through sbxc's proxy: the container's network namespace has loopback "
                                         "only, and sbxc exec puts the proxy's listener inside it (127.0.0.1:3128) "
                                         "before runc start; a bundle from compile -o run without sbxc has no proxy "
                                         "and so no network")
            verdicts.append(verdict(NAME, host_subject(h), status, h.span, why))

    verdicts += session_verdicts(NAME, plan)
    verdicts.append(verdict(NAME, "ipc", ENFORCED, BUILTIN_SPAN))
    verdicts.append(verdict(NAME, "processes", ENFORCED, BUILTIN_SPAN))
    verdicts.append(verdict(NAME, HOST_MOUNTS, ENFORCED, BUILTIN_SPAN,
                            "the container's mounts are private (rootfsPropagation: rprivate): a mount the host "
                            "makes during the run does not appear inside"))
    verdicts.append(verdict(NAME, "capabilities", ENFORCED, BUILTIN_SPAN))
    if host.uid != 0:
        verdicts.append(verdict(NAME, "uid", ENFORCED, BUILTIN_SPAN,
                                "the command runs as uid 0 of its own user namespace, which is the caller "
                                "(rootless runc maps one id, the container's root) and holds no capabilities"))
    verdicts.append(_env_verdict(plan))

    # With a read-only bind of the host's / over the rootfs (``read /``), root.readonly
    # stays false: runc makes a read-only root with a bind remount that drops nosuid and
    # nodev from /, and the bind is read-only already (rro). Without one the empty rootfs
    # is the root, made read-only by runc.
    root_bound = bool(mounts) and mounts[0].get("destination") == "/" and mounts[0].get("type") == "bind" \
        and "rro" in mounts[0].get("options", ())
    config = {
        "ociVersion": OCI_VERSION,
        "root": {"path": ROOTFS, "readonly": not root_bound},
        "process": {
            "terminal": False,
            "user": user,
            "args": [],
            "env": [],
            "cwd": "/",
            "capabilities": no_caps,
            "noNewPrivileges": True,
        },
        "mounts": mounts,
        "linux": linux,
    }
    data = {"config": config, "network": net.mode}
    if links:
        data["links"] = links
    return Lowered(NAME, data, tuple(verdicts))
