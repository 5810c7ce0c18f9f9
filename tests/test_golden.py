"""Golden tests: each folder under tests/golden/ is a case.

    policy.yaml      the case's sandbox.policy.yaml (absent: no policy, builtin:default applies)
    *.yaml           other files the policy extends, copied beside it
    setup.txt        extra tree entries (see compiler_fakes.make_tree); optional
    args.txt         extra `sbxc compile` flags, one line; optional
    env.txt          NAME=VALUE lines added to the fixed environment; optional
    plan.json        expected: the IR
    check.txt        expected: `sbxc compile --check --verbose` output and exit status (every verdict)
    check-short.txt  expected: `sbxc compile --check` output (the short report) and exit status
    bwrap.argv, landlock.json, profile.sb, config.json   expected backend output, when that backend exists

Each case runs in a fresh temporary tree with a fixed fake host and environment; the
temporary root is written <root> and project-id hashes <id>, so the files are the same on
every machine. Folder listings that Landlock lowering needs come from the same fake world
(compiler_fakes.with_listings), never from this machine's disk. Seccomp programs are shown as <bpf> (their bytes depend on libseccomp's
version; tests/live checks what they do).

To accept new output on purpose:  SBXC_REGEN=1 .venv/bin/python -m pytest tests/test_golden.py
then read the diff before committing it.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from dataclasses import asdict

import pytest

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree, stable, with_listings

HERE = os.path.join(os.path.dirname(__file__), "golden")
CASES = sorted(d for d in os.listdir(HERE) if os.path.isdir(os.path.join(HERE, d))) if os.path.isdir(HERE) else []
REGEN = os.environ.get("SBXC_REGEN") == "1"
BACKEND_FILES = {"bwrap": "bwrap.argv", "landlock": "landlock.json", "sandbox-exec": "profile.sb", "oci": "config.json"}


def _read(case, name, default=""):
    p = os.path.join(HERE, case, name)
    return open(p, encoding="utf-8").read() if os.path.exists(p) else default


def _hide_bpf(obj):
    """Seccomp bytes as <bpf>; Landlock's listing fingerprints as <listing> (folders above
    the case's tree list its randomly named temporary folder; the folder names stay)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "seccomp" and isinstance(v, str) and v:
                out[k] = "<bpf>"
            elif k == "listed" and isinstance(v, list):
                out[k] = [[d, "<listing>"] for d, _digest in v]
            else:
                out[k] = _hide_bpf(v)
        return out
    if isinstance(obj, list):
        return [_hide_bpf(x) for x in obj]
    return obj


def _backend_text(name, data) -> str:
    data = _hide_bpf(data)
    if name == "bwrap" and isinstance(data.get("argv"), list):
        return "\n".join(str(a) for a in data["argv"]) + "\n"
    if name == "sandbox-exec" and isinstance(data.get("profile"), str):
        return data["profile"]
    if name == "oci" and isinstance(data.get("config"), dict):
        # The bundle's config.json as runc reads it (the runtime adds the command, its
        # environment and folder); the seccomp rules are shown, not hidden: they are text.
        return json.dumps(data["config"], indent=1, sort_keys=True) + "\n"
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def outputs(case: str, tmp_path) -> dict[str, str]:
    from sbxc.backends import _MODULES
    from sbxc.commands.build import lower
    from sbxc.commands import compile as compile_cmd
    from sbxc.compiler.api import compile_policy

    root = str(tmp_path)
    make_tree(root, _read(case, "setup.txt"))
    proj = os.path.join(root, "proj")
    for name in os.listdir(os.path.join(HERE, case)):
        if name.endswith(".yaml"):
            dest = "sandbox.policy.yaml" if name == "policy.yaml" else name
            shutil.copy(os.path.join(HERE, case, name), os.path.join(proj, dest))
    home = os.path.join(root, "home/user")
    extra_env = dict(line.split("=", 1) for line in _read(case, "env.txt").splitlines() if "=" in line)
    environ = fake_environ(home, **extra_env)
    host = fake_host(home=home)
    paths = FakePaths(root)
    args = _read(case, "args.txt").split()
    overrides = {}
    for a in args:
        if a.startswith("--network"):
            overrides["network"] = a != "--network=false"
        if a.startswith("--backend="):
            overrides["backend"] = a.split("=", 1)[1]
    result = compile_policy(None, cwd=proj, environ=environ, host=host, overrides=overrides, paths=paths)
    if result.plan is not None:
        host = with_listings(result.plan, host, root)

    files = {}
    for name, flags in (("check.txt", ["--check", "--verbose"]), ("check-short.txt", ["--check"])):
        out, err = io.StringIO(), io.StringIO()
        code = compile_cmd.run([*flags, *args], cwd=proj, environ=environ, host=host, paths=paths, stdout=out, stderr=err)
        files[name] = stable(out.getvalue() + err.getvalue() + f"exit: {code}\n", root)

    if result.plan is None:
        return files
    files["plan.json"] = stable(json.dumps(asdict(result.plan), indent=1, sort_keys=True) + "\n", root)
    for backend, fname in BACKEND_FILES.items():
        try:
            __import__(_MODULES[backend])
        except ModuleNotFoundError:
            continue
        files[fname] = stable(_backend_text(backend, lower(backend, result.plan, host).data), root)
    return files


@pytest.fixture
def case_root():
    # Not under /tmp: builtin:default makes /tmp a private tmpfs, and a project inside it
    # would make every backend's report mention the temporary folders above the case.
    root = tempfile.mkdtemp(prefix="sbxc-golden-", dir="/var/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("case", CASES)
def test_golden(case, case_root):
    got = outputs(case, case_root)
    if REGEN:
        for name, text in got.items():
            with open(os.path.join(HERE, case, name), "w", encoding="utf-8") as f:
                f.write(text)
        return
    for name, text in got.items():
        expected_path = os.path.join(HERE, case, name)
        assert os.path.exists(expected_path), f"{case}/{name} is missing; run with SBXC_REGEN=1 and review it"
        assert text == _read(case, name), f"{case}/{name} differs (SBXC_REGEN=1 to accept on purpose)"


def test_golden_cases_exist():
    assert len(CASES) >= 6


def test_compile_output_is_deterministic(case_root):
    """Two compiles of the same input give the same plan file bytes."""
    from sbxc.commands import compile as compile_cmd

    root = case_root
    make_tree(root)
    proj = os.path.join(root, "proj")
    shutil.copy(os.path.join(HERE, "basic", "policy.yaml"), os.path.join(proj, "sandbox.policy.yaml"))
    home = os.path.join(root, "home/user")
    kw = dict(cwd=proj, environ=fake_environ(home), host=fake_host(home=home), paths=FakePaths(root),
              stdout=io.StringIO(), stderr=io.StringIO())
    assert compile_cmd.run(["-o", "a.json"], **kw) == 0
    assert compile_cmd.run(["-o", "b.json"], **kw) == 0
    a = open(os.path.join(proj, "a.json"), "rb").read()
    assert a == open(os.path.join(proj, "b.json"), "rb").read()
    assert json.loads(a)["format"] == "sbxc-plan/1"
