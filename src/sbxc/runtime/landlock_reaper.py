"""The Landlock command's reaper, outside the sandbox, and its namespaces.

The forked child of sbxc stays outside the sandbox as a small reaper (``fork_under_reaper``):
a child subreaper, so every orphan of the command becomes its child; it forks the
command, relays sbxc's forwarded signals to the command's process group, reaps orphans
as they end, and when the command ends kills every remaining descendant and exits with
the command's status (128+N for signal N, as sbxc reports it anyway). When sbxc dies
(even by SIGKILL), its parent-death signal makes it kill them all too. sbxc itself is a
subreaper as well and, after the child ended (``after_exit``), kills whatever is still
below it (processes left when the reaper itself was killed), before the cleanups and
the policy check run. The mechanisms (forwarding, waiting, ending descendants) are
``sbxc.runtime.supervise``'s, the same the core uses.

Namespaces. Where this process may (root: CAP_SYS_ADMIN, still held before confine
drops it), the reaper unshares CLONE_NEWPID|CLONE_NEWIPC first; its first child is the
new PID namespace's idle init and the command its second (``_start_namespace_init``
says why the command is not PID 1). The command then reaches no process outside its
namespace by pid (kill, prlimit, setpriority, pidfd_open ... answer ESRCH; sbxc and the
reaper are outside) and no SysV IPC object of the host; when the init ends the kernel
ends everything in the namespace, so sbxc and the reaper killed together leave nothing.
Root without it is refused: its command would reach every root process. An
unprivileged user gets it only inside a user namespace, which this backend exists to do
without: its command shares the host's namespaces (``sbxc doctor`` says which). There
is no mount namespace, so /proc stays the host's procfs: /proc/self still names the
reader (resolved in the procfs's namespace), but with its host number, not getpid()'s.

Resource limits. A process of the same uid may lower another's limits (prlimit(2)); sbxc
and the reaper note theirs before the run and put the soft limits back before their
post-run work (``restore_limits``), so that running out of descriptors cannot turn
"cannot list the command's processes" into "none left".
"""
import os

from .errors import Refusal
from .landlock_confine import fail, libc_handle
from .supervise import (FORWARDED, block_forwarded, default_signals, deliver, end_descendants, exit_code,
                        forward_signals, wait_for)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
# Both need CAP_SYS_ADMIN in the caller's user namespace: root has it (until confine drops
# it), an unprivileged user only inside a user namespace, which this backend does without.
NS_FLAGS = CLONE_NEWPID | CLONE_NEWIPC
# RLIMIT_CPU .. RLIMIT_RTTIME: the generic numbering, shared by x86_64 and aarch64.
_RLIMIT_NAMES = ("cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
                 "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime")
_SIGKILL = 9
_SIGTERM = 15


def make_subreaper() -> list:
    """Make sbxc a child subreaper (orphans of the command's processes come to it when its
    reaper is gone; set before the fork, so nothing escapes to init in between) and note
    its resource limits; returns them for ``after_exit``."""
    ctypes, libc = libc_handle()
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise fail("making sbxc a child subreaper", ctypes.get_errno())
    return own_limits(ctypes, libc)


def own_limits(ctypes, libc) -> list:
    """This process's (soft, hard) resource limits, by RLIMIT number (None: unreadable)."""
    lim = (ctypes.c_uint64 * 2)()
    out = []
    for res in range(len(_RLIMIT_NAMES)):
        out.append((lim[0], lim[1]) if libc.prlimit64(0, res, None, lim) == 0 else None)
    return out


