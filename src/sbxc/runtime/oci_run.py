"""Runner for the OCI backend: the plan's ``config.json`` run by runc (runner protocol in
``sbxc.runtime.spec``).

``prepare`` makes a per-run bundle (``rundirs``: locked while the run lasts, reaped when a
killed run left it), in the plans folder's ``runs`` folder (``_runs_dir``; a run is refused
without it): ``config.json`` with the run's command, environment and folder, and
runc's state (the bundle is runc's ``--root``). The empty ``rootfs`` (the plan binds the
host's folders read-only into it: no image) and the empty file masked files are bound
from are kept in the plans folder for every run (``_shared_parts``), or made in the
bundle when they cannot be shared. runc is taken from the
system program folders only (``probe.host_program``), never from a folder a sandboxed
command could write.

Knowing whether runc failed or the command did: runc exits 1 for its own failures, as a
command may, and the command's stderr can hold any text. So the decision comes from
runc's own channels, which the command never holds: runc's log goes to a pipe of sbxc's
(``--log /proc/self/fd/N``; runc marks every descriptor above stdio close-on-exec before
it execs the command), and ``--pid-file`` is written only once the container's process
was released to exec the command. No pid file and a non-zero status: the command never
ran, and the log's error names the cause (exit 125, or 127 for a command runc could not
find). What a shell would not exec is refused before the container exists (``program``):
once the pid file is written, runc tells a failed exec only on the command's own stderr.

Host rules, runs on a terminal and runs with a stdin to read (``_split_run``): the proxy's
listener must be in the container's network namespace before the command starts, and
`runc run` hands the command pipes that it copies its own stdio to and from (the command
would see no terminal, and runc reads stdin ahead, to its end, whether the command reads
it or not: ``_stdio_passed``). So such runs use `runc create`
(which passes its stdio on to the container as they are), the listener where there are
host rules (``proxy_netns``, as on bwrap), the core's last checks, then `runc start` (the
core's ``release``), and sbxc itself waits for the container's process (a child
subreaper) and runs `runc delete` after it. There the pid file is written by `runc
create`, so it does not mean the command started: ``release`` says so. Every other run
is one `runc run`, the fastest way.

A user's runc runs rootless (``--rootless true``): its user namespace maps the caller as
the container's root (the plan says so), and it makes no cgroup it may not make.

Hot path: ``os`` only (the config is written by the small encoder below, not ``json``).
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..layout import RUNS_SUBDIR
from .errors import NotStartable, Refusal, one_line
from .oci_watch import Watcher
from .rundirs import container_id, make_run_dir
from .safeopen import path_fd, reopen
from .spec import LaunchSpec, drain

_RUNC_FIX = "install runc (apt install runc), or use --backend bwrap"


def _string(s: str) -> str:
    # Nearly every string of a config (paths, syscall names, options) is printable and has
    # no quote or backslash: JSON takes it as it is. A printable character never needs an
    # escape, and a lone surrogate is not printable, so it still meets the check below.
    if s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F:
            out.append("\\u%04x" % o)
        elif 0xD800 <= o <= 0xDFFF:
            # A byte that is not UTF-8 (surrogateescape): runc's JSON reader would turn it
            # into U+FFFD, so the command would get another argument than the one given.
            raise Refusal("an argument, variable or path is not valid UTF-8, which an OCI config cannot carry",
                          "pass it in UTF-8, or use --backend bwrap")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dumps(value) -> str:
    """JSON text of dicts (keys sorted), lists, strings, ints and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        return "{" + ",".join(_string(k) + ":" + dumps(value[k]) for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if value is None:
        return "null"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def log_error(text: str) -> str:
    """The message of runc's last ``level=error`` line in its text log ('' when none)."""
    msg = ""
    for line in text.splitlines():
        at = line.find("level=error msg=")
        if at < 0:
            continue
        rest = line[at + len("level=error msg="):]
        if rest.startswith('"'):
            out, i = [], 1
            while i < len(rest) and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < len(rest):
                    i += 1
                out.append(rest[i])
                i += 1
            msg = "".join(out)
        else:
            msg = rest.split(" ", 1)[0]
    return msg


def exec_status(msg: str):
    """126/127 when runc's error is that it could not find or exec the command, else None:
    its search of ``PATH`` (``exec: "NAME": ...``) or its access check of the file found,
    made as the container's process, without capabilities (``...process: exec NAME: ...``;
    a file host root may run can be one the command's root may not)."""
    if 'exec: "' not in msg and "container process: exec " not in msg:
        return None
    if msg.endswith("executable file not found in $PATH") or msg.endswith("no such file or directory"):
        return 127
    return 126


def _elf_interpreter(head: bytes, f) -> str:
    """The PT_INTERP path of a 64-bit little-endian ELF whose first bytes are ``head`` ('' when
    it has none or the header cannot be read)."""
    if len(head) < 64 or head[4] != 2 or head[5] != 1:
        return ""
    phoff = int.from_bytes(head[32:40], "little")
    phentsize = int.from_bytes(head[54:56], "little")
    phnum = int.from_bytes(head[56:58], "little")
    if phentsize < 56 or phnum > 256:
        return ""
    table = os.pread(f, phentsize * phnum, phoff)
    for i in range(phnum):
        ph = table[i * phentsize:(i + 1) * phentsize]
        if len(ph) < 56 or int.from_bytes(ph[0:4], "little") != 3:  # PT_INTERP
            continue
        offset, size = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[32:40], "little")
        if size > 4096:
            return ""
        return os.fsdecode(os.pread(f, size, offset).split(b"\0", 1)[0])
    return ""


def _machine() -> bytes:
    """This host's ELF class, data and machine bytes (from the interpreter running sbxc)."""
    try:
        with open("/proc/self/exe", "rb") as f:
            head = f.read(20)
    except OSError:
        return b""
    return head[4:6] + head[18:20] if len(head) == 20 else b""


def _binfmt_misc() -> bool:
    """Whether the kernel has binfmt_misc handlers registered (other formats it can run)."""
    try:
        names = os.listdir("/proc/sys/fs/binfmt_misc")
    except OSError:
        return False
    return any(n not in ("register", "status") for n in names)


