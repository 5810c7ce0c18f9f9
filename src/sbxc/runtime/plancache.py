"""The plan cache: compiled plans kept where no sandboxed command can write them, keyed by
what the plan was compiled from (policy, flags, folder, user, host, compiler code).

Entries live in the plans folder (``sbxc.runtime.planstore``): ``p-`` + sha256(key) for
``--policy`` and discovery, ``f-`` + sha256(content) for the parsed copy of a ``--plan``
file. A hit still asks ``staleness.why_stale`` whether the plan holds on this host now;
the run journal and the taints are asked before an entry is stored, so a hit needs
neither again.

Hot path: ``os``, ``marshal`` and a sha256 from the interpreter's builtin module. The
compiler (PyYAML, Lark, libseccomp) is never imported here: on a miss the plan cache
calls the compile function the ``exec`` command handed in.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from .. import discovery
from ..layout import PACKAGE_DIR, VERSION
from .planstore import open_plans_dir, read_entry, sha256_hex, write_entry
from .safeopen import read_proc

ENTRY_VERSION = 3  # 2: entries are stored only after their sources passed the run journal; 3: "code"

def policy_ref(policy, cwd: str) -> str:
    """The policy the compiler will load (``sbxc.discovery``, as the compiler asks it)."""
    return discovery.locate(policy, cwd)[0]


def compiler_stamp() -> str:
    """Size and mtime of every file the compiler is made of: a plan made by other code is
    a miss, even when the version number did not change (a development checkout, an
    upgrade that kept the number). One scandir per folder, no file is read."""
    base = PACKAGE_DIR
    parts = []
    for sub in ("compiler", "backends", "policies", "grammar", ""):
        d = os.path.join(base, sub) if sub else base
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.name.endswith((".py", ".yaml", ".lark")):
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        parts.append(f"{sub}/{e.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{sub}:?")
    # The pipeline from a policy to a plan file (its other parts are in the folders above).
    try:
        st = os.stat(os.path.join(base, "commands", "build.py"))
        parts.append(f"commands/build.py:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        parts.append("commands/build.py:?")
    parts.sort()
    return "|".join(parts)


_USERNS_KNOBS = (
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",  # Debian's switch
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",  # Ubuntu 24.04's
)


def userns_facts() -> str:
    """What decides whether bwrap can make its namespaces, read cheaply: the kernel's knobs
    and whether this process already runs under a seccomp filter (a container, another
    sandbox), which may forbid new namespaces. ``backend: auto`` chose bwrap or Landlock
    from these; when they change, a cached plan's choice may no longer hold, so they are
    part of the cache key (the full probe, a trial bwrap run, happens on the miss)."""
    parts = []
    for path in _USERNS_KNOBS:
        data = read_proc(path, 32)
        parts.append("-" if data is None else data.strip().decode("ascii", "replace"))
    data = read_proc("/proc/self/status", 1 << 16)
    if data is None:
        parts.append("-")
    else:
        for line in data.split(b"\n"):
            if line.startswith((b"Seccomp:", b"Seccomp_filters:", b"NoNewPrivs:")):
                parts.append(line.split(b":", 1)[1].strip().decode("ascii", "replace"))
    return ",".join(parts)


def plan_for_policy(policy, backend, network, now, cwd: str, compile, later=None) -> dict:
    """The plan for ``policy`` (None: discovery) with the flags, from the cache or, on a
    miss, from ``compile(policy, backend, network, environ, cwd)``, which returns
    ``{"plan", "sources", "env"}`` or raises a Refusal. The runtime compiles nothing itself:
    the ``exec`` command hands the compiler in (see docs/architecture.md). ``now``: the
    run's ``staleness.HostNow``.

    The compiler's code (``compiler_stamp``) and the user-namespace facts (``userns_facts``)
    are not part of the key but of the entry: a hit whose entry was made by other code, or
    on a host whose namespaces have changed since, is a miss. ``later``: None, or a list to
    which that comparison is appended as a callable instead of being made here; it raises
    ``PlanOutdated`` on a mismatch, and the run's last checks call it (on bwrap while bwrap
    sets the sandbox up), so its ~50 stat calls and /proc reads cost no time there. With
    ``later`` the whole question whether the entry still holds here (``why_stale``: its
    policy files and environment, the host, the rules' paths) is deferred the same way:
    nothing of the command runs before it was answered, and a plan that no longer holds is
    compiled again (the caller starts the run anew)."""
    from .staleness import why_stale
    from .planstore import check_taints, ensure_reserve, policy_state

    environ = now.environ
    ref = policy_ref(policy, cwd)
    key_src = "\x00".join((
        VERSION, PACKAGE_DIR, ref, cwd, backend or "", network or "", str(os.getuid()),
        environ.get("HOME", ""), now.bwrap[0], os.uname().machine,
    ))
    name = "p-" + sha256_hex(key_src.encode("utf-8", "surrogateescape"))
    dir_fd = open_plans_dir()
    try:
        # Discovery: a nearer policy file that a sandboxed command removed would have
        # been the one to apply; checked first, the answer does not depend on the plan.
        nearer = discovery.candidates(cwd, ref) if policy is None else ()
        if dir_fd >= 0:
            check_taints(dir_fd, (), nearer)
            entry = read_entry(dir_fd, name, ENTRY_VERSION)
            # The filesystem the plan was resolved against must still be as it was: a path
            # that changed makes a cached plan stale, so it is compiled again here rather
            # than refused by the same check before the run (which stays, for --plan).
            made = (entry.get("code"), entry.get("userns")) if entry is not None else None
            if later is not None and entry is not None and isinstance(entry.get("plan"), dict):
                plan = entry["plan"]
                kept_fd = os.dup(dir_fd)

                def still_holds():
                    try:
                        if made != (compiler_stamp(), userns_facts()) or why_stale(plan, now, entry=entry) is not None:
                            from .errors import PlanOutdated

                            raise PlanOutdated()
                        # Only once the sources are known to be as the entry recorded them:
                        # a taint on other contents would be taken for the caller's edit.
                        check_taints(kept_fd, entry.get("sources", ()))
                    finally:
                        os.close(kept_fd)

                later.append(still_holds)
                return plan
            if entry is not None and isinstance(entry.get("plan"), dict) and made == (
                    compiler_stamp(), userns_facts()) and why_stale(entry["plan"], now, entry=entry) is None:
                check_taints(dir_fd, entry.get("sources", ()))
                return entry["plan"]
        from . import journal_check

        if dir_fd >= 0 and ref.startswith("/"):
            # Before compiling: a tainted file is refused as such, not judged on its contents.
            first = ((ref, policy_state(ref)),)
            check_taints(dir_fd, first)
            journal_check.check_sources(dir_fd, first)
        def gate(path: str) -> None:
            # Each source, every extends target included, before the compiler reads a
            # byte of it: a diagnostic would quote a planted one (a link to a secret).
            if path.startswith("/"):
                here = ((path, policy_state(path)),)
                check_taints(dir_fd, here)
                journal_check.check_sources(dir_fd, here)

        # Read before compiling: a change meanwhile makes the entry a miss next time.
        code, userns = compiler_stamp(), userns_facts()
        entry = dict(compile(policy, backend, network, environ, cwd, gate if dir_fd >= 0 else None), v=ENTRY_VERSION,
                     code=code, userns=userns)
        if dir_fd >= 0:
            # The digests were just read by the compiler: what the plan is made of. A file
            # a sandboxed run could have written since its last acceptance (the journal)
            # is refused; only then is the entry stored, so a later hit on the same bytes
            # needs no second look at the journal.
            check_taints(dir_fd, entry.get("sources", ()))
            journal_check.check_sources(dir_fd, entry.get("sources", ()))
            if write_entry(dir_fd, name, entry):
                from .planprune import prune

                prune(dir_fd)  # on a miss only: a hit never lists the folder
            ensure_reserve(dir_fd)  # on a miss only: a hit stays one open and one read
        return entry["plan"]
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
