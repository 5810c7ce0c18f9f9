"""Runner for the sandbox-exec backend (macOS): ``sandbox-exec -f PROFILE -D ... -- CMD``.

Implements the runner protocol of ``sbxc.runtime.spec`` (``prepare`` returns a
``LaunchSpec``; nothing is started here). Hot path: ``os``, the refusal type and the tree
removal (``sbxc.runtime.trees``).

Fail-closed points:
- the plan carries ``refuse`` reasons (a rule the profile could not express): 125;
- ``/usr/bin/sandbox-exec`` missing, or the profile cannot be written: 125;
- sandbox-exec's own failure (profile rejected, sandbox not applied) is told apart from
  the command's status by its ``sandbox-exec:`` message and reported as 125.
"""
from __future__ import annotations

import os

from ..layout import RUN_DIR_PREFIX
from .errors import Refusal, one_line
from .trees import remove_path

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_PREFIX = b"sandbox-exec: "


def _private_dir(prefix: str) -> str:
    """A fresh 0700 folder, by its real path: Seatbelt matches real paths, and on macOS
    the temporary folders live behind the /var -> /private/var link."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        name = os.path.join(base, prefix + os.urandom(8).hex())
        try:
            os.mkdir(name, 0o700)
        except FileExistsError:
            continue
        except OSError as e:
            raise Refusal(f"cannot make a private folder in {one_line(base, 200)} ({e.strerror})",
                          "check that TMPDIR is writable") from None
        return os.path.realpath(name)
    raise Refusal("cannot make a private folder (names keep colliding)", "check TMPDIR")


def param_args(params, cache_dir, run_tmp: str, proxy_port: int = 0) -> list[str]:
    """``-D NAME=VALUE`` for every parameter the profile references."""
    out = []
    for p in params:
        name = p["name"]
        if p.get("source") == "proxy":
            if not proxy_port:
                raise Refusal("the plan has host rules but no proxy was started for it", "report this")
            out += ["-D", f"{name}=localhost:{int(proxy_port)}"]
            continue
        if "value" in p:
            value = p["value"]
        elif p.get("source") == "cache":
            value = cache_dir or p.get("default", "")
        elif p.get("source") == "run-tmp":
            value = run_tmp
        else:
            raise Refusal(f"the plan's profile needs an unknown parameter {one_line(name, 60)!r}",
                          "recompile the plan with this sbxc")
        # An empty value would make (subpath "") match nothing on some versions and
        # everything on none we know of; refuse rather than guess.
        if not value or not value.startswith("/") or "\x00" in value:
            raise Refusal(f"parameter {name} has no usable path", "recompile the plan")
        out += ["-D", f"{name}={value}"]
    return out


def prepare(planfile: dict, cmd: list, env: dict, ctx):
    from .spec import LaunchSpec

    lowered = planfile.get("lowered") or {}
    refuse = lowered.get("refuse") or []
    if refuse:
        raise Refusal(f"the profile cannot express a rule: {one_line(refuse[0], 300)}",
                      "change that rule (sbxc compile --check --backend sandbox-exec)")
    profile = lowered.get("profile")
    if not isinstance(profile, str) or not profile.startswith("(version 1)\n(deny default)\n"):
        raise Refusal("the plan holds no sandbox-exec profile", "recompile it with --backend sandbox-exec")
    if not os.access(SANDBOX_EXEC, os.X_OK):
        raise Refusal(f"{SANDBOX_EXEC} is missing", "sandbox-exec ships with macOS; check this system")

    cleanups = []
    try:
        # The profile goes in a private folder of its own: sandbox-exec reads it before the
        # sandbox applies, so no other user may swap it in between.
        prof_dir = _private_dir("sbxc-profile-")
        cleanups.append(lambda: remove_path(prof_dir))  # never follows a link the command left
        prof_path = os.path.join(prof_dir, "profile.sb")
        fd = os.open(prof_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            data = profile.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)

        params = lowered.get("params") or []
        run_tmp = ""
        if any(p.get("source") == "run-tmp" for p in params):
            run_tmp = _private_dir(RUN_DIR_PREFIX)
            cleanups.append(lambda: remove_path(run_tmp))
            # The tmpfs path itself is denied on this backend, so temporary files go to the
            # per-run folder, unless the policy's env.set chose TMPDIR explicitly.
            if not any(k == "TMPDIR" for k, _v in (planfile.get("runtime") or {}).get("env_set", ())):
                env = dict(env)
                env["TMPDIR"] = run_tmp + "/"
        cache = getattr(ctx, "cache", None)
        cache_dir = os.path.realpath(cache.dir) if cache is not None and cache.dir else ""

        proxy = getattr(ctx, "proxy", None)
        argv = [SANDBOX_EXEC, "-f", prof_path] + param_args(params, cache_dir, run_tmp,
                                                            proxy.port if proxy is not None else 0) + ["--"] + list(cmd)
    except BaseException:
        for fn in reversed(cleanups):
            try:
                fn()
            except OSError:
                pass
        raise

    def command_status(status: int, first_stderr: bytes) -> int:
        if status == 0 or not first_stderr.startswith(_PREFIX):
            return status
        msg = first_stderr[len(_PREFIX):].split(b"\n", 1)[0].decode("utf-8", "replace")
        if "execvp()" in msg:
            return 127 if "No such file" in msg else 126
        import sys

        sys.stderr.write(Refusal(f"sandbox-exec refused the profile or could not apply it ({one_line(msg, 200)})",
                                 "report this with the plan file; sbxc did not run the command").line() + "\n")
        return 125

    spec = LaunchSpec(argv, env, child_setup=os.setsid, exec_is_command=False,
                      command_status=command_status, cleanups=cleanups)
    return spec