def _shown(path: str, checks, links=(), at=None) -> str:
    """``path`` resolved as the sandbox shows it: the real path, or '' when it or a link met
    on the way lies where the plan shows nothing (a mask, no rule, inside a tmpfs) or is
    missing. Each component is looked at where it lies, as the kernel walks it. (Not
    ``sbxc.linkwalk``, which judges the same links: it imports ``os`` and ``posixpath``,
    which a cached run otherwise never loads.) ``at``: None, or where the host holds what
    the sandbox shows at a path (a session's workspace: ``session_mounts.host_path``)."""
    from .staleness import deepest_check

    parts = [p for p in path.split("/") if p and p != "."]
    cur, hops = "", 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            cur = cur.rpartition("/")[0]
            continue
        cand = cur + "/" + part
        check = deepest_check(checks, cand)
        access = check[2] if check is not None else "none"
        if (access in ("none", "mask") or (access == "tmpfs" and check[0] != cand)) and cand not in links:
            # Not shown, unless a rule lies below it (then it is there as the folder that
            # holds that rule's mount point) or it is a link the runner makes in the rootfs
            # (with this host's target: the plan's ``links``, /bin -> usr/bin).
            below = cand + "/"
            if not any(isinstance(c, (list, tuple)) and c and isinstance(c[0], str) and c[0].startswith(below)
                       for c in checks):
                return ""
        here = at(cand) if at is not None else cand
        try:
            target = os.readlink(here)
        except OSError:
            if not os.path.lexists(here):
                return ""
            cur = cand
            continue
        hops += 1
        if hops > 40:
            return ""
        if target.startswith("/"):
            cur = ""
        parts = [p for p in target.split("/") if p and p != "."] + parts
    return cur or "/"


def _interpreter(path: str, cwd: str, checks, depth: int = 0, links=(), at=None) -> int:
    """0 when the kernel can open ``path`` as a program's interpreter inside the sandbox, else
    the shell's status for why not: 127 when it is missing (here, or hidden by the plan on
    the way to it), 126 when it is no regular file with execute permission. An interpreter
    that is itself a ``#!`` script is followed, as the kernel follows it (4 levels)."""
    if not path.startswith("/"):
        path = cwd.rstrip("/") + "/" + path  # relative: from the process's working folder
    real = _shown(path, checks, links, at)
    if not real:
        return 127
    if at is not None:
        real = at(real)
    pfd = _path_fd(real)
    if pfd < 0:
        return 127
    try:
        if not _executable_file(pfd):
            return 126
        if depth >= 4:
            return 0
        f = _reopen(pfd)
        if f < 0:
            return 0  # execute-only: the kernel decides
    finally:
        os.close(pfd)
    try:
        _code, inner = _format(os.pread(f, 256, 0), f)
    finally:
        os.close(f)
    return _interpreter(inner, cwd, checks, depth + 1, links, at) if inner else 0


def _path_fd(path: str) -> int:
    """``safeopen.path_fd``, or -1. The command's file may lie where a sandboxed command
    writes (the project), and that command may swap it for a link to a device while sbxc
    looks: sbxc, outside the sandbox and perhaps root, then looks only through this
    descriptor (``_executable_file``, ``_reopen``), never by the path again."""
    try:
        return path_fd(path)
    except OSError:
        return -1


def _executable_file(pfd: int) -> bool:
    """Whether ``pfd`` (``_path_fd``) is a regular file this process may execute."""
    try:
        st = os.fstat(pfd)
    except OSError:
        return False
    return st.st_mode & 0o170000 == 0o100000 and os.access(f"/proc/self/fd/{pfd}", os.X_OK)


def _reopen(pfd: int) -> int:
    """``safeopen.reopen``, or -1 when the file may not be read (execute-only)."""
    try:
        return reopen(pfd)
    except OSError:
        return -1


def _format(head: bytes, f: int):
    """What the kernel makes of a program whose first bytes are ``head`` (open as ``f``):
    (126, '') an ELF cut short or for another machine; (0, NAME) the ``#!`` or ELF
    interpreter to open ('' for a static ELF); (None, '') no format it runs (ENOEXEC, a
    ``#!`` naming nothing included)."""
    if head.startswith(b"#!"):
        name = _script_interpreter(head)
        return (0, name) if name else (None, "")
    if head.startswith(b"\x7fELF"):
        want = _machine()
        if len(head) < 64 or (want and head[4:6] + head[18:20] != want):
            return 126, ""
        return 0, _elf_interpreter(head, f)
    return None, ""


