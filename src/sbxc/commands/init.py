"""``sbxc init [--network] [--stdout]``: a commented starter policy for the project in the
current folder.

It recognises Python, Node, Rust, Go and git projects (several at once) by their files and
writes ``sandbox.policy.yaml`` on top of ``builtin:default``: the network off, each
toolchain's caches in the per-project cache, and git's hooks and config read-only. It never
overwrites: the file appears whole or not at all, and only where no file of that name was.

Exit 0 written (or printed), 1 a policy is already there or it could not be written, 2 usage.
"""
from __future__ import annotations

import errno
import glob
import os
import sys
from dataclasses import dataclass

from . import _args, _help

POLICY_NAME = "sandbox.policy.yaml"
MAX_GIT_DIRS = 64
"""Submodule git folders listed one by one; past this the whole of .git/modules is protected."""


@dataclass(frozen=True)
class Toolchain:
    name: str
    markers: tuple[str, ...]
    """Files (globs) in the project folder that say the project uses it."""
    tools: tuple[str, ...]
    """Its entries in ``cache.tools``."""
    notes: tuple[str, ...]
    """Comment lines about its configuration, written under ``filesystem:``."""


TOOLCHAINS = (
    Toolchain("Python", ("pyproject.toml", "setup.py", "requirements*.txt"), ("pip",), (
        "Python: pip and uv read their configuration from your home (~/.config/pip, ~/.config/uv)",
        "and /etc, read-only here; ~/.pypirc is hidden (it holds upload tokens). PIP_INDEX_URL and",
        "the like are not passed from your shell, since an index URL can carry a password; list",
        "them in env.pass to use a mirror. A .venv in the project is writable as usual.",
    )),
    Toolchain("Node", ("package.json",), ("npm",), (
        "Node: ~/.npmrc is hidden (it holds registry tokens), so npm does not see the settings in",
        "it; put registry settings the project needs in the project's own .npmrc. node_modules",
        "is written in the project as usual.",
    )),
    Toolchain("Rust", ("Cargo.toml",), ("cargo",), (
        "Rust: CARGO_HOME is the project cache (above), so ~/.cargo/config.toml and",
        "~/.cargo/credentials.toml are not read inside; put registry settings in the project's",
        ".cargo/config.toml. Toolchains in ~/.rustup are read-only; target/ is in the project.",
    )),
    Toolchain("Go", ("go.mod",), ("go",), (
        "Go: the module and build caches are in the project cache (above); settings made with",
        "`go env -w` (~/.config/go/env) are read-only here. GOPROXY and the like are not passed",
        "from your shell (a proxy URL can carry a password); list them in env.pass if needed.",
        "`go install` cannot write ~/go/bin: the home folder is read-only.",
    )),
)




# ---------------------------------------------------------------- what the folder holds

def toolchains_in(folder: str) -> list[tuple[Toolchain, str]]:
    """(toolchain, the marker file found) for each toolchain the folder's files name."""
    out = []
    for tc in TOOLCHAINS:
        for pattern in tc.markers:
            found = sorted(glob.glob(glob.escape(folder) + "/" + pattern))
            found = [f for f in found if os.path.isfile(f)]
            if found:
                out.append((tc, os.path.basename(found[0])))
                break
    return out


@dataclass(frozen=True)
class GitLayout:
    kind: str
    """``dir`` (.git is the repository), ``file`` (a linked worktree or submodule), ``""`` none."""
    rules: tuple[str, ...] = ()
    """Project-relative paths to keep read-only (hooks and config of each git folder inside)."""
    missing_hooks: bool = False
    """``.git`` has no hooks folder yet (init makes an empty one, as ``git init`` does)."""
    elsewhere: str = ""
    """For ``file``: where its git folder is, when that is outside the project."""


