"""The plan cache: compiled plans kept where no sandboxed command can write them.

Folder: ``/var/tmp/sbxc-{uid}/plans`` (0700, the caller's; see docs/runtime.md for why
there and how every backend keeps it out of the sandbox). Entries are ``marshal`` dumps:
loading one costs microseconds and imports nothing, where ``json`` costs ~11 ms of
imports (through ``re``) on every run.

Hot path: ``os``, ``marshal`` and a sha256 from the interpreter's builtin module. The
compiler (PyYAML, Lark, libseccomp) is imported on a miss only.
"""
from __future__ import annotations

import marshal
import os

from .. import __version__
from .errors import Refusal, one_line

try:  # the builtin module: ``hashlib`` costs ~6 ms of imports (OpenSSL bindings)
    from _sha256 import sha256
except ImportError:  # Python 3.12+ renamed it
    try:
        from _sha2 import sha256  # type: ignore
    except ImportError:
        from hashlib import sha256  # type: ignore

ENTRY_VERSION = 2  # 2: entries are stored only after their sources passed the run journal
POLICY_NAME = "sandbox.policy.yaml"  # as sbxc.compiler.api.POLICY_NAME (not imported: hot path)
DEFAULT_POLICY = "builtin:default"
MAX_PLAN_BYTES = 16 << 20
MAX_POLICY_BYTES = 1 << 20  # as the compiler's limit for one policy file

# O_PATH is Linux-only; macOS opens the folder for reading instead (same no-follow checks).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def plans_dir(uid: int | None = None) -> str:
    return f"/var/tmp/sbxc-{os.getuid() if uid is None else uid}/plans"


def _hex(data: bytes) -> str:
    return sha256(data).hexdigest()