def _script_interpreter(head: bytes):
    """The interpreter a ``#!`` line names, read as the kernel reads it: the first line,
    ended at a NUL too, blanks (spaces and tabs) around; a CR stays part of the name. ''
    when the line names none, or when the name runs past the kernel's 256 bytes (ENOEXEC:
    execvp then hands the file to sh); None when ``head`` has no ``#!``."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].split(b"\0", 1)[0].replace(b"\t", b" ").lstrip(b" ")
    name = line.split(b" ", 1)[0]
    if b"\n" not in head and b"\0" not in head and name == line:
        return ""  # cut off by the kernel's buffer
    return os.fsdecode(name)


def program(cmd: list, env: dict, cwd: str, checks=(), links=(), at=None) -> list:
    """The command's argv for runc, or NotStartable (126/127) when the file it names cannot
    be executed: checked here, on the host, before the container exists.

    runc execs the command itself (no shell, no execvp) and, once it wrote the pid file, can
    say that its exec failed only on the command's own stderr, which the command could
    also have written: a status taken from there would let a command that ran be reported
    as never started. So what a shell would refuse is refused before the start, from the
    file itself (the sandbox shows the host's file at the same path, or none at all, and
    runc's own search then reports that through its log): a file without execute
    permission or anything but a regular file is 126. Its interpreter (the ``#!`` line's,
    read as the kernel reads it: spaces and tabs only, so a CR stays part of the name; an
    ELF's program interpreter) must be a regular file with execute permission that the
    plan (``checks``) shows inside: else 127 when missing or hidden, 126. An ELF cut short
    or for another machine is 126. A file that is neither ELF nor ``#!`` with a name is run
    by ``/bin/sh``, as execvp (bwrap) and the Landlock runner do (unless binfmt_misc has
    handlers, which may take it). A failure of the exec that this does not foresee is the
    status runc gives (1). ``at``: as for ``_shown`` (a session's run: the file is looked
    at in the workspace, found by the sandbox's own path, links walked one at a time)."""
    from .probe import find_command

    name = cmd[0]
    if "/" in name:
        path = name if name.startswith("/") else cwd.rstrip("/") + "/" + name
    elif at is None:
        path = find_command(name, env if env.get("PATH") else {})
    else:
        path = _find_shown(name, env, cwd, checks, links, at)
    if not path:
        return list(cmd)  # not on this host's PATH: runc's own search reports it (127)
    args = list(cmd)
    if not path.startswith("/"):
        # Found through a relative PATH entry ("", ".", "bin"): runc's search (Go's
        # exec.LookPath) refuses such a find ("cannot run executable found relative to
        # current directory"), where a shell runs it: the file found is named, absolute.
        path = cwd.rstrip("/") + "/" + path
        args[0] = path
    elif "/" not in name and not env.get("PATH"):
        # No PATH for the command: a shell, bwrap's execvp and the core's 127 check search a
        # default path, runc searches none ("not found"): the file found on it is named.
        args[0] = path
    host = path
    if at is not None:
        real = _shown(path, checks, links, at)
        if not real:
            return args  # missing or hidden in the sandbox: runc's own search decides
        host = at(real)
    pfd = _path_fd(host)
    if pfd < 0:
        return args  # gone, or not reachable here: runc's own search decides
    try:
        if not _executable_file(pfd):
            # A folder, a FIFO, a device or a socket: execve refuses them all (EACCES); none
            # is ever opened here (``_path_fd``).
            raise NotStartable(126, name)
        f = _reopen(pfd)
    finally:
        os.close(pfd)
    if f < 0:
        return args  # execute-only: nothing to read, the kernel decides
    try:
        code, interp = _format(os.pread(f, 256, 0), f)
        if code:
            raise NotStartable(code, name)  # cut short, or for another machine: ENOEXEC
        if interp:
            code = _interpreter(interp, cwd, checks, links=links, at=at)
            if code:
                raise NotStartable(code, name)
        elif code is None and not _binfmt_misc():
            # Not a format the kernel runs (a script without #!, or a #! naming nothing):
            # execvp hands it to sh. Where binfmt_misc has handlers, the kernel may run it:
            # runc execs it as it is.
            args = ["/bin/sh", name if "/" in name else path] + list(cmd[1:])
    finally:
        os.close(f)
    return args


def _find_shown(name: str, env: dict, cwd: str, checks, links, at) -> str:
    """``probe.find_command`` as the sandbox shows the files (a session's run: PATH folders
    in the project are the workspace's): the path as found (relative for a relative PATH
    entry), or ''."""
    for d in (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":"):
        p = (d or ".") + "/" + name
        real = _shown(p if d.startswith("/") else cwd.rstrip("/") + "/" + p, checks, links, at)
        if real and os.access(at(real), os.X_OK) and not os.path.isdir(at(real)):
            return p
    return ""


def runc_failure(msg: str) -> Refusal:
    text = msg.removeprefix("runc run failed: ")
    if "permission denied" in text and os.geteuid() != 0:
        fix = ("rootless runc needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
               "user.max_user_namespaces > 0); or use --backend bwrap")
    else:
        fix = "run sbxc doctor, or use --backend bwrap"
    return Refusal(f"runc could not start the sandbox: {one_line(text, 300)}", fix)


_SIGKILL = 9
_DEFAULT_IGNORED = (17, 23, 28)  # SIGCHLD, SIGURG, SIGWINCH: nothing to emulate


def container_pid(pid_file: str) -> int:
    """The command's pid on the host, from runc's pid file (0 while it is not written)."""
    try:
        with open(pid_file, "rb") as f:
            text = f.read(32)
    except OSError:
        return 0
    return int(text) if text.strip().isdigit() else 0


def _mid_exec(pid: int) -> bool:
    """Whether ``pid`` is inside an exec: its new program's code is not mapped yet
    (startcode 0 in /proc/PID/stat; a process whose memory this user may not read shows
    1 there, one with none, a zombie, 0)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b") ")[2].split()
        return fields[0] != b"Z" and int(fields[23]) == 0
    except (OSError, ValueError, IndexError):
        return False


def signal_masks(pid: int, runc: str = "") -> tuple[int, int]:
    """(caught, ignored) signal masks of ``pid`` from /proc (0, 0 when unreadable). ``runc``:
    when ``pid`` is still that runc's init (released, its exec of the command not done
    yet), (0, 0) as well: the masks read are the Go runtime's, which catches everything,
    and a signal sent as it is would stay pending across the exec and then be dropped, the
    command being pid 1 of its namespace without a handler. Its default action is what an
    ordinary process would get from it that early."""
    if runc and _is_runc_init(pid, runc):
        return 0, 0
    if runc:
        # Past runc init but perhaps inside the exec: the new program's memory is in place
        # (its command line shows) before the kernel resets the old handlers, which it has
        # done once the program's code is mapped (startcode, /proc/PID/stat). Read earlier,
        # the masks are still the Go runtime's: a Ctrl-C judged caught and sent as it is
        # was then dropped by the command, pid 1 without a handler. Such a moment lasts
        # well under a millisecond; waited for, at most 50 ms.
        import time

        deadline = time.monotonic() + 0.05
        while _mid_exec(pid) and time.monotonic() < deadline:
            time.sleep(0.0005)
    caught = ignored = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read().split(b"\n"):
                if line.startswith(b"SigCgt:"):
                    caught = int(line[7:].strip(), 16)
                elif line.startswith(b"SigIgn:"):
                    ignored = int(line[7:].strip(), 16)
    except (OSError, ValueError):
        pass
    return caught, ignored


RUNC_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
"""runc's own environment, on every call: fixed, neither the command's nor sbxc's. runc
runs on the host (and again as ``runc init`` while it sets the container up); started with
the command's variables, its dynamic loader would take a policy's LD_PRELOAD or
LD_LIBRARY_PATH (env.set), which may point at files an earlier sandboxed run wrote, and run
them with the caller's rights. The command's environment reaches it through
``config.json`` (``process.env``) alone."""


def _config(planfile: dict, cmd: list, env: dict, ctx, shared=None) -> dict:
    low = planfile.get("lowered") or {}
    config = low.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("process"), dict):
        raise Refusal("the plan has no OCI config", "recompile the plan (sbxc compile -o PLAN)")
    cache = ctx.cache if ctx.cache is not None and getattr(ctx.cache, "relocate", None) else None
    relocate = cache.relocate if cache is not None else (lambda p: p)
    # A mask on the planned cache root stays there, the throwaway's root gets its own
    # (cachedir.CacheSetup.masks): only a mask (no source path) is doubled.
    masks = cache.masks if cache is not None else (lambda p: [p])
    mounts = []
    for m in config.get("mounts") or ():
        m = dict(m)
        if m.get("type") == "bind" and m.get("source", "").startswith("/"):
            m["source"] = relocate(m["source"])
            m["destination"] = relocate(m["destination"])
            mounts.append(m)
            continue
        if shared is not None and m.get("type") == "bind" and m.get("source") == EMPTY_FILE:
            m["source"] = shared[1]
        for where in masks(m["destination"]):
            mounts.append(dict(m, destination=where))
    ws = getattr(ctx, "workspace", None)
    if ws is not None:
        from .session_mounts import oci_mounts
        from .staleness import deepest_check

        check = deepest_check((planfile.get("runtime") or {}).get("checks") or (), ws.project)
        mounts = oci_mounts(mounts, ws.project, ws.path, check[2] if check is not None else "none")
    linux = dict(config.get("linux") or {})
    net = (planfile.get("runtime") or {}).get("network", "on")
    if net != "on" and not any(isinstance(n, dict) and n.get("type") == "network" and not n.get("path")
                               for n in linux.get("namespaces") or ()):
        # A network off or narrowed is a new, empty namespace; without one (or with one
        # joined by path) the command would share a network the plan does not allow.
        raise Refusal("the plan's OCI config shares a network namespace although its network setting does not",
                      "recompile the plan")
    readonly = [q for p in linux.get("readonlyPaths") or () for q in masks(p)]
    # The plan cache must stay out of every sandbox's reach: an empty folder on top of it,
    # made read-only with the masks (it may sit inside one).
    plans = ctx.plans_dir
    if plans and os.path.isdir(plans) and not os.path.islink(plans):
        mounts.append({"destination": plans, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=0755"]})
        readonly.append(plans)
    linux["readonlyPaths"] = sorted(set(readonly))
    process = dict(config["process"])
    process["args"] = list(cmd)
    process["env"] = [f"{k}={v}" for k, v in sorted(env.items())]
    process["cwd"] = ctx.cwd
    out = dict(config)
    out.update(process=process, mounts=mounts, linux=linux)
    if shared is not None and shared[0]:
        out["root"] = dict(config.get("root") or {}, path=shared[0])
    return out


EMPTY_FILE = "sbxc-empty"  # the bundle's name for it (backends.oci.EMPTY_FILE; not imported: the compiler side)
SHARED_ROOTFS = "oci-rootfs"
SHARED_EMPTY = "oci-empty"


def _runs_dir(plans: str) -> str:
    """The plans folder's sub-folder for bundles, made 0700 when missing; "" when there is
    no plans folder, it is a link (the runs would not get the empty folder every sandbox
    has over the plans folder), or the entry is not a folder of this user's that only it
    can enter (never followed when it is a link)."""
    if plans and not os.path.lexists(plans):
        # No plan cached yet (a --plan run on a fresh cache root): made as the plan cache
        # makes it, with its checks of the root and of the folder.
        from .planstore import open_plans_dir, plans_dir

        if plans == plans_dir():
            fd = open_plans_dir(create=True)
            if fd >= 0:
                os.close(fd)
    if not plans or os.path.islink(plans) or not os.path.isdir(plans):
        return ""
    path = plans + "/" + RUNS_SUBDIR
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return ""
    try:
        st = os.lstat(path)
    except OSError:
        return ""
    if st.st_mode & 0o170000 != 0o040000 or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return ""
    return path


def _shared_parts(plans: str, root_covered: bool):
    """(rootfs or "", empty file) kept in the plans folder for every run, or None.

    The empty file is what masked files are bound from: it must be an empty regular file of
    this user's. The shared rootfs is used only when the config's first mount binds a
    folder onto the container's "/": runc then makes no mount point in the rootfs folder
    itself (every later mount point is inside that bind), so the folder stays as it is and
    what it holds is never seen. Without that mount runc creates the mount points in the
    rootfs on disk, and a shared folder would show one run's mount points to every other:
    the run gets its own, as before. The plans folder is out of every sandbox's reach, as
    for the bundle, so nothing a command does can change either between the check here and
    runc's use of them. Anything unexpected means the per-run parts (None)."""
    import stat

    uid = os.geteuid()
    empty = plans + "/" + SHARED_EMPTY
    rootfs = plans + "/" + SHARED_ROOTFS
    try:
        try:
            st = os.lstat(empty)
        except FileNotFoundError:
            tmp = f"{empty}.{os.getpid()}"
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444))
            os.replace(tmp, empty)  # two runs at once: either file is right
            st = os.lstat(empty)
        if not stat.S_ISREG(st.st_mode) or st.st_size != 0 or st.st_uid != uid:
            return None
        if not root_covered:
            return "", empty
        try:
            os.mkdir(rootfs, 0o755)
        except FileExistsError:
            pass
        st = os.lstat(rootfs)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            return None
    except OSError:
        return None
    return rootfs, empty