def restore_limits(ctypes, libc, saved: list, who: str) -> str:
    """Put this process's soft limits back to ``saved`` (``own_limits`` before the run), as
    far as the current hard limits allow, and return a warning line if any limit had
    changed ("" if none). A process of the same uid may lower another's limits with
    prlimit(2), hard ones included (lowering needs no capability): a post-run check that
    runs out of descriptors or memory could otherwise report "nothing to do". A lowered
    hard limit cannot be raised back without CAP_SYS_RESOURCE."""
    lim = (ctypes.c_uint64 * 2)()
    changed, stuck = [], []
    for res, was in enumerate(saved):
        if was is None or libc.prlimit64(0, res, None, lim) != 0:
            continue
        soft, hard = lim[0], lim[1]
        if (soft, hard) == was:
            continue
        changed.append(_RLIMIT_NAMES[res])
        want = min(was[0], hard)
        if want != soft:
            new = (ctypes.c_uint64 * 2)(want, hard)
            libc.prlimit64(0, res, new, None)
        if hard < was[0]:
            stuck.append(_RLIMIT_NAMES[res])
    if not changed:
        return ""
    line = (f"sbxc: warning: a process changed the resource limits of {who} while the command ran "
            f"({', '.join(changed)}); soft limits were put back")
    if stuck:
        line += f", except where the hard limit was lowered ({', '.join(stuck)}): post-run checks may be incomplete"
    return line + "\n"


def after_exit(limits=None) -> None:
    """In sbxc once its child ended: limits back, then end whatever is still below it."""
    import sys

    if limits is not None:
        ctypes, libc = libc_handle()
        warning = restore_limits(ctypes, libc, limits, "sbxc")
        if warning:
            sys.stderr.write(warning)
    left = end_descendants()
    if left:
        sys.stderr.write(f"sbxc: warning: {left} process(es) the command started could not be ended\n")


def namespace_errno() -> int:
    """0 when this process may give the command new PID and IPC namespaces (NS_FLAGS),
    else the errno unshare(2) gives. Tried in a forked child: unshare(CLONE_NEWPID) here
    would send this process's later children into a namespace that ends with the first."""
    ctypes, libc = libc_handle()
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            code = 0 if libc.unshare(NS_FLAGS) == 0 else min(ctypes.get_errno() or 255, 254)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 255


