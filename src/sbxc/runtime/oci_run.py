"""Runner for the OCI backend: the plan's ``config.json`` run by runc (runner protocol in
``sbxc.runtime.spec``).

``prepare`` makes a per-run bundle (``rundirs``: locked while the run lasts, reaped when a
killed run left it): ``config.json`` with the run's command, environment and folder, and
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
ran, and the log's error names the cause (exit 125, or 127/126 for a command runc could
not find or exec, as a shell).

A user's runc runs rootless (``--rootless true``): its user namespace maps the caller as
the container's root (the plan says so), and it makes no cgroup it may not make.

Hot path: ``os`` only (the config is written by the small encoder below, not ``json``).
"""
from __future__ import annotations

import os

from .errors import Refusal, one_line
from .rundirs import make_run_dir
from .spec import LaunchSpec

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
    """126/127 when runc's error is that it could not find or exec the command, else None."""
    if 'exec: "' not in msg:
        return None
    if msg.endswith("executable file not found in $PATH") or msg.endswith("no such file or directory"):
        return 127
    return 126


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


def signal_masks(pid: int) -> tuple[int, int]:
    """(caught, ignored) signal masks of ``pid`` from /proc (0, 0 when unreadable)."""
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


def _config(planfile: dict, cmd: list, env: dict, ctx, shared=None) -> dict:
    low = planfile.get("lowered") or {}
    config = low.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("process"), dict):
        raise Refusal("the plan has no OCI config", "recompile the plan (sbxc compile -o PLAN)")
    relocate = ctx.cache.relocate if ctx.cache is not None and getattr(ctx.cache, "relocate", None) else (lambda p: p)
    mounts = []
    for m in config.get("mounts") or ():
        m = dict(m)
        m["destination"] = relocate(m["destination"])
        if m.get("type") == "bind" and m.get("source", "").startswith("/"):
            m["source"] = relocate(m["source"])
        elif shared is not None and m.get("type") == "bind" and m.get("source") == EMPTY_FILE:
            m["source"] = shared[1]
        mounts.append(m)
    linux = dict(config.get("linux") or {})
    readonly = [relocate(p) for p in linux.get("readonlyPaths") or ()]
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


def prepare(planfile: dict, cmd: list, env: dict, ctx) -> LaunchSpec:
    from .bwrap_run import _deepest
    from .probe import host_program

    low = planfile.get("lowered") or {}
    net = (planfile.get("runtime") or {}).get("network", "on")
    if low.get("network", net) != net or net != ctx.network:
        raise Refusal("the plan's OCI config and its network setting disagree", "recompile the plan")
    found, why = host_program("runc", ctx.environ)
    if not found:
        raise Refusal(f"no runc that sbxc may start: {why}" if why else
                      "runc is not installed (not in the system program folders on PATH)", _RUNC_FIX)

    # The command runs in the caller's folder or not at all (as on bwrap).
    cwd = ctx.cwd
    where, access = _deepest((planfile.get("runtime") or {}).get("checks") or (), cwd)
    if access in ("none", "mask") or (access == "tmpfs" and where != cwd):
        raise Refusal(f"the current folder {cwd} is not in the sandbox (policy: {access})",
                      "run sbxc from a folder the policy shows, e.g. the project")

    # The bundle: in the plans folder, which no sandbox may write (every OCI and bwrap run
    # gets an empty folder over it, Landlock refuses a policy that grants it), so no other
    # run's command can rewrite this run's config.json before runc reads it; else /tmp
    # (sticky: no one else can replace the folder). Its own folder is 0700 and locked.
    base = ctx.plans_dir if ctx.plans_dir and os.path.isdir(ctx.plans_dir) else "/tmp"
    try:
        bundle, lock_fd = make_run_dir(base)
    except (PermissionError, FileNotFoundError):
        base = "/tmp"
        bundle, lock_fd = make_run_dir(base)
    # The parts that are the same for every run (the empty rootfs, the empty file masks
    # bind) stay in the plans folder, so a run writes only its config.json: every folder
    # made and removed costs a journal update on disk. Never in /tmp, which others write.
    first = ((planfile.get("lowered") or {}).get("config") or {}).get("mounts") or [{}]
    shared = _shared_parts(base, first[0].get("destination") == "/" and first[0].get("type") == "bind") \
        if base == ctx.plans_dir else None
    own = [] if shared is not None and shared[0] else ["rootfs"]
    if shared is None:
        own.append(EMPTY_FILE)

    fds: list[int] = []

    def cleanup():
        for fd in fds:
            try:
                os.close(fd)
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

    try:
        config = _config(planfile, cmd, env, ctx, shared)
        text = dumps(config)
        if "rootfs" in own:
            os.mkdir(bundle + "/rootfs", 0o755)
        if EMPTY_FILE in own:
            os.close(os.open(bundle + "/" + EMPTY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
        fd = os.open(bundle + "/config.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
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
    # runc's state root is the bundle itself: runc makes a folder named by the container id
    # there and removes it when the run ends, so no state folder of sbxc's is needed.
    argv = [found, "--root", bundle, "--log", f"/proc/self/fd/{log_w}", "--log-format", "text"]
    if not ctx.is_root:
        argv += ["--rootless", "true"]
    argv += ["run", "--bundle", bundle, "--pid-file", pid_file, "sbxc-" + bundle.rsplit("-", 1)[-1]]

    log = bytearray()

    def read_log() -> str:
        try:
            while len(log) < 1 << 20:
                chunk = os.read(log_r, 65536)
                if not chunk:
                    break
                log.extend(chunk)
        except BlockingIOError:
            pass
        return log.decode("utf-8", "replace")

    def started() -> bool:
        return os.path.exists(pid_file)

    def setup_failed(status: int, early: str):
        if status == 0 or status > 128 or started():
            return None
        msg = log_error(read_log())
        if not msg:
            # runc ended before the command without saying why: nothing ran that sbxc
            # could vouch for, and the status is runc's, not the command's.
            return Refusal(f"runc exited with status {status} before the command started", "run sbxc doctor")
        if exec_status(msg) is not None:
            return None  # command_status words it as a shell would
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
        if pid <= 0:
            target, sig = runc_pid, signum  # not released yet: runc passes it on or dies of it
        else:
            caught, ignored = signal_masks(pid)
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
        if status == 0 or status > 128 or started():
            return status
        code = exec_status(log_error(read_log()))
        return code if code is not None else status

    setup = None
    if net == "on":
        from .bwrap_scope import child_setup

        setup = child_setup(int((planfile.get("host") or {}).get("landlock_abi") or 0))
    return LaunchSpec(argv, env, pass_fds=[log_w], exec_is_command=False, child_setup=setup, started=started,
                      setup_failed=setup_failed, command_status=command_status, cleanups=[cleanup], own_pgrp=True,
                      deliver=deliver)
