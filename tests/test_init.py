"""``sbxc init`` through the real command line: the starter policy for each kind of project
(and several at once) passes ``sbxc compile --check`` on this host with no error and no
warning, and an existing file is never replaced."""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

MARKERS = {
    "python": ["pyproject.toml"],
    "python-setup": ["setup.py"],
    "python-req": ["requirements-dev.txt"],
    "node": ["package.json"],
    "rust": ["Cargo.toml"],
    "go": ["go.mod"],
}
KINDS = ["python", "node", "rust", "go", "git"]


def sbxc(*args, cwd):
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([sys.executable, "-m", "sbxc", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def make_project(folder, kinds) -> str:
    os.makedirs(folder, exist_ok=True)
    for k in kinds:
        if k == "git":
            subprocess.run(["git", "init", "-q", str(folder)], check=True, timeout=60)
        for name in MARKERS.get(k, []):
            with open(os.path.join(folder, name), "w") as f:
                f.write("")
    return str(folder)


def assert_clean_check(folder):
    r = sbxc("compile", "--check", "--format", "json", cwd=folder)
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["diagnostics"] == [], (r.stdout, r.stderr)
    r = sbxc("compile", "--check", cwd=folder)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("0 errors, 0 warnings"), r.stdout


COMBOS = [(k,) for k in KINDS + ["python-setup", "python-req"]] + \
    [c for c in itertools.combinations(KINDS, 2)] + [tuple(KINDS), ()]


@pytest.mark.parametrize("kinds", COMBOS, ids=lambda c: "+".join(c) or "none")
def test_the_starter_policy_compiles_clean(tmp_path, kinds):
    proj = make_project(tmp_path / "proj", kinds)
    r = sbxc("init", cwd=proj)
    assert r.returncode == 0, r.stderr
    text = open(os.path.join(proj, "sandbox.policy.yaml")).read()
    names = {"python": "Python", "python-setup": "Python", "python-req": "Python", "node": "Node",
             "rust": "Rust", "go": "Go", "git": "git"}
    for k in kinds:
        assert names[k] in text.splitlines()[0], text
    assert "network: false" in text
    tools = {"python": "pip", "python-setup": "pip", "python-req": "pip", "node": "npm", "rust": "cargo",
             "go": "go"}
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("tools:"))
    assert line.strip() == "tools: [" + ", ".join([tools[k] for k in kinds if k in tools] + ["xdg"]) + "]"
    if "git" in kinds:
        assert "  - read {project}/.git/hooks" in text and "  - read {project}/.git/config" in text
    assert_clean_check(proj)
    assert r.stdout.startswith("sbxc init: wrote sandbox.policy.yaml"), r.stdout


def test_network_on_when_asked(tmp_path):
    proj = make_project(tmp_path / "p", ["python", "git"])
    r = sbxc("init", "--network", cwd=proj)
    assert r.returncode == 0, r.stderr
    text = open(os.path.join(proj, "sandbox.policy.yaml")).read()
    assert "\nnetwork: true\n" in text and "\nnetwork: false\n" not in text
    assert_clean_check(proj)
    r = sbxc("print-config", cwd=proj)
    assert any(ln.split()[:2] == ["network", "true"] for ln in r.stdout.splitlines()), r.stdout


def test_stdout_prints_the_same_policy_and_writes_nothing(tmp_path):
    a = make_project(tmp_path / "a", ["node", "git"])
    b = make_project(tmp_path / "b", ["node", "git"])
    r = sbxc("init", "--stdout", cwd=a)
    assert r.returncode == 0 and not os.path.lexists(os.path.join(a, "sandbox.policy.yaml"))
    assert sbxc("init", cwd=b).returncode == 0
    assert r.stdout == open(os.path.join(b, "sandbox.policy.yaml")).read().replace(str(b), str(a))


def test_an_existing_policy_is_never_replaced(tmp_path):
    proj = make_project(tmp_path / "p", ["python"])
    path = os.path.join(proj, "sandbox.policy.yaml")
    with open(path, "w") as f:
        f.write("sbxc: 1\n# mine\n")
    r = sbxc("init", cwd=proj)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("sbxc init: sandbox.policy.yaml already exists here; sbxc init never overwrites a policy "
                        "(edit it, or move it away and run sbxc init again)\n")
    assert open(path).read() == "sbxc: 1\n# mine\n"
    assert sorted(os.listdir(proj)) == ["pyproject.toml", "sandbox.policy.yaml"]  # no temporary left


def test_a_dangling_symlink_in_its_place_is_not_followed(tmp_path):
    proj = make_project(tmp_path / "p", [])
    target = tmp_path / "elsewhere.yaml"
    os.symlink(target, os.path.join(proj, "sandbox.policy.yaml"))
    r = sbxc("init", cwd=proj)
    assert r.returncode == 1, r
    assert not target.exists() and os.path.islink(os.path.join(proj, "sandbox.policy.yaml"))


def test_write_new_never_replaces_a_name_that_appears_meanwhile(tmp_path, monkeypatch):
    """The name is taken between init's first look and its write: link(2) refuses, the
    other file stays, and the temporary is gone."""
    from sbxc.commands import init

    real_link = os.link

    def racing_link(src, dst, **kw):
        with open(dst, "w") as f:
            f.write("theirs\n")
        return real_link(src, dst, **kw)

    monkeypatch.setattr(os, "link", racing_link)
    with pytest.raises(FileExistsError):
        init.write_new(str(tmp_path), "sandbox.policy.yaml", "sbxc: 1\n")
    assert (tmp_path / "sandbox.policy.yaml").read_text() == "theirs\n"
    assert os.listdir(tmp_path) == ["sandbox.policy.yaml"]


def test_usage_errors_exit_2(tmp_path):
    for args in (["init", "extra"], ["init", "--force"], ["init", "--network=false"]):
        r = sbxc(*args, cwd=tmp_path)
        assert r.returncode == 2, (args, r)
    assert not os.listdir(tmp_path)
    r = sbxc("init", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--stdout" in r.stdout and "exit status" in r.stdout


def test_a_repository_without_hooks_gets_an_empty_hooks_folder(tmp_path):
    proj = make_project(tmp_path / "p", ["git"])
    shutil.rmtree(os.path.join(proj, ".git", "hooks"))
    r = sbxc("init", cwd=proj)
    assert r.returncode == 0 and "empty .git/hooks" in r.stdout, r
    assert os.listdir(os.path.join(proj, ".git", "hooks")) == []
    assert_clean_check(proj)


def test_submodule_git_folders_are_protected_too(tmp_path):
    proj = make_project(tmp_path / "p", ["git"])
    sub = os.path.join(proj, ".git", "modules", "lib one")
    os.makedirs(os.path.join(sub, "hooks"))
    for name in ("HEAD", "config"):
        with open(os.path.join(sub, name), "w") as f:
            f.write("")
    assert sbxc("init", cwd=proj).returncode == 0
    text = open(os.path.join(proj, "sandbox.policy.yaml")).read()
    assert '  - read "{project}/.git/modules/lib one/hooks"' in text
    assert '  - read "{project}/.git/modules/lib one/config"' in text
    assert_clean_check(proj)


def test_a_linked_worktree_keeps_its_git_file_read_only(tmp_path):
    main = make_project(tmp_path / "main", ["git"])
    subprocess.run(["git", "-C", main, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True, timeout=60)
    wt = str(tmp_path / "wt")
    subprocess.run(["git", "-C", main, "worktree", "add", "-q", wt], check=True, timeout=60)
    assert sbxc("init", cwd=wt).returncode == 0
    text = open(os.path.join(wt, "sandbox.policy.yaml")).read()
    assert "  - read {project}/.git\n" in text and "outside the project" in text
    assert_clean_check(wt)
