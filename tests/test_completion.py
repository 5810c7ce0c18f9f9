"""Shell completion (``sbxc completion bash|zsh``) asked by a real shell, and the
pre-commit hook run the way pre-commit runs it."""
from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")


def script(shell: str) -> str:
    r = subprocess.run([sys.executable, "-m", "sbxc", "completion", shell], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=SRC), timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory):
    p = tmp_path_factory.mktemp("comp") / "sbxc.bash"
    p.write_text(script("bash"))
    return str(p)


def ask_bash(path: str, words: list, cwd=None) -> list:
    """COMPREPLY after ``_sbxc`` for the command line ``words`` (the last is the word
    being completed), as bash's programmable completion would call it."""
    line = " ".join(shlex.quote(w) for w in words)
    prog = (f"source {shlex.quote(path)}\nCOMP_WORDS=({line})\nCOMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
            f"COMP_LINE={shlex.quote(' '.join(words))}\nCOMP_POINT=${{#COMP_LINE}}\n_sbxc\n"
            "printf '%s\\n' \"${COMPREPLY[@]}\"\ncomplete -p sbxc >&2\n")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], capture_output=True, text=True, cwd=cwd,
                       timeout=30)
    assert r.returncode == 0 and "complete -F _sbxc sbxc" in r.stderr, r.stderr
    return [x for x in r.stdout.splitlines() if x]


@pytest.mark.parametrize("words,want", [
    (["sbxc", ""], ["compile", "exec", "print-config", "explain", "init", "doctor", "cache", "session", "schema",
                    "export",
                    "completion", "help", "--help", "--version"]),
    (["sbxc", "co"], ["compile", "completion"]),
    (["sbxc", "compile", "--b"], ["--backend="]),
    (["sbxc", "compile", "--backend", ""], ["auto", "bwrap", "landlock", "sandbox-exec", "oci"]),
    (["sbxc", "exec", "--backend", "=", "l"], ["landlock"]),
    (["sbxc", "exec", "--network", "=", "f"], ["false"]),
    (["sbxc", "print-config", "--format", ""], ["text", "json"]),
    (["sbxc", "compile", "--format", ""], ["text", "json", "sarif"]),
    (["sbxc", "cache", ""], ["path", "clear"]),
    (["sbxc", "cache", "clear", "--"], ["--project=", "--all", "--id=", "--root=", "--help"]),
    (["sbxc", "session", ""], ["start", "list", "diff", "apply", "stop", "drop"]),
    (["sbxc", "session", "st"], ["start", "stop"]),
    (["sbxc", "session", "start", "--"], ["--policy=", "--from=", "--stage=", "--format=", "--help"]),
    (["sbxc", "session", "start", "--stage", "a:b", "--format", ""], ["text", "json"]),
    (["sbxc", "session", "stop", "--"], ["--snapshot=", "--help"]),
    (["sbxc", "completion", ""], ["bash", "zsh"]),
    (["sbxc", "help", "ex"], ["exec", "explain", "export"]),
])
def test_bash_completes_from_the_table(bash_script, words, want):
    assert ask_bash(bash_script, words) == want


def test_bash_offers_every_flag_of_every_command(bash_script):
    from sbxc.commands import _args

    for cmd in _args.COMMANDS:
        got = ask_bash(bash_script, ["sbxc", cmd.name, "--"])
        assert sorted(g.rstrip("=") for g in got) == sorted(f.name for f in cmd.flags), cmd.name


def test_bash_completes_files_and_the_command_after_exec_options(bash_script, tmp_path):
    (tmp_path / "sandbox.policy.yaml").write_text("sbxc: 1\n")
    assert ask_bash(bash_script, ["sbxc", "exec", "--policy", "sand"], cwd=tmp_path) == ["sandbox.policy.yaml"]
    assert ask_bash(bash_script, ["sbxc", "compile", "--check", "sand"], cwd=tmp_path) == ["sandbox.policy.yaml"]
    # a flag's value is not the command: after `--policy FILE` the next word is completed as a command
    got = ask_bash(bash_script, ["sbxc", "exec", "--policy", "p.yaml", "--", "ech"], cwd=tmp_path)
    assert "echo" in got
    got = ask_bash(bash_script, ["sbxc", "exec", "--", "echo", "sand"], cwd=tmp_path)
    assert got == ["sandbox.policy.yaml"]


def _pty_read(fd, seconds, until=None) -> bytes:
    out = b""
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            out += data
            if until is not None and until in out:
                break
    return out


