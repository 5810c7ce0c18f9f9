"""``from TOOL`` in ``host_groups``: the registries a toolchain is configured to use on this
host, read at compile time from that toolchain's own configuration files, variables and
built-in defaults (the default taken from the installed tool itself, never written here).

Each reader returns hosts as ``(host, port, source)`` and records what it read (files with
their digests, variables with their values) in ``inputs``: the plan is compiled again when
one changes. Only ``http(s)`` URLs name hosts; ``file:`` and other local indexes need no
network and give none. Programs are never run: a toolchain's default is read from the
files it is installed as, found through the system program folders only.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Callable, Optional
from urllib.parse import urlsplit

# Folders where a toolchain installed for everyone lives; the caller's PATH is not used
# (a folder on it may be one that a sandboxed command could write).
SYSTEM_BIN = ("/usr/local/bin", "/usr/bin", "/bin", "/opt/homebrew/bin")


class Reader:
    """Reads toolchain configuration for one compile. ``getenv`` records what it reads."""

    def __init__(self, getenv: Callable[[str], Optional[str]], home: str, project: str):
        self.getenv = getenv
        self.home = home
        self.project = project
        self.inputs: dict[str, str] = {}
        self.untrusted: list[tuple[str, str]] = []
        """(path, why) of each file left unread: someone else could have written it."""

    # ------------------------------------------------------------------ helpers

    def _file(self, path: str) -> Optional[bytes]:
        """The file's bytes (None when missing), recorded as an input either way. A file
        someone other than the caller or root could have written is not read (its hosts
        would widen the caller's allow list): it is noted in ``untrusted``, and the compile
        fails on it, as on such a policy file."""
        from .frontend import read_trusted

        data, why = read_trusted(path, 1 << 20)
        if why:
            if (path, why) not in self.untrusted:
                self.untrusted.append((path, why))
            self.inputs[path] = "untrusted"
            return None
        if data is None:
            self.inputs[path] = ""
            return None
        self.inputs[path] = hashlib.sha256(data).hexdigest()
        return data

    def _env(self, name: str) -> str:
        v = self.getenv(name)
        self.inputs["$" + name] = v or ""
        return v or ""

    def read(self, tool: str) -> list[tuple[str, int, str]]:
        return getattr(self, "_" + tool)()

    # ------------------------------------------------------------------ pip

    def _pip_files(self) -> list[str]:
        explicit = self._env("PIP_CONFIG_FILE")
        if explicit == os.devnull:
            return []
        xdg_dirs = (self._env("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
        xdg_home = self._env("XDG_CONFIG_HOME") or os.path.join(self.home, ".config")
        files = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs if d.startswith("/")]
        files += ["/etc/pip.conf", os.path.join(self.home, ".pip", "pip.conf"), os.path.join(xdg_home, "pip", "pip.conf")]
        venv = self._env("VIRTUAL_ENV")
        if venv.startswith("/"):
            files.append(os.path.join(venv, "pip.conf"))
        if explicit.startswith("/"):
            files.append(explicit)
        return files

    def _pip(self) -> list[tuple[str, int, str]]:
        import configparser

        index, extra = "", []
        index_src, extra_src = "", []
        for path in self._pip_files():
            data = self._file(path)
            if data is None:
                continue
            cp = configparser.RawConfigParser()
            try:
                cp.read_string(data.decode("utf-8", "replace"))
            except configparser.Error:
                continue
            for section in ("global", "install", "download"):
                if not cp.has_section(section):
                    continue
                for key in ("index-url", "index_url"):
                    if cp.has_option(section, key):
                        index, index_src = cp.get(section, key).strip(), path
                for key in ("extra-index-url", "extra_index_url"):
                    if cp.has_option(section, key):
                        extra += [(u, path) for u in cp.get(section, key).split()]
        env_index = self._env("PIP_INDEX_URL")
        if env_index:
            index, index_src = env_index.strip(), "$PIP_INDEX_URL"
        extra += [(u, "$PIP_EXTRA_INDEX_URL") for u in self._env("PIP_EXTRA_INDEX_URL").split()]
        out = []
        if index:
            out += _url_hosts(index, f"pip index-url ({index_src})")
        else:
            out += self._pip_default()
        for url, src in extra:
            out += _url_hosts(url, f"pip extra-index-url ({src})")
        del index_src, extra_src
        return out

    def _pip_default(self) -> list[tuple[str, int, str]]:
        """pip's own default index (and the host it serves files from), from pip's code."""
        try:
            from pip._internal.models import index as pip_index
        except Exception:
            return []
        self._file(pip_index.__file__)
        pypi = pip_index.PyPI
        out = _url_hosts(pypi.simple_url, "pip's default index")
        files_host = getattr(pypi, "file_storage_domain", "")
        if files_host:
            out.append((files_host, 443, "pip's default index (its file host)"))
        return out

    # ------------------------------------------------------------------ npm

    def _npm_root(self) -> str:
        for d in SYSTEM_BIN:
            path = os.path.join(d, "npm")
            if os.path.exists(path):
                real = os.path.realpath(path)  # .../node_modules/npm/bin/npm-cli.js
                root = os.path.dirname(os.path.dirname(real))
                if os.path.basename(root) == "npm":
                    return root
        return ""

    def _npm(self) -> list[tuple[str, int, str]]:
        root = self._npm_root()
        prefix = self._env("NPM_CONFIG_PREFIX") or self._env("npm_config_prefix")
        if not prefix and root:
            prefix = os.path.dirname(os.path.dirname(os.path.dirname(root)))  # {prefix}/lib/node_modules/npm
        files = []
        if root:
            files.append(os.path.join(root, "npmrc"))
        if prefix:
            files.append(self._env("NPM_CONFIG_GLOBALCONFIG") or os.path.join(prefix, "etc", "npmrc"))
        files.append(self._env("NPM_CONFIG_USERCONFIG") or os.path.join(self.home, ".npmrc"))
        if self.project:
            files.append(os.path.join(self.project, ".npmrc"))
        registry, src, scoped = "", "", []
        for path in files:
            data = self._file(path)
            if data is None:
                continue
            for line in data.decode("utf-8", "replace").splitlines():
                key, sep, value = line.partition("=")
                key, value = key.strip(), value.strip().strip("\"'")
                if not sep or key.startswith(("#", ";")):
                    continue
                if key == "registry":
                    registry, src = value, path
                elif key.startswith("@") and key.endswith(":registry"):
                    scoped.append((value, path))
        env_reg = self._env("npm_config_registry") or self._env("NPM_CONFIG_REGISTRY")
        if env_reg:
            registry, src = env_reg, "$npm_config_registry"
        out = []
        if registry:
            out += _url_hosts(registry, f"npm registry ({src})")
        elif root:
            out += self._npm_default(root)
        for url, path in scoped:
            out += _url_hosts(url, f"npm scoped registry ({path})")
        return out

    def _npm_default(self, root: str) -> list[tuple[str, int, str]]:
        path = os.path.join(root, "node_modules", "@npmcli", "config", "lib", "definitions", "definitions.js")
        data = self._file(path)
        if data is None:
            return []
        m = re.search(rb"registry: new Definition\('registry', \{\s*default: '([^']+)'", data)
        return _url_hosts(m.group(1).decode("ascii", "replace"), "npm's default registry") if m else []

    # ------------------------------------------------------------------ cargo

    def _cargo(self) -> list[tuple[str, int, str]]:
        import tomllib

        cargo_home = self._env("CARGO_HOME") or os.path.join(self.home, ".cargo")
        files = []
        d = self.project
        while d and d != "/":
            files += [os.path.join(d, ".cargo", "config.toml"), os.path.join(d, ".cargo", "config")]
            d = os.path.dirname(d)
        files += [os.path.join(cargo_home, "config.toml"), os.path.join(cargo_home, "config")]
        out = []
        for path in files:
            data = self._file(path)
            if data is None:
                continue
            try:
                doc = tomllib.loads(data.decode("utf-8", "replace"))
            except tomllib.TOMLDecodeError:
                continue
            for name, reg in (doc.get("registries") or {}).items():
                if isinstance(reg, dict) and isinstance(reg.get("index"), str):
                    out += _url_hosts(reg["index"], f"cargo registry {name} ({path})")
            for name, src in (doc.get("source") or {}).items():
                if isinstance(src, dict) and isinstance(src.get("registry"), str):
                    out += _url_hosts(src["registry"], f"cargo source {name} ({path})")
        out += self._cargo_default(cargo_home)
        return out

    def _cargo_default(self, cargo_home: str) -> list[tuple[str, int, str]]:
        """The default registry's sparse index as cargo's own binary names it, and the host
        crates are downloaded from, as the index's cached config.json names it."""
        out = []
        for path in (os.path.join(cargo_home, "bin", "cargo"),) + tuple(os.path.join(d, "cargo") for d in SYSTEM_BIN):
            if os.path.isfile(path):
                real = os.path.realpath(path)
                if os.path.basename(real) in ("rustup", "rustup-init"):
                    # rustup's proxy: cargo itself is the active toolchain's. None
                    # installed: this cargo cannot run, and no other one is the user's.
                    real = self._rustup_cargo()
                    if not real:
                        break
                try:
                    st = os.stat(real)
                    with open(real, "rb") as f:
                        blob = f.read(256 << 20)
                except OSError:
                    continue
                self.inputs[real] = f"size={st.st_size},mtime={st.st_mtime_ns}"
                m = re.search(rb"sparse\+(https://[a-z0-9.-]+/)", blob)
                if m:
                    out += _url_hosts(m.group(1).decode(), "cargo's default registry")
                break
        index_dir = os.path.join(cargo_home, "registry", "index")
        try:
            names = sorted(os.listdir(index_dir))
        except OSError:
            names = []
        import json

        for name in names:
            data = self._file(os.path.join(index_dir, name, "config.json"))
            if data:
                try:
                    dl = json.loads(data).get("dl")
                except ValueError:
                    continue
                if isinstance(dl, str):
                    out += _url_hosts(dl, f"cargo index {name} download host")
        return out

    def _rustup_cargo(self) -> str:
        """The cargo binary that rustup's proxy would run for the project, without running
        anything: the toolchain named by $RUSTUP_TOOLCHAIN, else by the nearest
        ``rust-toolchain.toml`` / ``rust-toolchain`` from the project up, else by a
        directory override in rustup's settings.toml (the deepest one containing the
        project), else its ``default_toolchain``. A short name (``stable``) is matched to
        the installed ``stable-<host triple>`` folder. '' when none is installed."""
        import tomllib

        rustup_home = self._env("RUSTUP_HOME") or os.path.join(self.home, ".rustup")
        name = self._env("RUSTUP_TOOLCHAIN")
        d = self.project
        while not name and d:
            for fname in ("rust-toolchain.toml", "rust-toolchain"):
                data = self._file(os.path.join(d, fname))
                if data is None:
                    continue
                text = data.decode("utf-8", "replace")
                try:
                    channel = (tomllib.loads(text).get("toolchain") or {}).get("channel")
                except tomllib.TOMLDecodeError:
                    channel = text.strip() if fname == "rust-toolchain" and "\n" not in text.strip() else None
                if isinstance(channel, str) and channel:
                    name = channel
                    break
            if name or d == "/":
                break
            d = os.path.dirname(d)
        if not name:
            data = self._file(os.path.join(rustup_home, "settings.toml"))
            try:
                settings = tomllib.loads(data.decode("utf-8", "replace")) if data else {}
            except tomllib.TOMLDecodeError:
                settings = {}
            overrides = settings.get("overrides") or {}
            best = ""
            for folder, chain in overrides.items() if isinstance(overrides, dict) else ():
                inside = self.project == folder or self.project.startswith(folder.rstrip("/") + "/")
                if inside and isinstance(chain, str) and len(folder) > len(best):
                    best, name = folder, chain
            if not name and isinstance(settings.get("default_toolchain"), str):
                name = settings["default_toolchain"]
        if not name or "/" in name or name in (".", ".."):
            return ""
        toolchains = os.path.join(rustup_home, "toolchains")
        try:
            installed = sorted(os.listdir(toolchains))
        except OSError:
            return ""
        for chain in [name] + [t for t in installed if t.startswith(name + "-")]:
            path = os.path.join(toolchains, chain, "bin", "cargo")
            if chain in installed and os.path.isfile(path):
                return os.path.realpath(path)
        return ""

    # ------------------------------------------------------------------ go

    def _go(self) -> list[tuple[str, int, str]]:
        values = {}
        goroot = ""
        for d in SYSTEM_BIN + ("/usr/local/go/bin",):
            if os.path.exists(os.path.join(d, "go")):
                goroot = os.path.dirname(os.path.dirname(os.path.realpath(os.path.join(d, "go"))))
                break
        layers = [os.path.join(goroot, "go.env")] if goroot else []
        layers.append(self._env("GOENV") or os.path.join(self.home, ".config", "go", "env"))
        for path in layers:
            data = self._file(path)
            for line in (data or b"").decode("utf-8", "replace").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() in ("GOPROXY", "GOSUMDB"):
                    values[key.strip()] = (value.strip(), path)
        for name in ("GOPROXY", "GOSUMDB"):
            v = self._env(name)
            if v:
                values[name] = (v, "$" + name)
        out = []
        proxy, src = values.get("GOPROXY", ("", ""))
        for url in re.split(r"[,|]", proxy):
            out += _url_hosts(url.strip(), f"GOPROXY ({src})")
        sumdb, src = values.get("GOSUMDB", ("", ""))
        if sumdb and sumdb != "off":
            words = sumdb.split()
            target = words[-1] if len(words) > 1 else words[0].split("+")[0]
            if "://" not in target:
                target = "https://" + target
            out += _url_hosts(target, f"GOSUMDB ({src})")
        return out


def _url_hosts(url: str, source: str) -> list[tuple[str, int, str]]:
    """``[(host, port, source)]`` for an http(s) URL; [] for a local or unusable one."""
    url = url.strip()
    for prefix in ("sparse+", "registry+"):  # cargo's spellings of an HTTP(S) index
        if url.startswith(prefix):
            url = url[len(prefix):]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return []
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return []
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return [(host, port or (443 if parts.scheme == "https" else 80), source)]
