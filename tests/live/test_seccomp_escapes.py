"""Live: what lies outside the sandbox stays out of reach, on both backends, checked from
inside the sandbox and, for the objects the test owns, from outside afterwards.

- Processes: a victim of the same user started by the test; the command tries to change
  its limits, nice value, affinity, scheduling policy and I/O priority by pid.
- Host IPC: a System V shared memory segment and message queue and a POSIX message queue
  made by the test; the command tries to find, read and write them.
- Socket families: vsock, packet, AF_ALG ... and netlink protocols other than
  NETLINK_ROUTE cannot be created.

Each has a control: the same probe run without a sandbox does change the victim, reads
the IPC objects and creates the sockets (for the families this host supports), so the
test can see an escape.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases  # noqa: E402
from cases import landlock_abi, make_plan  # noqa: E402
from conftest import SANDBOX_PYTHON  # noqa: E402
from sbxc.backends import seccomp  # noqa: E402
from sbxc.compiler.plan import NET_OFF, NET_ON, Network, SyscallPlan  # noqa: E402

pytestmark = [pytest.mark.live]

if os.uname().machine != "x86_64":
    pytest.skip("the probes use x86_64 syscall numbers", allow_module_level=True)

ROOT = os.geteuid() == 0
EPERM, ESRCH = errno.EPERM, errno.ESRCH


def _backend_ok(backend: str) -> str:
    if backend == "landlock":
        return "" if landlock_abi() >= 6 else f"Landlock ABI {landlock_abi()} here; 6 needed"
    from sbxc.runtime.probe import host_program, userns_works

    if backend == "oci":
        return "" if host_program("runc", os.environ)[0] else "runc is not installed (scripts/setup installs it)"

    b = host_program("bwrap", os.environ)[0]
    if not b:
        return "bwrap is not installed"
    ok, why = userns_works(b)
    return "" if ok else f"bwrap cannot run here: {why}"


def _run(backend: str, tree: str, tmp_path, script: str, *args, network=NET_ON) -> dict:
    """The probe ``script`` run under ``backend`` (or, for ``None``, without a sandbox)."""
    cmd = [SANDBOX_PYTHON, "-c", script, *map(str, args)]
    if backend is None:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    why = _backend_ok(backend)
    if why:
        pytest.skip(why)
    plan = make_plan(cases.shared_rules(tree), project=f"{tree}/proj", network=network)
    r = cases.run_plan(plan, backend, cmd, cwd=f"{tree}/proj", tmp=str(tmp_path))
    assert r.rc == 0, r
    return json.loads(r.out.strip().splitlines()[-1])


def _filtered(script: str, tmp_path, *args, purpose="landlock", root_metadata=False, host_ipc=False,
              bpf=None) -> dict:
    """The probe under the compiled filter alone (no Landlock, no namespace): shows the
    filter itself refuses, whatever namespaces a runner adds. ``bpf``: that filter instead."""
    if bpf is None:
        bpf = seccomp.compile_filter(SyscallPlan(tuple(sorted(seccomp.BUILTIN_DENY))), "x86_64", purpose=purpose,
                                     network=Network(NET_ON), root_metadata=root_metadata, host_ipc=host_ipc)
    path = tmp_path / f"f-{os.urandom(3).hex()}.hex"
    path.write_text(bpf.hex())
    loader = textwrap.dedent(r'''
        import ctypes, sys
        libc = ctypes.CDLL(None, use_errno=True)
        bpf = bytes.fromhex(open(sys.argv.pop(1)).read())
        class F(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        buf = ctypes.create_string_buffer(bpf, len(bpf))
        prog = F(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
        assert libc.prctl(38, 1, 0, 0, 0) == 0
        assert libc.syscall(317, 1, 0, ctypes.byref(prog)) == 0, ctypes.get_errno()
    ''')
    p = subprocess.run([sys.executable, "-c", loader + script, str(path), *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# ------------------------------------------------------------------ processes

PROC_PROBE = textwrap.dedent(r'''
    import ctypes, json, os, resource, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pid = int(sys.argv[1])
    L = ctypes.c_long
    def sc(nr, *a):
        r = libc.syscall(L(nr), *[L(x) for x in a])
        return -ctypes.get_errno() if r == -1 else 0
    def py(f):
        try:
            f()
            return 0
        except OSError as e:
            return -e.errno
    cpus = sorted(os.sched_getaffinity(0))
    robust = (ctypes.c_void_p * 1)()
    rlen = (ctypes.c_size_t * 1)()
    out = {
        "prlimit RLIMIT_CPU": py(lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (7777, 7777))),
        "setpriority": py(lambda: os.setpriority(os.PRIO_PROCESS, pid, 17)),
        "sched_setaffinity": py(lambda: os.sched_setaffinity(pid, {cpus[0]})) if len(cpus) > 1 else -999,
        "sched_setscheduler SCHED_IDLE": py(lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))),
        "ioprio_set idle": sc(251, 1, pid, 3 << 13),
        "get_robust_list": -ctypes.get_errno() if libc.syscall(L(274), L(pid), robust, rlen) == -1 else 0,
        "kill 0": py(lambda: os.kill(pid, 0)),
        # controls: the same calls on the caller itself keep working
        "control setrlimit self": py(lambda: resource.setrlimit(resource.RLIMIT_CORE, resource.getrlimit(resource.RLIMIT_CORE))),
        "control prlimit read": py(lambda: resource.prlimit(pid, resource.RLIMIT_CPU)),
        "control nice self": py(lambda: os.setpriority(os.PRIO_PROCESS, 0, 1)),
        "control affinity self": py(lambda: os.sched_setaffinity(0, set(cpus))),
        "control getaffinity other": py(lambda: os.sched_getaffinity(pid)),
    }
    print(json.dumps(out))
''')

_IOPRIO_GET = 252


def _state(pid: int) -> dict:
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    return {
        "cpu": resource.prlimit(pid, resource.RLIMIT_CPU),
        "nice": os.getpriority(os.PRIO_PROCESS, pid),
        "affinity": sorted(os.sched_getaffinity(pid)),
        "policy": os.sched_getscheduler(pid),
        "ioprio": libc.syscall(ctypes.c_long(_IOPRIO_GET), ctypes.c_long(1), ctypes.c_long(pid)),
    }


@pytest.fixture
def victim():
    """A process of the caller's own, outside every sandbox."""
    made = []

    def start():
        p = subprocess.Popen(["/bin/sleep", "120"], stdin=subprocess.DEVNULL)
        made.append(p)
        return p.pid

    yield start
    for p in made:
        p.kill()
        p.wait(10)