def test_zsh_completes_from_the_table(tmp_path):
    """An interactive zsh on a pseudo-terminal: the script is sourced after compinit and
    a Tab on a partly typed line is answered by _sbxc."""
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.skip("zsh is not installed (scripts/setup installs it)")
    path = tmp_path / "sbxc.zsh"
    path.write_text(script("zsh"))
    assert subprocess.run([zsh, "-n", str(path)]).returncode == 0
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execve(zsh, [zsh, "-f", "-i"], {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "dumb",
                                           "HOME": str(tmp_path)})
    try:
        os.write(fd, f"PS1='READY%% '; autoload -U compinit; compinit -u -D; source {path}; "
                     "sbxc() { :; }; print -r -- ${_comps[sbxc]}-registered\n".encode())
        out = _pty_read(fd, 10, b"_sbxc-registered")
        assert b"_sbxc-registered" in out, out
        _pty_read(fd, 1)
        got = {}
        for line, expect in ((b"sbxc compile --back", b"--backend="), (b"sbxc cache cl", b"clear"),
                             (b"sbxc expl", b"explain"), (b"sbxc completion ", b"zsh"),
                             (b"sbxc session dr", b"drop")):
            os.write(fd, line + b"\t")
            got[line] = _pty_read(fd, 5, expect)
            os.write(fd, b"\x15")  # kill the whole line (emacs keymap), keeping the prompt
            _pty_read(fd, 1)
        for (line, expect) in ((b"sbxc compile --back", b"--backend="), (b"sbxc cache cl", b"clear "),
                               (b"sbxc expl", b"explain "), (b"sbxc completion ", b"bash"),
                               (b"sbxc session dr", b"drop ")):
            assert expect in got[line], (line, got[line])
        os.write(fd, b"\x15sbxc exec --network=\t")
        out = _pty_read(fd, 5, b"yes")
        assert all(w in out for w in (b"true", b"false", b"off")), out
    finally:
        _end_shell(pid, fd)


def _end_shell(pid: int, fd: int) -> None:
    """Ask the shell to leave; an interactive zsh ignores SIGTERM, so the one it does not
    ignore ends it if it is still there after that."""
    import signal

    try:
        os.write(fd, b"\x03")
        _pty_read(fd, 0.5)
        os.write(fd, b"exit\n")
    except OSError:
        pass
    end = time.time() + 5
    while time.time() < end:
        _pty_read(fd, 0.1)
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            break
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(fd)


# ------------------------------------------------------------------ the pre-commit hook

def _hook():
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as f:
        hooks = yaml.safe_load(f)
    return next(h for h in hooks if h["id"] == "sbxc-check")


@pytest.mark.parametrize("name,match", [
    ("sandbox.policy.yaml", True), ("sub/dir/sandbox.policy.yaml", True), ("ci.policy.yaml", True),
    ("policy.yaml", False), ("sandbox.policy.yml", False), ("sandbox.policy.yaml.bak", False),
    ("x.policy.yaml/other.txt", False),
])
def test_hook_selects_policy_files(name, match):
    # pre-commit matches `files` with Python's re.search on the path from the repository root.
    assert bool(re.search(_hook()["files"], name)) is match


def test_hook_checks_each_file_and_fails_on_errors(tmp_path):
    """The hook's entry run as pre-commit runs it: shlex-split, the file names appended,
    `sbxc` found on PATH."""
    hook = _hook()
    assert hook["pass_filenames"] is True and hook["language"] == "python"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    launcher = bindir / "sbxc"
    launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m sbxc \"$@\"\n")
    launcher.chmod(0o755)
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sandbox.policy.yaml").write_text("sbxc: 1\nextends: [builtin:default]\n")
    (repo / "sub" / "ci.policy.yaml").write_text("sbxc: 1\nfilesystem:\n  - wirte /tmp\n")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", PYTHONPATH=SRC)
    argv = shlex.split(hook["entry"]) + list(hook.get("args", []))
    ok = subprocess.run(argv + ["sandbox.policy.yaml"], cwd=repo, env=env, capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "== sandbox.policy.yaml" in ok.stdout and "0 errors" in ok.stdout
    both = subprocess.run(argv + ["sub/ci.policy.yaml", "sandbox.policy.yaml"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert both.returncode == 1, both.stdout + both.stderr
    # each file checked on its own, the good one after the bad one too
    assert "sub/ci.policy.yaml:3:5: error: unknown verb \"wirte\"" in both.stdout
    assert both.stdout.count("== ") == 2 and both.stdout.rstrip().endswith("0 errors, 0 warnings")