def open_plans_dir(create: bool = True) -> int:
    """O_PATH descriptor of the plans folder after the ownership checks, or -1 when it is
    missing or fails one (then nothing is read from or written to it)."""
    from .cachedir import Unsafe, _open_or_make, open_root

    uid = os.getuid()
    path = plans_dir(uid)
    root = os.path.dirname(path)
    try:
        root_fd = open_root(root, uid, create)
    except (Unsafe, OSError):
        return -1
    try:
        fd, _ = _open_or_make(root_fd, "plans", f"plan cache {path}", path, uid, create)
        return fd
    except (Unsafe, OSError):
        return -1
    finally:
        os.close(root_fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _read_entry(dir_fd: int, name: str):
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_PLAN_BYTES:
            return None
        data = _read_all(fd)
        try:
            entry = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            return None
        return entry if isinstance(entry, dict) and entry.get("v") == ENTRY_VERSION else None
    finally:
        os.close(fd)


def _write_entry(dir_fd: int, name: str, entry: dict, trim: bool = True) -> bool:
    """Write to a fresh temporary name, then rename: readers see all of an entry or none.
    False when it could not be written (a full disk, no inodes)."""
    data = marshal.dumps(entry)
    tmp = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        while data:
            data = data[os.write(fd, data):]
        os.close(fd)
        fd = -1
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if trim:
            _trim(dir_fd)
        return True
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        return False
    finally:
        if fd >= 0:
            os.close(fd)


MAX_ENTRIES = 256
KEEP_ENTRIES = 192


def _trim(dir_fd: int) -> None:
    """Keep the folder bounded: past MAX_ENTRIES, drop the least recently written entries.
    Runs on a miss only (a hit never lists the folder)."""
    entries = []
    try:
        # dir_fd is O_PATH (it cannot be listed): open the folder itself through it.
        list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        with os.scandir(list_fd) as it:
            for e in it:
                if e.name.startswith(("p-", "f-", ".tmp-")):
                    try:
                        entries.append((e.stat(follow_symlinks=False).st_mtime_ns, e.name))
                    except OSError:
                        pass
    except OSError:
        return
    finally:
        os.close(list_fd)
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort()
    for _mtime, name in entries[: len(entries) - KEEP_ENTRIES]:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


# ------------------------------------------------------------------ taints

# A policy file that a sandboxed command wrote (or removed) is "tainted" until the caller
# accepts it with `sbxc compile --check`: one entry per path, ``t-`` + sha256(path),
# holding the file's sha256 as the command left it ("" for removed). Kept in the plans
# folder because no sandbox can write there; never trimmed (see _trim's prefixes).
TAINT_PREFIX = "t-"


def _taint_key(path: str) -> str:
    """The file a path names, whatever spelling reached it: a folder link or a policy file
    that is itself a link must not give the same file a second, untainted name."""
    return os.path.realpath(path)


def _taint_name(path: str) -> str:
    return TAINT_PREFIX + _hex(_taint_key(path).encode("utf-8", "surrogateescape"))


# Space kept free in the plans folder for taint entries: a command that fills the disk
# through its writable cache folder (same filesystem) must not thereby stop its own policy
# change from being recorded. Freed (unlinked) when a taint cannot be written otherwise.
RESERVE_NAME = "reserve"
RESERVE_BYTES = 1 << 16


def ensure_reserve(dir_fd: int) -> None:
    try:
        os.stat(RESERVE_NAME, dir_fd=dir_fd, follow_symlinks=False)
        return
    except OSError:
        pass
    try:
        fd = os.open(RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        pass
    finally:
        os.close(fd)


def policy_state(path: str) -> str:
    """sha256 of the regular file at ``path``; "" when there is none (what discovery, which
    takes regular files only, would not find). Only a regular file is opened for reading:
    a sandboxed command can link the name to a device (opening one runs its driver: a
    watchdog reboots the host, a serial port raises DTR) or a FIFO. O_PATH opens the name
    alone; what it names is then opened through /proc/self/fd, the same inode."""
    o_path = getattr(os, "O_PATH", 0)
    try:
        if o_path:
            pfd = os.open(path, o_path | os.O_CLOEXEC)
            try:
                if (os.fstat(pfd).st_mode & 0o170000) != 0o100000:
                    return ""
                fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_CLOEXEC)
            finally:
                os.close(pfd)
        else:  # macOS: stat first, then a non-blocking open that takes no terminal
            if (os.stat(path).st_mode & 0o170000) != 0o100000:
                return ""
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        _raise_if_sbxc_failed(e)
        return ""
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000:
            return ""
        if st.st_size > MAX_POLICY_BYTES:
            # No policy is this large (the compiler refuses it); hashing a sparse 1 TB file
            # would hold sbxc for hours. A fixed state that no real content hashes to.
            return f"oversized:{st.st_size}:{st.st_mtime_ns}"
        h = sha256()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
        return h.hexdigest()
    except OSError as e:
        _raise_if_sbxc_failed(e)
        return ""
    finally:
        os.close(fd)


def _raise_if_sbxc_failed(e: OSError) -> None:
    """Out of descriptors or memory says nothing about the file: answering "no file" then
    would report a policy as removed (or an appeared one as absent). Let it raise."""
    import errno

    if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        raise e


def candidates(cwd: str, stop: str = "") -> list:
    """Discovery's candidates, nearest first: ``sandbox.policy.yaml`` in ``cwd`` and each
    parent up to ``/``; with ``stop`` (a policy file), only those nearer than it."""
    out = []
    d = cwd
    while True:
        cand = (d.rstrip("/") or "") + "/" + POLICY_NAME
        if cand == stop:
            return out
        out.append(cand)
        parent = os.path.dirname(d)
        if parent == d:
            return out
        d = parent


def read_taint(dir_fd: int, path: str):
    """The sha256 a sandboxed command left ``path`` with ("" removed), or None."""
    entry = _read_entry(dir_fd, _taint_name(path))
    if entry is None or entry.get("path") != _taint_key(path) or not isinstance(entry.get("sha"), str):
        return None
    return entry["sha"]


def drop_taint(dir_fd: int, path: str) -> bool:
    try:
        os.unlink(_taint_name(path), dir_fd=dir_fd)
        return True
    except OSError:
        return False


def record_taints(changed) -> bool:
    """Record (path, sha256 now) pairs as written by a sandboxed command. False when the
    plans folder is unusable (nothing could be recorded)."""
    dir_fd = open_plans_dir()
    if dir_fd < 0:
        return False
    ok = True
    try:
        for path, sha in changed:
            entry = {"v": ENTRY_VERSION, "path": _taint_key(path), "sha": sha}
            if not _write_entry(dir_fd, _taint_name(path), entry, trim=False):
                try:
                    os.unlink(RESERVE_NAME, dir_fd=dir_fd)  # the space kept for this
                except OSError:
                    pass
                ok = _write_entry(dir_fd, _taint_name(path), entry, trim=False) and ok
        ensure_reserve(dir_fd)
        return ok
    finally:
        os.close(dir_fd)


def check_taints(dir_fd: int, sources, nearer=()) -> None:
    """Refuse a plan built from a policy file a sandboxed command wrote, or found by
    discovery because a nearer one was removed by a sandboxed command. One openat per
    path (a missing entry is the usual case). A taint whose file changed since (the
    caller edited it) no longer describes the file and is dropped."""
    for path, digest in sources:
        if not isinstance(path, str) or not path.startswith("/"):
            continue  # builtins live in the package, which no sandbox writes
        sha = read_taint(dir_fd, path)
        if sha is None:
            continue
        if sha == digest:
            shown = one_line(path, 300)
            raise Refusal(f"the policy {shown} was written by a sandboxed command during an earlier run",
                          f"review it, then accept it with 'sbxc compile --check {shown}'")
        drop_taint(dir_fd, path)
    for path in nearer:
        sha = read_taint(dir_fd, path)
        if sha is None:
            continue
        if sha == "" and policy_state(path) == "":
            raise Refusal(f"the policy {one_line(path, 300)} was removed by a sandboxed command during an "
                          "earlier run (without it another policy applies here)",
                          "restore it, or accept the removal with 'sbxc compile --check' in this folder")
        drop_taint(dir_fd, path)


def accept_policies(sources, cwd: str = "", used: str = "") -> list:
    """``sbxc compile --check`` passed: drop the taints of the files it checked (and, for
    discovery from ``cwd``, of removed files nearer than ``used``). The paths dropped."""
    dir_fd = open_plans_dir(create=False)
    if dir_fd < 0:
        return []
    dropped = []
    try:
        paths = [p for p, _d in sources if isinstance(p, str) and p.startswith("/")]
        if cwd:
            paths += candidates(cwd, used)
        for path in paths:
            if read_taint(dir_fd, path) is not None and drop_taint(dir_fd, path):
                dropped.append(path)
    finally:
        os.close(dir_fd)
    return dropped


# ------------------------------------------------------------------ --plan FILE

def load_planfile(path: str) -> dict:
    """A plan file written by ``sbxc compile -o``; parsed with ``json`` once per content,
    then served from the marshal copy keyed by the file's sha256."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise Refusal(f"cannot read the plan {one_line(path, 200)} ({e.strerror})", "check the path; make it with sbxc compile -o PLAN") from None
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_PLAN_BYTES:
            raise Refusal(f"{one_line(path, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
        data = _read_all(fd)
    finally:
        os.close(fd)
    name = "f-" + _hex(data)
    dir_fd = open_plans_dir()
    try:
        if dir_fd >= 0:
            entry = _read_entry(dir_fd, name)
            if entry is not None and isinstance(entry.get("plan"), dict):
                return entry["plan"]
        import json

        try:
            pf = json.loads(data)
        except ValueError as e:
            raise Refusal(f"{one_line(path, 200)} is not valid JSON ({e})", "make it with sbxc compile -o PLAN") from None
        if not isinstance(pf, dict):
            raise Refusal(f"{one_line(path, 200)} is not a plan file", "make it with sbxc compile -o PLAN")
        if dir_fd >= 0:
            _write_entry(dir_fd, name, {"v": ENTRY_VERSION, "plan": pf})
        return pf
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


# ------------------------------------------------------------------ --policy P

def policy_ref(policy, cwd: str) -> str:
    """The policy the compiler will load: the same answer as sbxc.compiler.api.discover."""
    if policy is None:
        d = cwd
        while True:
            cand = (d.rstrip("/") or "") + "/" + POLICY_NAME
            if os.path.isfile(cand):
                return cand
            parent = os.path.dirname(d)
            if parent == d:
                return DEFAULT_POLICY
            d = parent
    if policy.startswith("builtin:"):
        return policy
    return os.path.normpath(os.path.join(cwd, policy))


def _which_bwrap(environ) -> str:
    from .probe import host_program  # the one lookup of sbxc's own tools (trusted folders only)

    return host_program("bwrap", environ)[0]


def _builtin_path(name: str) -> str:
    import sbxc

    return os.path.join(os.path.dirname(sbxc.__file__), "policies", name + ".yaml")


def _file_sha(path: str) -> str:
    """sha256 of a policy source (``builtin:NAME`` too), as ``policy_state`` reads it: a
    FIFO or an oversized file put in a source's place cannot hang the check."""
    if path.startswith("builtin:"):
        path = _builtin_path(path[8:])
    return policy_state(path)


def _entry_valid(entry: dict, environ) -> bool:
    from .launch import host_mismatch, recheck_paths

    pf = entry.get("plan")
    if not isinstance(pf, dict):
        return False
    for name, value in entry.get("env", ()):
        if environ.get(name) != value:
            return False
    for path, digest in entry.get("sources", ()):
        if _file_sha(path) != digest:
            return False
    host = pf.get("host") or {}
    if host_mismatch(host, environ):
        return False
    # The filesystem the plan was resolved against must still be there as it was: a path
    # that changed (a masked one that appeared, an optional one that appeared, a kind or a
    # link that changed) makes a cached plan stale, so it is compiled again here rather than
    # refused later by the same check in exec_main (which stays, for --plan files).
    rt = pf.get("runtime") or {}
    try:
        recheck_paths(rt.get("checks", ()))
    except Refusal:
        return False
    for path in rt.get("skipped", ()):
        if os.path.lexists(path):
            return False
    if pf.get("backend") == "landlock":
        from ..hostfacts import listing_digest
        from .probe import dir_listings, landlock_abi

        if host.get("landlock_abi") != landlock_abi():
            return False
        # Landlock grants the entries of folders above a stricter rule one by one, as they
        # were listed at compile time; an entry made since would get no rights.
        for d, digest in (pf.get("lowered") or {}).get("listed", ()):
            if listing_digest(dir_listings([d])[0][1]) != digest:
                return False
    return True


def compiler_stamp() -> str:
    """Size and mtime of every file the compiler is made of: a plan made by other code is
    a miss, even when the version number did not change (a development checkout, an
    upgrade that kept the number). One scandir per folder, no file is read."""
    import sbxc

    base = os.path.dirname(sbxc.__file__)
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
        try:
            with open(path, "rb") as f:
                parts.append(f.read(32).strip().decode("ascii", "replace"))
        except OSError:
            parts.append("-")
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f.read().split(b"\n"):
                if line.startswith((b"Seccomp:", b"Seccomp_filters:", b"NoNewPrivs:")):
                    parts.append(line.split(b":", 1)[1].strip().decode("ascii", "replace"))
    except OSError:
        parts.append("-")
    return ",".join(parts)


def plan_for_policy(policy, backend, network, environ, cwd: str, warn) -> dict:
    """The plan for ``policy`` (None: discovery) with the flags, from the cache or compiled."""
    ref = policy_ref(policy, cwd)
    bwrap = _which_bwrap(environ)
    key_src = "\x00".join((
        __version__, ref, cwd, backend or "", network or "", str(os.getuid()),
        environ.get("HOME", ""), bwrap, os.uname().machine, compiler_stamp(), userns_facts(),
    ))
    name = "p-" + _hex(key_src.encode("utf-8", "surrogateescape"))
    dir_fd = open_plans_dir()
    try:
        # Discovery: a nearer policy file that a sandboxed command removed would have
        # been the one to apply; checked first, the answer does not depend on the plan.
        nearer = candidates(cwd, ref) if policy is None else ()
        if dir_fd >= 0:
            check_taints(dir_fd, (), nearer)
            entry = _read_entry(dir_fd, name)
            if entry is not None and _entry_valid(entry, environ):
                check_taints(dir_fd, entry.get("sources", ()))
                return entry["plan"]
        from . import journal

        if dir_fd >= 0 and ref.startswith("/"):
            # Before compiling: a tainted file is refused as such, not judged on its contents.
            first = ((ref, policy_state(ref)),)
            check_taints(dir_fd, first)
            journal.check_sources(dir_fd, first)
        def gate(path: str) -> None:
            # Each source, every extends target included, before the compiler reads a
            # byte of it: a diagnostic would quote a planted one (a link to a secret).
            if path.startswith("/"):
                here = ((path, policy_state(path)),)
                check_taints(dir_fd, here)
                journal.check_sources(dir_fd, here)

        entry = compile_entry(policy, backend, network, environ, cwd, gate if dir_fd >= 0 else None)
        if dir_fd >= 0:
            # The digests were just read by the compiler: what the plan is made of. A file
            # a sandboxed run could have written since its last acceptance (the journal)
            # is refused; only then is the entry stored, so a later hit on the same bytes
            # needs no second look at the journal.
            check_taints(dir_fd, entry.get("sources", ()))
            journal.check_sources(dir_fd, entry.get("sources", ()))
            _write_entry(dir_fd, name, entry)
            ensure_reserve(dir_fd)  # on a miss only: a hit stays one open and one read
        return entry["plan"]
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def compile_entry(policy, backend, network, environ, cwd: str, gate=None) -> dict:
    """Compile (the slow path: imports the compiler); a Refusal (125) on errors, after the
    diagnostics were printed. ``gate``: see ``compile_policy``."""
    import json
    import sys

    from ..commands.build import lower  # moves to the exec command (handed in), see docs/architecture.md
    from ..compiler.api import compile_policy
    from ..compiler.diagnostics import ERROR, diag, render_text
    from ..compiler.report import NOT_ENFORCEABLE
    from ..planfile import build, dumps
    from .probe import probe_host

    host = probe_host(environ)
    overrides = {}
    if backend:
        overrides["backend"] = backend
    if network:
        overrides["network"] = network == "on"
    res = compile_policy(policy, cwd=cwd, environ=environ, host=host, overrides=overrides, gate=gate)
    diags = list(res.diagnostics)
    lowered = None
    if res.plan is not None:
        try:
            lowered = lower(res.backend, res.plan, host)
        except ImportError as e:
            raise Refusal(f"the {res.backend} backend is not part of this sbxc ({e})", "use another backend (sbxc doctor)") from None
        for v in lowered.verdicts:
            if v.status == NOT_ENFORCEABLE:
                diags.append(diag("SBX050", v.span, backend=res.backend, subject=v.subject, why=v.why))
    errors = [d for d in diags if d.severity == ERROR]
    if errors or res.plan is None or lowered is None:
        sys.stderr.write(render_text(errors or diags, res.lines, cwd))
        raise Refusal(f"the policy {one_line(res.policy, 200)} has errors", "fix them (sbxc compile --check)")
    pf = json.loads(dumps(build(res.plan, host, res.backend, lowered.data, lowered.verdicts)))
    return {
        "v": ENTRY_VERSION,
        "plan": pf,
        "sources": [[p, d] for p, d in res.sources],
        "env": [[k, v] for k, v in res.env_used.items()],
    }
