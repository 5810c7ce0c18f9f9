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


# --- the default root stays masked whatever cache.root says -----------------------------------

def _compile_with(tmp_path, cache_yaml, extra=None, env=None):
    from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree
    from sbxc.compiler.api import compile_policy

    root = str(tmp_path)
    make_tree(root)
    proj = os.path.join(root, "proj")
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nfilesystem:\n  - read /\n  - write {project}\n" + cache_yaml)
    home = os.path.join(root, "home/user")
    return compile_policy(None, cwd=proj, environ=fake_environ(home, **(env or {})), host=fake_host(home=home),
                          overrides={}, paths=FakePaths(root, extra))


@pytest.mark.parametrize("cache_yaml", ["cache:\n  root: /opt/cache-{uid}\n", "cache:\n  tools: []\n", ""])
def test_default_root_is_masked_with_any_cache_setting(tmp_path, cache_yaml):
    from sbxc.compiler.decide import decide

    r = _compile_with(tmp_path, cache_yaml)
    assert r.ok, r.diagnostics
    rules = [x for x in r.plan.fs if x.path == "/var/tmp/sbxc-1000"]
    assert len(rules) == 1 and rules[0].access == "mask" and rules[0].origin == "cache"
    assert decide(r.plan, "/var/tmp/sbxc-1000/plans/p-x").access == "mask"
    assert decide(r.plan, "/var/tmp/sbxc-1000/other-0123456789abcdef/pip").access == "mask"
    if "root:" in cache_yaml:
        assert "plan cache" in rules[0].written  # the report says why it is there
        assert decide(r.plan, "/opt/cache-1000").access == "mask"
        assert decide(r.plan, r.plan.cache.dir).access == "write"


def test_sbxc_root_keeps_the_fixed_default_root_masked(tmp_path):
    """$SBXC_ROOT moves the default root for a run; /var/tmp/sbxc-{uid} still holds the
    plans and caches of every run without it, and stays hidden (it was not: a command
    under SBXC_ROOT read the other root's plans folder, journal and caches)."""
    from sbxc.compiler.decide import decide

    other = os.path.join(str(tmp_path), "other-root")
    r = _compile_with(tmp_path, "", env={"SBXC_ROOT": other})
    assert r.ok, r.diagnostics
    for root in (other, "/var/tmp/sbxc-1000"):
        assert decide(r.plan, root + "/plans/j-log").access == "mask", root
    # Control: the cache folder under the moved root is still the project's, writable.
    assert r.plan.cache.dir.startswith(other + "/") and decide(r.plan, r.plan.cache.dir).access == "write"
    # Missing here, the fixed root is a plain mask of a missing path: the runtime makes only
    # the root it uses, and a backend must not be asked to make a mount point for it (bwrap
    # and runc then failed every run under SBXC_ROOT on a host without the fixed root).
    (rule,) = [x for x in r.plan.fs if x.path == "/var/tmp/sbxc-1000"]
    assert (rule.kind, rule.origin) == ("missing", "filesystem"), rule
    # There, it is an ordinary mask too, which the plan's checks watch: removed later (a
    # cache cleared, /var/tmp aged out), the plan is stale and compiled again, where a
    # mask the runtime was trusted to make (origin "cache") had bwrap and runc make a
    # mount point for it on the host, or fail every run under a read-only parent.
    r = _compile_with(tmp_path, "", env={"SBXC_ROOT": other}, extra={"/var/tmp/sbxc-1000": ("dir", 1000, 0o700)})
    (rule,) = [x for x in r.plan.fs if x.path == "/var/tmp/sbxc-1000"]
    assert (rule.kind, rule.origin, rule.access) == ("dir", "filesystem", "mask"), rule
    from sbxc.planfile import runtime_section

    checks = [c for c in runtime_section(r.plan)["checks"] if c[0] == "/var/tmp/sbxc-1000"]
    assert [c[:3] for c in checks] == [["/var/tmp/sbxc-1000", "dir", "mask"]], checks


def test_default_root_that_is_a_symlink_is_skipped_not_mounted(tmp_path):
    # Another user's link: nothing of the caller's is kept behind it, and a bwrap mount on
    # it would land wherever it points.
    r = _compile_with(tmp_path, "cache:\n  root: /opt/cache-{uid}\n",
                      {"/var/tmp/sbxc-1000": ("symlink:/etc", 4242, 0o777)})
    assert r.ok, r.diagnostics
    assert not [x for x in r.plan.fs if x.path == "/var/tmp/sbxc-1000"]
    assert [s for s in r.plan.skipped if s.path == "/var/tmp/sbxc-1000" and "symlink" in s.reason]