_CHANGES = ("prlimit RLIMIT_CPU", "setpriority", "sched_setaffinity", "sched_setscheduler SCHED_IDLE",
            "ioprio_set idle", "get_robust_list", "kill 0")


def _check_inside(got: dict, allowed: tuple) -> None:
    for name in _CHANGES:
        if got[name] == -999:
            continue  # one CPU: no other affinity to set
        assert -got[name] in allowed, f"{name}: {got[name]} inside the sandbox"
    for name, val in got.items():
        if name.startswith("control") and name != "control prlimit read" and name != "control getaffinity other":
            assert val == 0, (name, val)


def test_process_control_sees_the_escape(tree, tmp_path, victim):
    pid = victim()
    before = _state(pid)
    got = _run(None, tree, tmp_path, PROC_PROBE, pid)
    assert all(got[n] in (0, -999) for n in _CHANGES), got
    after = _state(pid)
    for key in ("cpu", "nice", "policy", "ioprio"):
        assert after[key] != before[key], (key, before, after)
    if len(before["affinity"]) > 1:
        assert after["affinity"] != before["affinity"]


@pytest.mark.parametrize("backend", ["landlock", "bwrap", "oci"])
def test_other_processes_unchanged(tree, tmp_path, victim, backend):
    pid = victim()
    before = _state(pid)
    got = _run(backend, tree, tmp_path, PROC_PROBE, pid)
    if backend == "landlock" and not ROOT:
        # No PID namespace: the pid is the host's victim, and the filter (or, for
        # get_robust_list, Landlock's ptrace check; for kill, its signal scope) refuses.
        _check_inside(got, (EPERM,))
    else:
        # bwrap, and Landlock as root once the runner gives it a PID namespace: the
        # victim's pid may simply not exist inside (ESRCH).
        _check_inside(got, (EPERM, ESRCH))
    assert _state(pid) == before