def _watcher_refusal(e: OSError) -> Refusal:
    import errno

    fix = ("check the limit on processes (ulimit -u)" if e.errno in (errno.EAGAIN, errno.ENOMEM) else
           "check the shell sbxc found (SBXC_SH, docs/host-programs.md; sbxc doctor)")
    return Refusal(f"could not start the process that ends the container with sbxc ({e.strerror or e})", fix)


def _log_reader(log_r: int):
    """A function returning runc's log so far (the pipe's read end is non-blocking)."""
    log = bytearray()

    def read_log() -> str:
        drain(log_r, log, 1 << 20)
        return log.decode("utf-8", "replace")

    return read_log


_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _become_subreaper() -> None:
    """sbxc becomes the container's parent once `runc create` has exited (``_split_run``).

    `runc create` exits once the container's first process waits on runc's exec fifo. That
    process is runc create's child (runc's last clone uses CLONE_PARENT) and is
    reparented, when runc create exits, to its nearest subreaper ancestor. With sbxc one
    it is sbxc's own child from then on: sbxc waits for it (the command's status, as
    `runc run` would report it), and while it is not reaped its pid cannot be reused, so
    the pidfd and the namespace join name exactly that process."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise Refusal(f"cannot become the container's parent (prctl: {os.strerror(err)})", "use --backend bwrap")


def _runc_call(argv: list, env: dict, log_w: int) -> int:
    """Run one short runc command (start, delete) to its end; its exit code (125 when it
    could not be started). Its output and log go to the log pipe (``argv`` names fd 2 as
    the log), never to the command's stderr; its own process group keeps the terminal's
    Ctrl-C away from it. A descriptor sbxc holds without close-on-exec (a caller's
    ``--status-fd``) reaches only this runc, which gives the container nothing: its
    process was made by `runc create`, with the core's descriptors only."""
    import _signal

    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log_w, 1),
            (os.POSIX_SPAWN_DUP2, log_w, 2),
        ], setpgroup=0, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError:
        return 125
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 125
    return os.waitstatus_to_exitcode(status)