def _git_dirs_under(top: str) -> list[str]:
    """Git folders (a HEAD and a config) under .git/modules: submodules' repositories."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        if "HEAD" in filenames and "config" in filenames:
            out.append(dirpath)
        if dirpath.count(os.sep) - top.count(os.sep) >= 8 or len(out) > MAX_GIT_DIRS:
            dirnames[:] = []
    return out


def git_layout(folder: str) -> GitLayout:
    dotgit = os.path.join(folder, ".git")
    if os.path.isdir(dotgit) and not os.path.islink(dotgit):
        rules = [".git/hooks"]
        if os.path.isfile(os.path.join(dotgit, "config")):
            rules.append(".git/config")
        modules = os.path.join(dotgit, "modules")
        if os.path.isdir(modules):
            subs = _git_dirs_under(modules)
            if len(subs) > MAX_GIT_DIRS:
                rules.append(".git/modules")
            for sub in subs[:MAX_GIT_DIRS]:
                rel = os.path.relpath(sub, folder)
                rules += [f"{rel}/{n}" for n in ("hooks", "config") if os.path.exists(os.path.join(sub, n))]
        return GitLayout("dir", tuple(rules), not os.path.isdir(os.path.join(dotgit, "hooks")))
    if os.path.isfile(dotgit):
        try:
            with open(dotgit, encoding="utf-8", errors="replace") as f:
                first = f.readline(4096).strip()
        except OSError:
            first = ""
        target = first[len("gitdir:"):].strip() if first.startswith("gitdir:") else ""
        if target:
            real = os.path.realpath(os.path.join(folder, target))
            inside = os.path.relpath(real, os.path.realpath(folder))
            if not inside.startswith(".."):
                rules = [f"{inside}/{n}" for n in ("hooks", "config") if os.path.exists(os.path.join(real, n))]
                return GitLayout("file", (".git",) + tuple(rules))
            return GitLayout("file", (".git",), elsewhere=real)
        return GitLayout("file", (".git",))
    return GitLayout("")


def _rule_path(rel: str) -> str:
    """``{project}/REL`` in the rule language, or "" when REL cannot be written in it (a
    brace has no escape); quoted when it holds blanks or quotes, ``$`` doubled."""
    if any(c in rel for c in "{}%\n\r\t\\") or rel.startswith("~"):
        return ""
    rel = rel.replace("$", "$$")
    path = "{project}/" + rel
    if any(c in rel for c in ' "'):
        return '"' + path.replace('"', '\\"') + '"'
    return path


# ---------------------------------------------------------------- the policy text

def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def starter_policy(found: list[tuple[Toolchain, str]], git: GitLayout, network: bool) -> str:
    kinds = [tc.name for tc, _ in found] + (["git"] if git.kind else [])
    what = f"a {_join(kinds)} project" if kinds else "this project (no Python, Node, Rust, Go or git files found)"
    seen = ", ".join(f"{tc.name} ({marker})" for tc, marker in found)
    seen += (", " if seen and git.kind else "") + ("git (.git)" if git.kind else "")
    out = [
        f"# sandbox.policy.yaml for {what}, written by `sbxc init`.",
        *([f"# Recognised: {seen}."] if seen else []),
        "# `sbxc compile --check` lists what each backend enforces; `sbxc exec -- CMD` runs CMD under",
        "# this policy; `sbxc print-config` shows every setting and where it came from.",
        "sbxc: 1",
        "",
        "# builtin:default is the base: the system read-only, this project writable, a private /tmp,",
        "# your home read-only with credentials hidden (~/.ssh, ~/.aws, ~/.netrc, ~/.npmrc, ~/.pypirc,",
        "# ...), host container and agent sockets hidden, and an environment without secrets.",
        "extends: [builtin:default]",
        "",
    ]
    if network:
        out += [
            "# The network is on (sbxc init --network). `network: false` turns it off: then a command",
            "# cannot send the project anywhere, nor fetch what it was not given.",
            "network: true",
        ]
    else:
        out += [
            "# The network is off: a command cannot send the project anywhere, nor fetch what it was",
            "# not given. Installing dependencies needs it: for one command,",
            "#   sbxc exec --network=true -- CMD",
            "# or write `network: true` here (`sbxc init --network` writes it on).",
            "network: false",
        ]
    tools = [t for tc, _ in found for t in tc.tools] + ["xdg"]
    out += [
        "",
        "cache:",
        "  # Downloads and build caches of these tools go to this project's own cache folder",
        "  # (outside your home; `sbxc cache path` shows it), so nothing is written to your home",
        "  # and no other project sees them: pip (PIP_CACHE_DIR, UV_CACHE_DIR), npm",
        "  # (npm_config_cache), cargo (CARGO_HOME), go (GOMODCACHE, GOCACHE), xdg (XDG_CACHE_HOME,",
        "  # for every other tool). `tools: []` turns the cache off.",
        f"  tools: [{', '.join(tools)}]",
    ]
    notes = [line for tc, _ in found for line in ("", *tc.notes)]
    if notes:
        out += [("# " + line) if line else "" for line in notes]
    rules = [r for r in (_rule_path(p) for p in git.rules) if r]
    if not rules:
        out += ["", "# Rules of your own go under `filesystem:` (docs/policy.md), e.g.", "# filesystem:",
                "#   - read? /opt/tools", "#   - mask {project}/secrets.env"]
        return "\n".join(out) + "\n"
    out += ["", "filesystem:"]
    if git.kind == "dir":
        out += [
            "  # git: hooks and config decide what git runs (core.hooksPath, core.fsmonitor, filters,",
            "  # aliases) when you run git yourself, outside the sandbox, so a command must not",
            "  # change them; the rest of .git stays writable for commits."
            + (" Submodules' git folders likewise." if len(rules) > 2 else ""),
        ]
        if any(r.endswith(".git/modules") for r in rules):
            out.append("  # (so many submodules that .git/modules is kept read-only whole)")
    else:
        out += [
            "  # git: .git here is a file naming the repository's git folder (a linked worktree or a",
            "  # submodule); it is kept read-only, so a command cannot point git elsewhere.",
        ]
        if git.elsewhere:
            out += [f"  # The git folder itself ({git.elsewhere}) lies outside the project:",
                    "  # read-only under `read /`."]
    out += [f"  - read {r}" for r in rules]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- writing without overwriting

def write_new(folder: str, name: str, text: str) -> None:
    """Write ``folder/name`` whole or not at all, never replacing anything there: the text
    goes to a fresh temporary name (O_EXCL) first and is then hard-linked into place, and
    link(2) fails with EEXIST if the name exists, even as a dangling symlink, even when it
    appeared a moment ago. Raises FileExistsError or OSError."""
    import secrets

    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    _write_exclusive(tmp, text, drop_on_error=True)
    try:
        final = os.path.join(folder, name)
        try:
            os.link(tmp, final, follow_symlinks=False)
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise
            # No hard links on this filesystem: create the name itself exclusively (a crash
            # mid-write could leave a short file, never a replaced one).
            _write_exclusive(final, text)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass  # the file is written; only its durability across a power cut is in doubt


def _write_exclusive(path: str, text: str, drop_on_error: bool = False) -> None:
    """``text`` into a new file at ``path`` (O_EXCL, no link followed), flushed to disk.
    ``drop_on_error``: a failed write removes the file it made (a temporary name)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    except BaseException:
        if drop_on_error:
            os.close(fd)
            fd = -1
            os.unlink(path)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


