"""Compile side of the per-project cache: names, ids, variables (sbxc.cache)."""
import os
import subprocess
import sys

import pytest

from sbxc import cache


def test_project_id_is_stable_and_readable():
    a = cache.project_id("/home/u/src/my-proj")
    assert a == cache.project_id("/home/u/src/my-proj")
    assert a == cache.project_id("/home/u/src/my-proj/")  # same folder, same id
    name, digest = a.rsplit("-", 1)
    assert name == "my-proj"
    assert len(digest) == 16 and all(c in "0123456789abcdef" for c in digest)


@pytest.mark.parametrize("a,b", [
    ("/a/b", "/a_b"),
    ("/a/b", "/c/b"),          # same folder name, different place
    ("/x/a b", "/y/a_b"),      # names that sanitise alike
    ("/p", "/p/q"),            # parent and child
])
def test_project_ids_do_not_collide(a, b):
    assert cache.project_id(a) != cache.project_id(b)


@pytest.mark.parametrize("path", ["/", "/tmp/.hidden", "/tmp/a\nb", "/tmp/" + "x" * 300, "/tmp/é€", "/tmp/.."])
def test_project_id_is_one_safe_name(path):
    pid = cache.project_id(path)
    assert "/" not in pid and not pid.startswith(".")
    assert set(pid) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert 17 <= len(pid) <= 40 + 17


def test_project_id_needs_an_absolute_path():
    with pytest.raises(ValueError):
        cache.project_id("relative/path")


def test_default_root_is_per_user_outside_home():
    assert cache.default_root(1000) == "/var/tmp/sbxc-1000"
    assert cache.default_root(0) != cache.default_root(1000)
    assert cache.root_problem(cache.default_root(1000), "/home/u") == ""


@pytest.mark.parametrize("root,home,bad", [
    ("/home/u/.cache/sbxc", "/home/u", True),
    ("/home/u", "/home/u", True),
    ("/home/uu/cache", "/home/u", False),  # a sibling that shares a prefix is outside
    ("rel/cache", "/home/u", True),
    ("/", "/home/u", True),
    ("/var/tmp/c", "", False),
])
def test_root_problem(root, home, bad):
    assert bool(cache.root_problem(root, home)) is bad


def test_every_variable_the_contract_names_is_wired():
    names = {v for vs in cache.TOOLS.values() for v in vs}
    assert names == {"PIP_CACHE_DIR", "UV_CACHE_DIR", "npm_config_cache", "GOMODCACHE", "GOCACHE",
                     "CARGO_HOME", "GRADLE_USER_HOME", "PLAYWRIGHT_BROWSERS_PATH", "XDG_CACHE_HOME"}
    assert set(cache.SUBDIRS) == names
    assert cache.DEFAULT_TOOLS == ("pip", "npm", "go", "cargo", "gradle", "playwright", "xdg")


def test_cache_env_sorted_each_in_its_own_subfolder():
    d = "/var/tmp/sbxc-1/p-0123456789abcdef"
    env = cache.cache_env(cache.DEFAULT_TOOLS, d)
    assert list(env) == sorted(env)
    values = [v for _k, v in env]
    assert len(set(values)) == len(values)
    for v in values:
        assert v.startswith(d + "/")
    # no variable's folder lies inside another's (two tools never share files)
    for a in values:
        for b in values:
            assert a == b or not b.startswith(a + "/")


def test_cache_env_selects_tools():
    env = dict(cache.cache_env(["go"], "/c"))
    assert env == {"GOCACHE": "/c/go/build", "GOMODCACHE": "/c/go/mod"}
    assert cache.cache_env([], "/c") == ()
    with pytest.raises(KeyError):
        cache.cache_env(["pipp"], "/c")


def test_project_dir_does_not_resolve_the_root(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "root"
    link.symlink_to(target)
    d = cache.project_dir(str(link), "/work/p")
    assert d.startswith(str(link) + "/")  # the runtime must see, and refuse, the link


def test_cache_rules_mask_the_root_and_write_the_project():
    assert cache.cache_rules("/var/tmp/sbxc-1/", "/var/tmp/sbxc-1/p-x") == (
        ("/var/tmp/sbxc-1", "mask"), ("/var/tmp/sbxc-1/p-x", "write"))


def test_runtime_module_imports_nothing_heavy():
    code = ("import sys; import sbxc.runtime.cachedir; "
            "print(' '.join(m for m in ('re','json','dataclasses','yaml','lark','shutil','sbxc.cache') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0]={sys.path!r}; {code}"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_marker_suffix_agrees():
    from sbxc.runtime import cachedir

    assert cachedir.MARKER_SUFFIX == cache.MARKER_SUFFIX
    assert os.sep == "/"


from hypothesis import given, settings, strategies as st

_component = st.text(alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
                     min_size=1, max_size=30).filter(lambda c: c not in (".", ".."))
_paths = st.lists(_component, min_size=1, max_size=5).map(lambda cs: "/" + "/".join(cs))


@settings(max_examples=300, deadline=None)
@given(_paths, _paths)
def test_project_id_property(a, b):
    ia, ib = cache.project_id(a), cache.project_id(b)
    for pid in (ia, ib):
        assert set(pid) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        assert not pid.startswith(".") and len(pid) <= 57
        from sbxc.runtime.cachedir import is_project_id

        assert is_project_id(pid)
    assert (ia == ib) == (a == b)