def _still_waiting(pid: int, runc: str, fifo: str) -> bool:
    """Whether ``pid`` (sbxc's unreaped child) was never released to the command: runc's
    exec fifo is still there (`runc start` removes it once it has read it) and the process
    is still runc's init (its argv ``RUNC init``), not the command."""
    return os.path.exists(fifo) and _is_runc_init(pid, runc)


def _is_runc_init(pid: int, runc: str) -> bool:
    """Whether ``pid`` is still runc's init (its argv ``RUNC init``), not the command."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read(4096).split(b"\0")
    except OSError:
        return False
    # Bytes compared as bytes: the hot path's os.path (sbxc.fastos) takes text only.
    return len(args) >= 2 and args[1] == b"init" and args[0].rpartition(b"/")[2] == os.fsencode(runc).rpartition(b"/")[2]


_DEV_NULL = (1 << 8) | 3  # st_rdev of /dev/null (char 1:3 on Linux)


def _stdio_passed() -> bool:
    """Whether the caller's stdio must reach the command as they are (``_split_run``): a
    terminal on any of them, or a stdin with something to read. `runc run` hands the
    command pipes and copies its own stdio into them: the command would see no terminal,
    and runc reads its stdin ahead, to the end, whether the command reads it or not (a
    `while read` loop around sbxc lost every line after the first). A stdin that is
    /dev/null, or none at all (the core gives the command /dev/null then), has nothing to
    read: such runs keep the single `runc run`. Not so a stdout and stderr that are one
    stream (``supervise.one_stream``: a caller's ``2>&1``): `runc run` copies the command's
    stdout and stderr from two pipes of its own, and what the command wrote to one would
    reach the stream out of order with what it wrote to the other."""
    from .supervise import one_stream

    if one_stream():
        return True
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return True
        except OSError:
            pass
    try:
        st = os.fstat(0)
    except OSError:
        return False
    return not (st.st_mode & 0o170000 == 0o020000 and st.st_rdev == _DEV_NULL)


def _split_run(argv, base_argv, bundle, pid_file, cid, env, proxy, log_r, log_w, cleanup, watcher, sh,
               setup=None, name="") -> LaunchSpec:
    """Host rules, a terminal or a stdin to read (``_stdio_passed``): `runc create`, the
    proxy's listener (``proxy``: None when there are no host rules), `runc start` (see the
    module text).

    The core starts `runc create` (``argv``). ``launched`` waits for it to exit: the
    container's first process then waits on runc's exec fifo, with every namespace made
    and sbxc as its parent. The listener is made in its network namespace
    (``proxy_netns``) and handed to the proxy; the core's last checks follow, and only
    ``release`` runs `runc start`. Any failure before that kills the waiting process
    (SIGKILL through a pidfd: it is sbxc's unreaped child), reaps it and deletes the
    container, so the command never ran and nothing of the container is left. ``name``:
    the command as given, for sbxc's line when runc found it cannot be executed."""
    import _signal

    read_log = _log_reader(log_r)
    # The watcher before `runc create`: a container still being made when sbxc dies is
    # deleted once that runc has ended (its lifeline, which only it holds then).
    life_r, life_w = os.pipe()  # both close-on-exec; runc create gets life_w (pass_fds)
    lifeline = [life_w]
    try:
        watcher.start(sh, base_argv + ["delete", "--force", cid], lifeline=life_r)
    except OSError as e:
        os.close(life_w)
        raise _watcher_refusal(e) from None
    finally:
        os.close(life_r)

    def drop_lifeline() -> None:
        fd, lifeline[0] = lifeline[0], -1
        if fd >= 0:
            os.close(fd)

    init = [0]        # the container's first process, sbxc's child once runc create exited
    pidfd = [-1]      # on it, opened while it was sbxc's unreaped child
    created = [False]
    deleted = [False]
    started = [False]
    create_failed = [None]  # runc create's exit code when it failed
    refused = []
    pending = [0]     # a signal that came before the start: no start, the run ends with it
    emulated = [0]

    def delete() -> None:
        if deleted[0] or not created[0]:
            return
        # The container's process is gone (reaped): runc sees it stopped and removes its
        # cgroup and state at once (a created container would cost its 100 ms kill loop).
        # Not deleted: tried again by the cleanup, which reports a second failure.
        if _runc_call(base_argv + ["delete", "--force", cid], env, log_w) != 0:
            msg = log_error(read_log())
            raise OSError(f"runc could not delete the container {cid} ({one_line(msg or 'no reason given', 200)})")
        deleted[0] = True

    def abort() -> None:
        """End the container before its command: kill and reap its waiting process, delete it."""
        fd, pidfd[0] = pidfd[0], -1
        if fd >= 0:
            try:
                try:
                    _signal.pidfd_send_signal(fd, _signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitid(os.P_PIDFD, fd, os.WEXITED)
                except ChildProcessError:
                    pass
            finally:
                os.close(fd)
        init[0] = 0
        delete()

    def abort_here() -> None:
        # In the core's flow (launched, release): a failed delete must not replace the
        # refusal; the cleanup (end_container) tries again and reports it.
        try:
            abort()
        except OSError:
            pass

    def end_container() -> None:
        # After the run (the core reaped the process: the kill finds nothing, the
        # container is stopped), or when the core gave up early: whatever is left goes.
        abort()

    def launched(pid: int) -> int:
        drop_lifeline()  # runc create holds it now: its end is the watcher's cue
        joiner = None
        try:
            if proxy is not None:
                joiner = proxy.joiner()  # forked now: its start-up overlaps runc's
            try:
                code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            except ChildProcessError:
                code = 125
            watcher.made()  # runc create is over: the watcher need not wait for its lifeline
            created[0] = os.path.isdir(bundle + "/" + cid)  # runc's state folder: delete it whatever happened
            child = container_pid(pid_file)
            if code != 0 or child <= 0:
                if code < 0:
                    # runc create died of a signal: one meant for the run (a Ctrl-C reaches
                    # it before its session is its own, pending across its exec). The run
                    # ends with it, as the signal's default action, before the command.
                    pending[0] = pending[0] or -code
                else:
                    create_failed[0] = code  # 0: it said it made the container, and wrote no pid file
                if child > 0:
                    _adopt(child)
                abort_here()
                return 0
            _adopt(child)
            if proxy is not None:
                proxy.listen_in(joiner, os.getpid(), child)
            return child
        except BaseException as e:  # noqa: BLE001 - every failure refuses the run
            from .proxy_netns import NetnsError

            why = str(e) if isinstance(e, NetnsError) else f"{type(e).__name__}: {e}"
            if proxy is None:
                refused.append(Refusal(f"could not take over the container's first process ({one_line(why, 200)})",
                                       "run sbxc doctor, or use --backend bwrap"))
            else:
                refused.append(Refusal(f"the network proxy could not be put into the container ({one_line(why, 200)})",
                                       "check that runc may create user and network namespaces (sbxc doctor)"))
            abort_here()
            return 0
        finally:
            if joiner is not None:
                joiner.close()

    def _adopt(child: int) -> None:
        # The pidfd is opened first, then the parent checked while the pidfd shows the
        # process alive: it then names sbxc's own child, whose pid cannot be reused.
        fd = os.pidfd_open(child)
        try:
            with open(f"/proc/{child}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
            import select

            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if ppid != os.getpid() or poller.poll(0):
                from .proxy_netns import NetnsError

                raise NetnsError("the container's first process is not sbxc's child")
        except BaseException:
            os.close(fd)
            raise
        init[0], pidfd[0] = child, fd

    def release(go: bool = True) -> bool:
        if init[0] <= 0:
            return False
        if not go or pending[0]:
            abort_here()
            return False
        code = _runc_call(base_argv + ["start", cid], env, log_w)
        if code != 0 and _still_waiting(init[0], argv[0], bundle + "/" + cid + "/exec.fifo"):
            if code < 0:
                # Killed by a signal before it released the process (a Ctrl-C reaches it
                # before its process group is set): the run ends with it (as in launched).
                pending[0] = pending[0] or -code
                abort_here()
                return False
            msg = log_error(read_log())
            refused.append(runc_failure(msg) if msg else
                           Refusal("runc start failed before the command started", "run sbxc doctor"))
            abort_here()
            return False
        # Started (or runc released the process and then failed: the command may be
        # running, and its status is what counts from here).
        started[0] = True
        late, pending[0] = pending[0], 0
        if late:
            deliver(late, 0)  # it came while runc start ran: the command gets it now
        return True

    def deliver(signum: int, _child: int) -> None:
        if not started[0]:
            if signum not in _DEFAULT_IGNORED:
                pending[0] = pending[0] or signum  # before the start: the command will not run
            return
        pid = init[0]
        if pid <= 0:
            return
        caught, ignored = signal_masks(pid, base_argv[0])
        bit = 1 << (signum - 1)
        if caught & bit or signum in _DEFAULT_IGNORED:
            sig = signum
        elif ignored & bit:
            return
        else:
            emulated[0] = signum
            sig = _SIGKILL
        fd = pidfd[0]
        try:
            if fd >= 0:
                _signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def setup_failed(status: int, early: str):
        if refused:
            return refused[0]
        if create_failed[0] is not None:
            msg = log_error(read_log())
            code = exec_status(msg) if msg else None
            if code is not None:
                return NotStartable(code, name)  # runc's own words are not shown
            if msg:
                return runc_failure(msg)
            return Refusal(f"runc exited with status {create_failed[0]} before the command started"
                           + (" and made no container" if create_failed[0] == 0 else ""), "run sbxc doctor")
        return None

    def command_status(status: int, first: bytes) -> int:
        if pending[0] and not started[0]:
            return 128 + pending[0]
        if emulated[0] and status == 128 + _SIGKILL:
            return 128 + emulated[0]
        return status

    # Cleanups run last first: the lifeline is dropped before the watcher is ended (it waits
    # on it when told to delete).
    return LaunchSpec(argv + ["create", "--bundle", bundle, "--pid-file", pid_file, cid], env, child_setup=setup,
                      pass_fds=[log_w, life_w], exec_is_command=False, started=lambda: started[0],
                      setup_failed=setup_failed, command_status=command_status,
                      cleanups=[cleanup, watcher.finish, drop_lifeline, end_container],
                      own_session=True, deliver=deliver, launched=launched, release=release)


def prepare(planfile: dict, cmd: list, env: dict, ctx) -> LaunchSpec:
    from .staleness import deepest_check
    from .probe import host_program

    low = planfile.get("lowered") or {}
    net = (planfile.get("runtime") or {}).get("network", "on")
    if low.get("network", net) != net or net != ctx.network:
        raise Refusal("the plan's OCI config and its network setting disagree", "recompile the plan")
    found, why = host_program("runc", ctx.environ)
    if not found:
        raise Refusal(f"no runc that sbxc may start: {why}" if why else
                      "runc is not installed (not in the system program folders on PATH)", _RUNC_FIX)
    sh, why = host_program("sh", ctx.environ)  # the watcher's (oci_watch)
    if not sh:
        raise Refusal(f"no sh that sbxc may start for the run's watcher: {why}" if why else
                      "sh, which ends the container if sbxc is killed, is not in the system program folders on PATH",
                      "install dash (apt install dash), or name a shell with SBXC_SH (docs/host-programs.md)")
    proxy = None
    if net == "hosts":
        proxy = getattr(ctx, "proxy", None)
        if proxy is None or not proxy.in_sandbox:
            raise Refusal("the plan has host rules but no proxy was started for it", "report this")
    split = proxy is not None or _stdio_passed()
    if split:
        _become_subreaper()

    # The command runs in the caller's folder or not at all (as on bwrap).
    cwd = ctx.cwd
    check = deepest_check((planfile.get("runtime") or {}).get("checks") or (), cwd)
    where, access = (check[0], check[2]) if check is not None else ("", "none")
    if access in ("none", "mask") or (access == "tmpfs" and where != cwd):
        raise Refusal(f"the current folder {cwd} is not in the sandbox (policy: {access})",
                      "run sbxc from a folder the policy shows, e.g. the project")
    made = {ln[0] for ln in low.get("links") or () if isinstance(ln, (list, tuple)) and ln and isinstance(ln[0], str)}
    at = None
    if ctx.workspace is not None:
        from .session_mounts import host_path

        project, ws_path = ctx.workspace.project, ctx.workspace.path
        at = lambda p: host_path(p, project, ws_path)  # noqa: E731
    cmd = program(cmd, env, cwd, (planfile.get("runtime") or {}).get("checks") or (), made, at)  # 126/127 first, as a shell

    # The bundle: in the plans folder's own ``runs`` folder (layout.RUNS_SUBDIR: reaping
    # stale ones lists it on every run, and the plans folder holds hundreds of entries),
    # which no sandbox may write (every OCI and bwrap run gets an empty folder over the
    # plans folder, Landlock refuses a policy that grants it). So no other run's command
    # can rewrite this run's config.json before runc reads it, nor runc's state of the
    # container, which `runc delete` acts on (and runs the hooks a state names). No other
    # place is as safe (/tmp is written by other sandboxes of the same user): without it
    # the run is refused. Its own folder is 0700 and locked; stale ones are reaped, their
    # containers deleted first (rundirs._end_containers).
    base = _runs_dir(ctx.plans_dir)
    if not base:
        raise Refusal(f"the OCI backend keeps each run's bundle in sbxc's plans folder, and "
                      f"{one_line(ctx.plans_dir or 'none', 200)} cannot hold it (it must be a folder of yours, not a "
                      "link, that only you can enter)", "check sbxc's cache root (SBXC_ROOT) and its plans folder")
    try:
        bundle, lock_fd = make_run_dir(base, runc=found)
    except OSError as e:
        raise Refusal(f"could not make the run's bundle in {one_line(base, 200)} ({e.strerror})",
                      "check that sbxc's plans folder is writable") from None
    # The parts that are the same for every run (the empty rootfs, the empty file masks
    # bind) stay in the plans folder, so a run writes only its config.json: every folder
    # made and removed costs a journal update on disk.
    first = ((planfile.get("lowered") or {}).get("config") or {}).get("mounts") or [{}]
    shared = _shared_parts(ctx.plans_dir, first[0].get("destination") == "/" and first[0].get("type") == "bind")
    own = [] if shared is not None and shared[0] else ["rootfs"]
    if shared is None:
        own.append(EMPTY_FILE)

    fds: list[int] = []
    made_links: list[str] = []

    def cleanup():
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for path in made_links:  # the rootfs's links, then the folders made for them
            try:
                (os.unlink if os.path.islink(path) else os.rmdir)(path)
            except OSError:
                pass
        # What the run made, by name; runc removed its own state (the folder named by the
        # container id) when it ended. Anything else left (runc killed, mount points made
        # in a per-run rootfs): the whole tree, never following a link.
        try:
            for name in ["config.json", "pid"] + [n for n in own if n == EMPTY_FILE]:
                try:
                    os.unlink(bundle + "/" + name)
                except FileNotFoundError:
                    pass
            if "rootfs" in own:
                os.rmdir(bundle + "/rootfs")
            os.rmdir(bundle)
        except OSError:
            from .trees import remove_path

            remove_path(bundle)
        try:
            os.close(lock_fd)
        except OSError:
            pass

    gate = None
    try:
        if "rootfs" in own:
            os.mkdir(bundle + "/rootfs", 0o755)
            if low.get("links"):
                from .oci_links import make_links

                made_links += make_links(bundle + "/rootfs", low["links"])
        if EMPTY_FILE in own:
            os.close(os.open(bundle + "/" + EMPTY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
        if split:
            # runc create, then start (_split_run): the config as a file, written now.
            text = dumps(_config(planfile, cmd, env, ctx, shared))
            fd = os.open(bundle + "/config.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with open(fd, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            # The release gate (oci_gate): runc starts at once and waits for its config,
            # which is written while it starts and sent only once the run's last checks passed.
            from .oci_gate import Gate

            gate = Gate(bundle + "/config.json")
            fds += [gate.r, gate.w]
        log_r, log_w = os.pipe2(os.O_CLOEXEC)
        fds += [log_r, log_w]
        os.set_blocking(log_r, False)  # the read end only: runc's writes stay blocking
    except OSError as e:
        cleanup()
        raise Refusal(f"could not write the OCI bundle in {bundle} ({e.strerror})", "check that the folder is writable") from None
    except BaseException:
        cleanup()
        raise

    pid_file = bundle + "/pid"
    cid = container_id(bundle.rpartition("/")[2])
    # runc's state root is the bundle itself: runc makes a folder named by the container id
    # there and removes it when the run ends, so no state folder of sbxc's is needed.
    argv = [found, "--root", bundle, "--log", f"/proc/self/fd/{log_w}", "--log-format", "text"]
    rootless = [] if ctx.is_root else ["--rootless", "true"]
    argv += rootless
    # Ends the container if sbxc itself ends without ending the run (oci_watch).
    watcher = Watcher()
    # With the host's network the container shares its network namespace, and with it the
    # host's abstract Unix sockets: runc (create or run), and so the command, starts inside
    # a Landlock domain that scopes them (bwrap_scope), on either path.
    setup = None
    if net == "on":
        from .bwrap_scope import child_setup

        setup = child_setup(int((planfile.get("host") or {}).get("landlock_abi") or 0))
    if split:
        base_argv = [found, "--root", bundle, "--log", "/proc/self/fd/2", "--log-format", "text"] + rootless
        return _split_run(argv, base_argv, bundle, pid_file, cid, RUNC_ENV, proxy, log_r, log_w, cleanup, watcher, sh,
                          setup, cmd[0])
    argv += ["run", "--bundle", bundle, "--pid-file", pid_file, cid]

    read_log = _log_reader(log_r)
    text: list = [None]
    refused: list = []

    def launched(pid: int) -> None:
        # runc runs and waits for its config: it is made now, while runc starts.
        gate.pid = pid
        try:
            watcher.start(sh, [found, "--root", bundle, *rootless, "delete", "--force", cid], made_when=(pid_file, pid))
        except OSError as e:
            refused.append(_watcher_refusal(e))  # never released: runc reads end of file
            return
        try:
            text[0] = dumps(_config(planfile, cmd, env, ctx, shared)).encode("utf-8")
        except Refusal as r:
            refused.append(r)
        except Exception as e:  # a damaged plan: refused, never run half-configured
            refused.append(Refusal(f"could not write the OCI config ({type(e).__name__}: {one_line(str(e), 200)})",
                                   "recompile the plan (sbxc compile -o PLAN)"))

    def release(go: bool = True) -> bool:
        if go and text[0] is None:
            go = False  # the config could not be made (``refused`` says why)
        return gate.release(lambda: text[0], go)

    def started() -> bool:
        return os.path.exists(pid_file)

    def end_watch() -> None:
        # runc reaped by the core (the run is over) or never started: the watcher stands
        # down. Still running (the core gave up on it, e.g. an internal error): the
        # watcher deletes the container instead, before the bundle (its state) goes.
        alive = False
        if gate.pid:
            try:
                alive = os.waitpid(gate.pid, os.WNOHANG)[0] == 0
            except ChildProcessError:
                alive = False
        watcher.finish(stand_down=not alive)
        if alive:
            from .supervise import reap_within

            reap_within(gate.pid, 5.0, 0.01)  # runc ends once its container's process is gone

    def setup_failed(status: int, early: str):
        if refused:
            return refused[0]
        if status > 128 or started():
            return None
        msg = log_error(read_log())
        if not msg:
            # runc ended before the command without saying why: nothing ran that sbxc
            # could vouch for, and the status is runc's, not the command's. Also a 0: `runc
            # run` writes its pid file once the command started, so a runc that exits 0
            # without one started nothing (no status 0 may say a command ran that did not).
            return Refusal(f"runc exited with status {status} before the command started", "run sbxc doctor")
        code = exec_status(msg)
        if code is not None:
            return NotStartable(code, cmd[0])  # runc's own words are not shown
        return runc_failure(msg)

    emulated = [0]

    def deliver(signum: int, runc_pid: int) -> None:
        # The command is pid 1 of its PID namespace, and the kernel drops every signal
        # but SIGKILL and SIGSTOP that reaches such a process without a handler, also from
        # outside: forwarded as it is, Ctrl-C or a timeout's SIGTERM would not end `sleep`.
        # So do what the signal would do to an ordinary process: deliver it when the
        # command catches it, drop it when it ignores it, else end the command (SIGKILL)
        # and report 128+signum, as the signal's default action would.
        pid = container_pid(pid_file)
        if pid <= 0 and gate.released:
            # `runc run` writes the pid file only after the command has started. A signal in
            # between would go to runc, which passes it on to the command as pid 1, where
            # the kernel drops it: `sleep` would not end. Wait for the file (runc writes it
            # right after the start), as long as runc is there.
            import time

            deadline = time.monotonic() + 5.0
            while pid <= 0 and time.monotonic() < deadline and gate._alive():
                time.sleep(0.002)
                pid = container_pid(pid_file)
        if pid <= 0:
            target, sig = runc_pid, signum  # not released yet: runc passes it on or dies of it
        else:
            caught, ignored = signal_masks(pid, found)
            bit = 1 << (signum - 1)
            if caught & bit or signum in _DEFAULT_IGNORED:
                target, sig = pid, signum
            elif ignored & bit:
                return
            else:
                emulated[0] = signum
                target, sig = pid, _SIGKILL
        try:
            os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def command_status(status: int, first: bytes) -> int:
        if emulated[0] and status == 128 + _SIGKILL:
            return 128 + emulated[0]
        return status

    return LaunchSpec(argv, dict(RUNC_ENV), pass_fds=[log_w], exec_is_command=False, child_setup=setup, started=started,
                      setup_failed=setup_failed, command_status=command_status, cleanups=[cleanup, end_watch],
                      own_session=True,
                      deliver=deliver, launched=launched, release=release)
