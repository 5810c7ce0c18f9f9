"""Host groups read from a toolchain's own configuration (compiler/hostgroups.py), with
configuration files and variables that the test makes; no host is contacted."""
from __future__ import annotations

import os

from sbxc.compiler.hostgroups import Reader


def reader(tmp_path, env):
    env = dict(env)
    return Reader(env.get, str(tmp_path / "home"), str(tmp_path / "proj"))


def test_pip_config_file_and_variables(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example.invalid:8443/simple\n"
                    "extra-index-url = file:///opt/local https://extra.example.invalid/simple\n")
    r = reader(tmp_path, {"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "none")})
    hosts = {(h, p) for h, p, _src in r.read("pip")}
    assert hosts == {("mirror.example.invalid", 8443), ("extra.example.invalid", 443)}
    assert r.inputs[str(conf)] and r.inputs["$PIP_INDEX_URL"] == ""
    # The variable wins over the file, as in pip.
    r = reader(tmp_path, {"PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "http://env.example.invalid/simple"})
    hosts = {(h, p) for h, p, _src in r.read("pip")}
    assert ("env.example.invalid", 80) in hosts and ("mirror.example.invalid", 8443) not in hosts


def test_npm_project_and_user_config(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / ".npmrc").write_text("registry=https://npm.example.invalid/\n"
                                              "@corp:registry=https://corp.example.invalid/npm/\n")
    user = tmp_path / "npmrc"
    user.write_text("registry=https://user.example.invalid/\n")
    r = reader(tmp_path, {"NPM_CONFIG_USERCONFIG": str(user)})
    hosts = {h for h, _p, _src in r.read("npm")}
    # The project's file is read after the user's and wins; scoped registries are added.
    assert {"npm.example.invalid", "corp.example.invalid"} <= hosts and "user.example.invalid" not in hosts
    assert str(tmp_path / "proj" / ".npmrc") in r.inputs


def test_go_variables(tmp_path):
    r = reader(tmp_path, {"GOPROXY": "https://goproxy.example.invalid,direct",
                          "GOSUMDB": "sum.example.invalid+abc https://sumdb.example.invalid"})
    hosts = {h for h, _p, _src in r.read("go")}
    assert hosts == {"goproxy.example.invalid", "sumdb.example.invalid"}


def test_cargo_config(tmp_path):
    cfg = tmp_path / "proj" / ".cargo"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text('[registries.corp]\nindex = "sparse+https://crates.example.invalid/index/"\n'
                                     '[source.mirror]\nregistry = "https://mirror.example.invalid/git/index"\n')
    r = reader(tmp_path, {"CARGO_HOME": str(tmp_path / "cargo-home")})
    hosts = {h for h, _p, _src in r.read("cargo")}
    # `sparse+https://` is cargo's spelling of an HTTPS index.
    assert {"mirror.example.invalid", "crates.example.invalid"} <= hosts


def test_source_names_no_registry_host():
    """The compiler and the profiles name no public registry host: groups come from the
    toolchains' own configuration."""
    import re

    import sbxc

    base = os.path.dirname(sbxc.__file__)
    host = re.compile(r"\b[a-z0-9-]+\.(org|io|com|dev|net)\b")
    for sub in ("compiler/hostgroups.py", "policies/python.yaml", "policies/node.yaml", "policies/rust.yaml",
                "policies/go.yaml", "policies/git.yaml"):
        text = open(os.path.join(base, sub), encoding="utf-8").read()
        assert not [m.group(0) for m in host.finditer(text) if not m.group(0).startswith("example.")], sub


def _rustup(tmp_path, toolchains):
    """A rustup layout: CARGO_HOME/bin/cargo is rustup's proxy (a link to ``rustup``), each
    toolchain's cargo names its own default index, as cargo's binary does."""
    home = tmp_path / "cargo-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "rustup").write_bytes(b"\x7fELF rustup proxy, no index here")
    os.symlink("rustup", home / "bin" / "cargo")
    rustup = tmp_path / "rustup-home"
    for name, host in toolchains.items():
        b = rustup / "toolchains" / name / "bin"
        b.mkdir(parents=True)
        (b / "cargo").write_bytes(b"\x7fELF ... sparse+https://" + host.encode() + b"/ ...")
    return {"CARGO_HOME": str(home), "RUSTUP_HOME": str(rustup)}, rustup


def test_cargo_default_registry_under_rustup(tmp_path):
    """rustup's proxy holds no index: the default comes from the cargo of the toolchain the
    proxy would run: $RUSTUP_TOOLCHAIN, else the project's rust-toolchain.toml, else a
    directory override, else rustup's default toolchain (a short name matched to the
    installed folder with its host triple)."""
    env, rustup = _rustup(tmp_path, {"stable-x86_64-unknown-linux-gnu": "stable.example.invalid",
                                     "nightly-x86_64-unknown-linux-gnu": "nightly.example.invalid",
                                     "1.80.0-x86_64-unknown-linux-gnu": "pinned.example.invalid"})
    (rustup / "settings.toml").write_text('default_toolchain = "stable-x86_64-unknown-linux-gnu"\n')

    def hosts(extra=None):
        r = reader(tmp_path, {**env, **(extra or {})})
        return {h for h, _p, _src in r.read("cargo")}, r

    got, r = hosts()
    assert got == {"stable.example.invalid"}, got
    # The toolchain's cargo and rustup's settings are inputs of the plan: a change recompiles.
    assert str(rustup / "settings.toml") in r.inputs
    assert any(k.endswith("stable-x86_64-unknown-linux-gnu/bin/cargo") for k in r.inputs), r.inputs
    assert hosts({"RUSTUP_TOOLCHAIN": "nightly"})[0] == {"nightly.example.invalid"}
    (tmp_path / "proj").mkdir()
    (rustup / "settings.toml").write_text('default_toolchain = "stable-x86_64-unknown-linux-gnu"\n'
                                          f'[overrides]\n"{tmp_path / "proj"}" = "nightly-x86_64-unknown-linux-gnu"\n')
    assert hosts()[0] == {"nightly.example.invalid"}
    (tmp_path / "proj" / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.80.0"\n')
    assert hosts()[0] == {"pinned.example.invalid"}
    # The variable beats the file, as in rustup.
    assert hosts({"RUSTUP_TOOLCHAIN": "stable"})[0] == {"stable.example.invalid"}
    # A toolchain that is not installed gives no host (a warning that the group is empty).
    assert hosts({"RUSTUP_TOOLCHAIN": "beta"})[0] == set()


def _shared_parent_config(tmp_path, mode=0o644, owner=None):
    """A project in a shared (sticky, world-writable) folder, and a cargo configuration in
    that folder that someone else could have written."""
    shared = tmp_path / "shared"
    (shared / "proj").mkdir(parents=True)
    os.chmod(shared, 0o1777)
    cfg = shared / ".cargo"
    cfg.mkdir()
    f = cfg / "config.toml"
    f.write_text('[registries.x]\nindex = "https://planted.example.invalid/index"\n')
    os.chmod(f, mode)
    if owner is not None:
        os.chown(cfg, owner, owner)
        os.chown(f, owner, owner)
    return Reader({"CARGO_HOME": str(tmp_path / "cargo-home")}.get, str(tmp_path / "home"), str(shared / "proj")), str(f)


def test_a_config_others_could_write_names_no_host(tmp_path):
    r, path = _shared_parent_config(tmp_path, mode=0o666)
    hosts = {h for h, _p, _src in r.read("cargo")}
    assert "planted.example.invalid" not in hosts
    assert r.untrusted == [(path, "the file is writable by others (mode 0666)")]
    # The control: the same file, the caller's and not writable by others, is read.
    os.chmod(path, 0o644)
    r2 = Reader(r.getenv, r.home, r.project)
    assert "planted.example.invalid" in {h for h, _p, _src in r2.read("cargo")} and not r2.untrusted


def test_another_users_config_names_no_host(tmp_path):
    if os.geteuid() != 0:
        # Only root can make a file another user owns: here, one the caller's group may write.
        r, path = _shared_parent_config(tmp_path, mode=0o664)
        assert "planted.example.invalid" not in {h for h, _p, _src in r.read("cargo")}
        assert r.untrusted == [(path, "the file is writable by its group (mode 0664)")]
        return
    r, path = _shared_parent_config(tmp_path, owner=65534)
    assert "planted.example.invalid" not in {h for h, _p, _src in r.read("cargo")}
    assert len(r.untrusted) == 1 and r.untrusted[0][0] == path and "owned by" in r.untrusted[0][1]


def test_compile_fails_on_an_untrusted_group_input(tmp_path):
    from compiler_fakes import fake_environ, fake_host
    from sbxc.compiler.api import compile_policy

    r, path = _shared_parent_config(tmp_path, mode=0o666)
    (tmp_path / "shared" / "proj" / "sandbox.policy.yaml").write_text(
        "sbxc: 1\ncache: {tools: []}\nfilesystem: [read /]\nhost_groups: {crates: [from cargo]}\n"
        "network: [allow @crates]\n")
    home = str(tmp_path / "home")
    os.makedirs(home, exist_ok=True)
    res = compile_policy(None, cwd=str(tmp_path / "shared" / "proj"),
                         environ=fake_environ(home, CARGO_HOME=str(tmp_path / "cargo-home")),
                         host=fake_host(home=home), overrides={})
    assert res.plan is None
    d = [d for d in res.diagnostics if d.code == "SBX053"]
    assert len(d) == 1 and path in d[0].message and d[0].span.line == 5, res.diagnostics