def test_filter_alone_refuses_other_processes(tmp_path, victim):
    """Without Landlock or a namespace: the Landlock filter itself refuses, so the rule
    holds even where a runner's PID namespace would hide the victim anyway."""
    pid = victim()
    before = _state(pid)
    got = _filtered(PROC_PROBE, tmp_path, pid)
    for name in _CHANGES:
        if name in ("get_robust_list", "kill 0") or got[name] == -999:
            continue  # Landlock's ptrace check and signal scope answer these, not the filter
        assert got[name] == -EPERM, (name, got)
    assert _state(pid) == before
    assert got["control nice self"] == 0 and got["control affinity self"] == 0, got


# ------------------------------------------------------------------ host IPC

IPC_PROBE = textwrap.dedent(r'''
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.mq_open.restype = ctypes.c_int
    key, shmid, msqid, mqname = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode()
    def err(r):
        return -ctypes.get_errno() if r == -1 else r
    out = {}
    out["shmget key"] = 0 if err(libc.shmget(key, 0, 0)) >= 0 else -ctypes.get_errno()
    addr = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if addr in (None, ctypes.c_void_p(-1).value):
        out["shmat id read"] = -ctypes.get_errno()
    else:
        out["shmat id read"] = ctypes.string_at(addr, 16).split(b"\0")[0].decode()
        libc.shmdt(ctypes.c_void_p(addr))
    out["msgget key"] = 0 if err(libc.msgget(key, 0)) >= 0 else -ctypes.get_errno()
    class Msg(ctypes.Structure):
        _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]
    m = Msg()
    n = libc.msgrcv(msqid, ctypes.byref(m), 64, 0, 0o4000 | 0o40000)  # IPC_NOWAIT | MSG_COPY: a copy, the message stays
    out["msgrcv id"] = m.mtext.decode() if n >= 0 else -ctypes.get_errno()
    w = Msg(2, b"from-inside")
    out["msgsnd id"] = 0 if libc.msgsnd(msqid, ctypes.byref(w), 12, 0o4000) == 0 else -ctypes.get_errno()
    fd = libc.mq_open(mqname, os.O_RDONLY | os.O_NONBLOCK)
    if fd < 0:
        out["mq_open"] = -ctypes.get_errno()
    else:
        buf = ctypes.create_string_buffer(64)
        prio = ctypes.c_uint()
        # mq_receive is destructive: read, then put it back for the next probe
        r = libc.mq_receive(fd, buf, 64, ctypes.byref(prio))
        out["mq_open"] = buf.value.decode() if r >= 0 else -ctypes.get_errno()
        if r >= 0:
            libc.mq_send(fd, buf, r, 0)
        os.close(fd)
    print(json.dumps(out))
''')