def fork_under_reaper(sbxc_pid: int, namespaces: bool = False, required: bool = False) -> int:
    """In sbxc's forked child, before any confinement: fork the command's process and
    stay behind as its reaper (see the module text). With ``namespaces``, the command
    gets new PID and IPC namespaces where this process may make them (``required``: or
    the run is refused). Returns, in the command's process only, what its getppid()
    must say while the reaper lives (the reaper's PID; 0 when the reaper is outside the
    command's PID namespace); the reaper itself never returns (it must never reach the
    exec, which would run the command unconfined)."""
    import _signal

    ctypes, libc = libc_handle()
    me = os.getpid()
    limits = own_limits(ctypes, libc)
    state = {"cmd": 0}

    def relay(signum, _frame):
        if os.getpid() != me:
            return  # the command's process between fork and exec: its exec resets this
        if os.getppid() != sbxc_pid:
            # sbxc is gone (the parent-death signal): nothing may outlive it.
            end_descendants()
            os._exit(128 + _SIGKILL)
        if state["cmd"] > 0:
            # The command's session, as bwrap's runner does; the process alone while it
            # has not made its session yet (landlock_confine).
            deliver(signum, state["cmd"], state["cmd"], alone_if_no_group=True)

    # The forwarded signals are held from here until the command's process exists (one
    # that came in between would find no process to go to, and be lost): the reaper gets
    # any held one once it knows the process; the process lets them through with their
    # default actions back (until its exec a signal ends it, as it would any process that
    # early). The parent-death signal is among them: held too, then acted on by ``relay``.
    mask = block_forwarded()
    # Handlers first, then the death signal, then the check: sbxc dying at any point
    # is either seen by getppid() here or delivered to a handler that acts on it.
    forward_signals(relay)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # SIGCHLD: sbxc's wake-up handler is not ours
    try:
        _signal.set_wakeup_fd(-1)  # sbxc's wake-up pipe was closed with the other descriptors
    except (ValueError, OSError):
        pass
    if libc.prctl(PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0) != 0:
        raise fail("setting the parent-death signal", ctypes.get_errno())
    if os.getppid() != sbxc_pid:
        raise Refusal("sbxc ended while the sandbox was being set up", "run the command again")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise fail("making the sandbox's reaper a child subreaper", ctypes.get_errno())
    # Out of the caller's terminal's process group: Ctrl-C reaches sbxc, which forwards.
    os.setsid()
    hold = -1
    if namespaces:
        if libc.unshare(NS_FLAGS) == 0:
            hold = _start_namespace_init()
        elif required:
            err = ctypes.get_errno()
            raise Refusal(f"new PID and IPC namespaces for the root command could not be made ({os.strerror(err)}), "
                          "and without them it would reach every root process and the host's IPC objects",
                          "give sbxc CAP_SYS_ADMIN (a container may withhold it), or run it as an unprivileged user")
    pid = os.fork()
    if pid == 0:
        default_signals()
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
        if hold >= 0:
            os.close(hold)
            return 0  # the reaper is in the parent namespace: getppid() is 0 while it lives
        return me
    code = 125
    try:
        state["cmd"] = pid
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)  # a held one goes to the command now
        # The reaper holds nothing of the command's: not the report pipe (sbxc reads it
        # to its end), not the per-run locks, not stdin/stdout (a reader downstream must
        # see the end of the output when the command's processes are gone). It keeps
        # ``hold``, whose other end tells the namespace's init that the reaper lives.
        if hold >= 0:
            os.closerange(3, hold)
            os.closerange(hold + 1, 1 << 20)
        else:
            os.closerange(3, 1 << 20)
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        if null > 2:
            os.close(null)
        code = exit_code(wait_for(pid))  # orphans of the command are reaped on the way
        state["cmd"] = 0  # reaped: its pid may be another process's now
        warning = restore_limits(ctypes, libc, limits, "the sandbox's reaper")
        if warning:
            os.write(2, warning.encode())
        try:
            left = end_descendants()
        except OSError as e:
            # The orphans come to sbxc, a subreaper too, which tries again (after_exit).
            os.write(2, f"sbxc: warning: the sandbox's reaper could not list the command's processes ({e.strerror})\n"
                     .encode())
            left = 0
        if left:
            os.write(2, f"sbxc: warning: {left} process(es) the command started could not be ended\n".encode())
    finally:
        try:
            end_descendants()
        finally:
            os._exit(code)
    raise AssertionError("unreachable")


def _start_namespace_init() -> int:
    """After unshare(CLONE_NEWPID): fork the new PID namespace's init (PID 1) and return
    the write end of a pipe that it reads until the reaper is gone.

    The init is the namespace, not the command's parent: the command is the reaper's
    second child (PID 2), so it keeps ordinary signal semantics. A PID 1 ignores every
    signal it has no handler for, also the command's own `kill -TERM $$` or a forwarded
    Ctrl-C, which a command that is PID 1 would not see. Orphans of the command's
    processes go to this init (a subreaper in the parent namespace is not asked); with
    SIGCHLD ignored the kernel reaps them. When the init ends (the reaper kills it after
    the command, or the reaper dies: the pipe's end, or the parent-death signal, which a
    signal from the parent namespace delivers), the kernel kills every process in the
    namespace and waits for them before the init can be reaped: nothing the command
    started outlives the run, even when sbxc and the reaper are killed together. The
    command can reach this init (it is PID 1 there), but it has no handler, holds no
    descriptor but the pipe and does no post-run work; ending it ends the sandbox."""
    import _signal

    r, w = os.pipe()
    pid = os.fork()
    if pid != 0:
        os.close(r)
        return w
    try:
        default_signals()
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [getattr(_signal, n) for n in FORWARDED])  # held by the reaper
        _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
        ctypes, libc = libc_handle()
        libc.prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        # Everything else is sbxc's: above all the report pipe, which sbxc reads to its end.
        os.closerange(0, r)
        os.closerange(r + 1, 1 << 20)
        # The reaper holds w for as long as it lives, so this read ends only with it (the
        # parent-death signal is only armed now: this also covers a reaper that died before).
        while os.read(r, 64):
            pass
    finally:
        os._exit(0)
    raise AssertionError("unreachable")