# ---------------------------------------------------------------- the command

def main(argv) -> int:
    return run(argv, cwd=os.getcwd(), stdout=sys.stdout, stderr=sys.stderr)


def run(argv, *, cwd: str, stdout, stderr) -> int:
    args, code = _help.run_parse(_args.INIT, argv, stdout, stderr)
    if args is None:
        return code
    target = os.path.join(cwd, POLICY_NAME)
    if os.path.lexists(target):
        stderr.write(f"sbxc init: {POLICY_NAME} already exists here; sbxc init never overwrites a policy "
                     "(edit it, or move it away and run sbxc init again)\n")
        return 1
    found = toolchains_in(cwd)
    git = git_layout(cwd)
    text = starter_policy(found, git, args.network)
    if args.stdout:
        stdout.write(text)
        if git.missing_hooks:
            stderr.write("sbxc init: note: .git has no hooks folder; the policy's rule needs one: mkdir .git/hooks\n")
        return 0
    if git.missing_hooks:
        try:
            # What `git init` makes: an empty hooks folder, so the rule that keeps it
            # read-only has a folder to hold and a command cannot create one with hooks in it.
            os.mkdir(os.path.join(cwd, ".git", "hooks"), 0o755)
        except FileExistsError:
            pass
        except OSError as e:
            stderr.write(f"sbxc init: cannot create .git/hooks: {e.strerror}; create it, then run sbxc init again\n")
            return 1
    try:
        write_new(cwd, POLICY_NAME, text)
    except FileExistsError:
        stderr.write(f"sbxc init: {POLICY_NAME} already exists here; sbxc init never overwrites a policy\n")
        return 1
    except OSError as e:
        stderr.write(f"sbxc init: cannot write {POLICY_NAME}: {e.strerror or e}; check the folder's permissions\n")
        return 1
    kinds = [tc.name for tc, _ in found] + (["git"] if git.kind else [])
    stdout.write(f"sbxc init: wrote {POLICY_NAME}" + (f" for a {_join(kinds)} project" if kinds else "")
                 + (", network on" if args.network else ", network off")
                 + (" (and an empty .git/hooks, which the policy keeps read-only)" if git.missing_hooks else "")
                 + "; check it with: sbxc compile --check\n")
    return 0