class _HostIPC:
    """Host objects owned by the test: a shm segment, a SysV queue, a POSIX queue."""

    TEXT = "host-secret"

    def __init__(self):
        self.libc = libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        self.key = int.from_bytes(os.urandom(3), "little") | 0x5B000000
        self.shmid = libc.shmget(self.key, 4096, 0o1000 | 0o600)  # IPC_CREAT
        assert self.shmid >= 0, ctypes.get_errno()
        addr = libc.shmat(self.shmid, None, 0)
        ctypes.memmove(addr, self.TEXT.encode() + b"\0", len(self.TEXT) + 1)
        libc.shmdt(ctypes.c_void_p(addr))
        self.msqid = libc.msgget(self.key, 0o1000 | 0o600)
        assert self.msqid >= 0, ctypes.get_errno()

        class Msg(ctypes.Structure):
            _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]
        self.Msg = Msg
        m = Msg(1, self.TEXT.encode())
        assert libc.msgsnd(self.msqid, ctypes.byref(m), len(self.TEXT) + 1, 0) == 0
        self.mqname = f"/sbxc-test-{os.urandom(4).hex()}"

        class Attr(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                        ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
        attr = Attr(0, 4, 64, 0)
        fd = libc.mq_open(self.mqname.encode(), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, ctypes.byref(attr))
        assert fd >= 0, ctypes.get_errno()
        assert libc.mq_send(fd, self.TEXT.encode(), len(self.TEXT), 0) == 0
        os.close(fd)

    def args(self):
        return (self.key, self.shmid, self.msqid, self.mqname)

    def queue_len(self) -> int:
        class MsqidDs(ctypes.Structure):  # struct msqid64_ds on x86_64
            _fields_ = [("perm", ctypes.c_byte * 48), ("stime", ctypes.c_long), ("rtime", ctypes.c_long),
                        ("ctime", ctypes.c_long), ("cbytes", ctypes.c_ulong), ("qnum", ctypes.c_ulong),
                        ("qbytes", ctypes.c_ulong), ("lspid", ctypes.c_int), ("lrpid", ctypes.c_int),
                        ("pad", ctypes.c_ulong * 2)]
        ds = MsqidDs()
        assert self.libc.msgctl(self.msqid, 2, ctypes.byref(ds)) == 0  # IPC_STAT
        return ds.qnum

    def close(self):
        self.libc.shmctl(self.shmid, 0, None)  # IPC_RMID
        self.libc.msgctl(self.msqid, 0, None)
        self.libc.mq_unlink(self.mqname.encode())


@pytest.fixture
def host_ipc():
    h = _HostIPC()
    yield h
    h.close()


def test_host_ipc_control_readable_outside(tree, tmp_path, host_ipc):
    got = _run(None, tree, tmp_path, IPC_PROBE, *host_ipc.args())
    assert got["shmat id read"] == _HostIPC.TEXT and got["msgrcv id"] == _HostIPC.TEXT, got
    assert got["shmget key"] == 0 and got["msgget key"] == 0 and got["msgsnd id"] == 0, got
    assert got["mq_open"] == _HostIPC.TEXT, got
    assert host_ipc.queue_len() == 2  # the control's message arrived


@pytest.mark.parametrize("backend", ["landlock", "bwrap", "oci"])
def test_host_ipc_out_of_reach(tree, tmp_path, host_ipc, backend):
    """Landlock without root: the filter refuses every call (EPERM). bwrap, and Landlock
    as root (the runner's IPC namespace): the host objects do not exist inside."""
    got = _run(backend, tree, tmp_path, IPC_PROBE, *host_ipc.args())
    for name, val in got.items():
        assert isinstance(val, int) and val < 0, f"{name}: {val!r} inside the sandbox ({backend})"
    if backend == "landlock" and not ROOT:
        assert set(got.values()) == {-EPERM}, got
    else:
        assert got["shmget key"] == -errno.ENOENT and got["msgget key"] == -errno.ENOENT, got
        assert got["mq_open"] == -errno.ENOENT, got
    assert host_ipc.queue_len() == 1  # nothing written from inside


# ------------------------------------------------------------------ socket families

AF_ALG, AF_VSOCK, AF_PACKET, AF_XDP, AF_CAN, AF_TIPC, AF_BLUETOOTH, AF_RDS, AF_KEY = 38, 40, 17, 44, 29, 30, 31, 21, 15
AF_QIPCRTR, AF_SMC, AF_NETLINK = 42, 43, 16
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET = 1, 2, 3, 4, 5

# (name, family, type, protocol)
REFUSED = [
    ("vsock", AF_VSOCK, SOCK_STREAM, 0),
    ("alg", AF_ALG, SOCK_SEQPACKET, 0),
    ("packet", AF_PACKET, SOCK_DGRAM, 0),
    ("xdp", AF_XDP, SOCK_RAW, 0),
    ("can", AF_CAN, SOCK_RAW, 1),
    ("tipc", AF_TIPC, SOCK_RDM, 0),
    ("bluetooth", AF_BLUETOOTH, SOCK_STREAM, 0),
    ("rds", AF_RDS, SOCK_SEQPACKET, 0),
    ("key", AF_KEY, SOCK_RAW, 2),
    ("qipcrtr", AF_QIPCRTR, SOCK_DGRAM, 0),
    ("smc", AF_SMC, SOCK_STREAM, 0),
    ("netlink sock_diag", AF_NETLINK, SOCK_RAW, 4),
    ("netlink uevent", AF_NETLINK, SOCK_DGRAM, 15),
    ("netlink generic", AF_NETLINK, SOCK_RAW, 16),
    ("family 100", 100, SOCK_STREAM, 0),
    # Other families through an allowed one: AF_INET with SOCK_PACKET is an AF_PACKET
    # socket, IPPROTO_SMC on AF_INET or AF_INET6 an AF_SMC one (Linux 6.11).
    ("inet SOCK_PACKET", 2, 10, 0x0300),
    ("inet IPPROTO_SMC", 2, SOCK_STREAM, 256),
    ("inet6 IPPROTO_SMC", 10, SOCK_STREAM, 256),
]

SOCK_PROBE = textwrap.dedent(r'''
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    cases = json.loads(sys.argv[1])
    out = {}
    for name, fam, typ, proto in cases:
        fd = libc.socket(fam, typ, proto)
        out[name] = -ctypes.get_errno() if fd < 0 else 0
        if fd >= 0:
            os.close(fd)
        pair = (ctypes.c_int * 2)()
        r = libc.socketpair(fam, typ, proto, pair)
        out["socketpair " + name] = -ctypes.get_errno() if r < 0 else 0
        if r == 0:
            os.close(pair[0]); os.close(pair[1])
    fd = libc.socket(16, 3, 0)  # NETLINK_ROUTE: getaddrinfo and getifaddrs need it
    out["control netlink route"] = -ctypes.get_errno() if fd < 0 else 0
    pair = (ctypes.c_int * 2)()
    out["control socketpair unix"] = 0 if libc.socketpair(1, 1, 0, pair) == 0 else -ctypes.get_errno()
    print(json.dumps(out))
''')


def test_socket_family_control_outside(tree, tmp_path):
    """Which refused families work on this host without a sandbox; at least one must,
    or the sandboxed test could not see an escape."""
    got = _run(None, tree, tmp_path, SOCK_PROBE, json.dumps(REFUSED))
    working = [n for n, *_ in REFUSED if got[n] == 0]
    assert working, f"no refused family works on this host, so nothing shows an escape: {got}"
    assert "vsock" in working or not os.path.exists("/dev/vsock"), got


@pytest.mark.parametrize("network", [NET_ON, NET_OFF])
@pytest.mark.parametrize("backend", ["landlock", "bwrap", "oci"])
def test_socket_families_refused(tree, tmp_path, backend, network):
    outside = _run(None, tree, tmp_path, SOCK_PROBE, json.dumps(REFUSED))
    got = _run(backend, tree, tmp_path, SOCK_PROBE, json.dumps(REFUSED), network=network)
    for name, *_ in REFUSED:
        assert got[name] == -EPERM, f"socket({name}): {got[name]} inside ({backend}, outside: {outside[name]})"
        assert got["socketpair " + name] == -EPERM, (name, got)
    assert got["control netlink route"] == 0, got
    assert got["control socketpair unix"] == 0, got


# ------------------------------------------------------------------ persona flags

# Each attempt runs in a fresh interpreter: the call, the persona it leaves, then an exec
# of a reader of /proc/self/personality, which shows what a program the command starts
# inherits (ADDR_NO_RANDOMIZE is kept; x86_64 drops READ_IMPLIES_EXEC for a 64-bit program).
PERSONA_PROBE = textwrap.dedent(r'''
    import json, subprocess, sys
    TRY = r"""
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(135), ctypes.c_ulong(int(sys.argv[1], 0)))
    print(-ctypes.get_errno() if r == -1 else 0, open("/proc/self/personality").read().strip(), flush=True)
    os.execv(sys.executable, [sys.executable, "-c", "print(open('/proc/self/personality').read().strip())"])
    """
    out = {}
    for name, value in json.loads(sys.argv[1]):
        p = subprocess.run([sys.executable, "-c", TRY, hex(value)], capture_output=True, text=True, timeout=30)
        rc, now, after = p.stdout.split()
        out[name] = [int(rc), int(now, 16), int(after, 16)]
    print(json.dumps(out))
''')

_NO_RANDOMIZE, _READ_EXEC, _PAGE_ZERO = 0x0040000, 0x0400000, 0x0100000
PERSONA_TRIES = [
    ("ADDR_NO_RANDOMIZE", _NO_RANDOMIZE),
    ("READ_IMPLIES_EXEC", _READ_EXEC),
    ("MMAP_PAGE_ZERO", _PAGE_ZERO),
    # The kernel treats only 0xffffffff as a query: bit 31 set on any other value is
    # stored with the rest.
    ("ADDR_NO_RANDOMIZE with bit 31", 0x80000000 | _NO_RANDOMIZE),
    ("READ_IMPLIES_EXEC with bit 31", 0x80000000 | _READ_EXEC),
    ("MMAP_PAGE_ZERO with bit 31", 0x80000000 | _PAGE_ZERO),
    ("all but bit 0", 0xFFFFFFFE),
    # The argument is an unsigned int: the register's high half is dropped.
    ("ADDR_NO_RANDOMIZE in the high half", 0x1_0000_0000 | _NO_RANDOMIZE),
]
_FLAGS = _NO_RANDOMIZE | _READ_EXEC | _PAGE_ZERO


def _persona(backend, tree, tmp_path, filtered=None):
    tries = json.dumps(PERSONA_TRIES + [("control query", 0xFFFFFFFF)])
    if filtered:
        return _filtered(PERSONA_PROBE, tmp_path, tries, purpose=filtered)
    return _run(backend, tree, tmp_path, PERSONA_PROBE, tries)


def _check_persona_kept(got: dict) -> None:
    for name, _ in PERSONA_TRIES:
        rc, now, after = got[name]
        assert rc == -EPERM, f"personality({name}): {rc}"
        assert now & _FLAGS == 0 and after & _FLAGS == 0, f"{name}: persona {now:#x}, then {after:#x} after exec"
    assert got["control query"][0] == 0, got


def test_persona_control_sees_the_escape(tree, tmp_path):
    """Without a sandbox every attempt is taken and reaches the next program (ASLR off,
    readable memory executable), so the sandboxed runs below can see an escape."""
    got = _persona(None, tree, tmp_path)
    for name, value in PERSONA_TRIES:
        rc, now, after = got[name]
        assert rc == 0, (name, got)
        assert now & _FLAGS == value & _FLAGS != 0, (name, hex(now))
        if value & _NO_RANDOMIZE:
            assert after & _NO_RANDOMIZE, (name, hex(after))


@pytest.mark.parametrize("backend", ["landlock", "bwrap", "oci"])
def test_persona_flags_refused(tree, tmp_path, backend):
    _check_persona_kept(_persona(backend, tree, tmp_path))


@pytest.mark.parametrize("purpose", ["landlock", "bwrap"])
def test_filter_alone_refuses_persona_flags(tree, tmp_path, purpose):
    _check_persona_kept(_persona(None, tree, tmp_path, filtered=purpose))


@pytest.mark.root_only  # the control needs CAP_NET_RAW, which only root has here
@pytest.mark.parametrize("purpose", ["bwrap", "landlock"])
def test_filter_alone_refuses_families_reached_through_inet(tree, tmp_path, purpose):
    """The filter itself refuses them, whatever the runner's capabilities and the
    kernel's build. The control: root without the filter gets an AF_PACKET socket from
    AF_INET with SOCK_PACKET, and the kernel answers IPPROTO_SMC with something else than
    EPERM (a socket, or EPROTONOSUPPORT without SMC)."""
    tries = [t for t in REFUSED if t[0].startswith(("inet ", "inet6 "))]
    assert len(tries) == 3, tries
    outside = _run(None, tree, tmp_path, SOCK_PROBE, json.dumps(tries))
    assert outside["inet SOCK_PACKET"] == 0, outside
    assert outside["inet IPPROTO_SMC"] != -EPERM and outside["inet6 IPPROTO_SMC"] != -EPERM, outside
    got = _filtered(SOCK_PROBE, tmp_path, json.dumps(tries), purpose=purpose)
    for name, *_ in tries:
        assert got[name] == -EPERM, (name, got)
    assert got["control netlink route"] == 0 and got["control socketpair unix"] == 0, got


# ------------------------------------------------------------------ an older libseccomp

class _OlderLibseccomp:
    """pyseccomp without names for ``unknown`` (resolve gives -1), as a libseccomp older
    than the calls gives (upstream 2.5.4 knows none after cachestat, Ubuntu 22.04's 2.5.3
    and RHEL 9's 2.5.2 fewer): this host's knows them, so the filter is built through it."""

    def __init__(self, unknown):
        self._real = seccomp._pyseccomp()
        self._unknown = set(unknown)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def resolve_syscall(self, arch, name):
        return -1 if name in self._unknown else self._real.resolve_syscall(arch, name)


SETID_PROBE = textwrap.dedent(r'''
    import ctypes, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    L = ctypes.c_long
    d = sys.argv[1]
    out = {}
    a = os.path.join(d, "a")
    open(a, "w").close()
    os.chmod(a, 0o755)
    r = libc.syscall(L(452), L(-100), a.encode(), L(0o4755), L(0))  # fchmodat2
    out["fchmodat2 setuid"] = [0 if r == 0 else -ctypes.get_errno(), os.stat(a).st_mode & 0o7777]
    class How(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
    b = os.path.join(d, "b")
    how = How(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
    r = libc.syscall(L(437), L(-100), b.encode(), ctypes.byref(how), L(ctypes.sizeof(how)))  # openat2
    out["openat2 setuid"] = [0 if r >= 0 else -ctypes.get_errno(),
                             os.stat(b).st_mode & 0o7777 if os.path.exists(b) else -1]
    r = libc.syscall(L(452), L(-100), a.encode(), L(0o700), L(0))
    out["control fchmodat2 plain"] = 0 if r == 0 else -ctypes.get_errno()
    print(json.dumps(out))
''')


@pytest.mark.parametrize("purpose", ["bwrap", "landlock"])
def test_setid_rules_hold_with_a_libseccomp_that_lacks_the_names(tmp_path, purpose):
    """fchmodat2 (Linux 6.6) and openat2 (5.6) unknown to libseccomp: their rules were
    skipped, so fchmodat2 set the setuid bit that fchmodat is refused, and openat2 created
    a setuid file. They are written with their numbers now. The control: without the
    filter both calls make a setuid file (this kernel has them)."""
    free_dir = tmp_path / "free"
    free_dir.mkdir()
    p = subprocess.run([sys.executable, "-c", SETID_PROBE, str(free_dir)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    free = json.loads(p.stdout)
    assert free["fchmodat2 setuid"] == [0, 0o4755] and free["openat2 setuid"][0] == 0, free
    assert free["openat2 setuid"][1] & 0o4000, free
    lib = _OlderLibseccomp({"fchmodat2", "openat2", "clone3"})
    f = seccomp.build_filter(SyscallPlan(tuple(sorted(seccomp.BUILTIN_DENY))), "x86_64", purpose=purpose,
                             network=Network(NET_ON), lib=lib)
    box = tmp_path / "box"
    box.mkdir()
    got = _filtered(SETID_PROBE, tmp_path, str(box), bpf=seccomp.export(f))
    assert got["fchmodat2 setuid"] == [-EPERM, 0o755], got
    assert got["openat2 setuid"] == [-errno.ENOSYS, -1], got
    assert got["control fchmodat2 plain"] == 0, got
