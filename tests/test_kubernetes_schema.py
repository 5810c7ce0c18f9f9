"""Every Kubernetes object ``sbxc export kubernetes`` writes validates against the API
schema of the three newest Kubernetes minor versions that the installed
``kubernetes-validate`` carries.

The versions are read from the package when the test runs, so a newer release of the
package moves the window forward by itself; fewer than three is a failure, not a skip.
The strict schemas are used: they refuse a field the API does not define (a misspelt
``readOnlyRootFileSystem`` would otherwise be dropped by the API server without a word,
and the container would run with a writable root). ``kubernetes-validate`` falls back to
an older schema for a version it does not have; the version it reports having used is
checked, so each object is checked against exactly the version named.

The outputs cover every shape the export has: Pod and Job, YAML stream and JSON ``List``,
stdout and ``-o DIR``, the network on, off and with port rules or host rules (the
NetworkPolicy), masked files (the empty ConfigMap), as a user and as root (with and
without ``runAsNonRoot``), every golden policy and every builtin profile. The controls
show that the same check refuses a broken manifest.
"""
from __future__ import annotations

import copy
import functools
import io
import json
import os
import shutil
import tempfile

import pytest
import yaml
from kubernetes_validate import utils as kv  # a test dependency (pyproject [test]): never skipped
from packaging.version import Version

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
GOLDEN_CASES = sorted(d for d in os.listdir(GOLDEN) if os.path.isdir(os.path.join(GOLDEN, d)))
PROFILES_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "src", "sbxc", "policies")
BUILTINS = sorted(n[:-5] for n in os.listdir(PROFILES_DIR) if n.endswith(".yaml"))
# What the export can emit; the coverage test fails when some shape is never produced, so
# a new kind of object cannot slip past the validation unseen.
KINDS = {"Pod", "Job", "ConfigMap", "NetworkPolicy"}


def newest_versions(n: int = 3) -> list[str]:
    minors = sorted({kv.major_minor(v) for v in kv.all_versions()}, key=Version)
    assert len(minors) >= n, f"kubernetes-validate knows {minors}: fewer than {n} Kubernetes minor versions"
    return minors[-n:]


VERSIONS = newest_versions()
# kubernetes-validate reads and parses the schema files (a few MB of JSON per version) on
# every call; the files do not change during a run and the validator does not modify them,
# so each is read once. This keeps the module to seconds instead of half a minute.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


def validate(doc: dict) -> None:
    for version in VERSIONS:
        used = kv.validate(doc, version, strict=True)
        assert used == version, f"validated {doc['kind']} against {used}, not {version}"


def _sources():
    """(id, policy text or None, extra files, env) for every policy the export is run on."""
    for case in GOLDEN_CASES:
        d = os.path.join(GOLDEN, case)
        files = {("sandbox.policy.yaml" if n == "policy.yaml" else n): open(os.path.join(d, n)).read()
                 for n in os.listdir(d) if n.endswith(".yaml")}
        setup = open(os.path.join(d, "setup.txt")).read() if os.path.exists(os.path.join(d, "setup.txt")) else ""
        env_txt = os.path.join(d, "env.txt")
        env = dict(line.split("=", 1) for line in open(env_txt).read().splitlines() if "=" in line) \
            if os.path.exists(env_txt) else {}
        yield f"golden-{case}", files, setup, env
    for name in BUILTINS:
        yield f"builtin-{name}", {"sandbox.policy.yaml": f"sbxc: 1\nextends: [builtin:{name}]\n"}, "", {}
    # The builtins with their network off, and one with the host-group rules some of them name.
    for name in BUILTINS:
        yield (f"builtin-{name}-offline",
               {"sandbox.policy.yaml": f"sbxc: 1\nextends: [builtin:{name}]\nnetwork: false\n"}, "", {})


SOURCES = list(_sources())


def _export(root: str, files: dict, setup: str, env: dict, *args, uid: int = 1000):
    from sbxc.commands import export

    make_tree(root, setup)
    proj = os.path.join(root, "proj")
    for name, text in files.items():
        with open(os.path.join(proj, name), "w") as f:
            f.write(text)
    home = os.path.join(root, "home/user")
    out, err = io.StringIO(), io.StringIO()
    code = export.run(["kubernetes", *args], cwd=proj, environ=fake_environ(home, **env),
                      host=fake_host(home=home, uid=uid, gid=uid), paths=FakePaths(root), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue(), proj


def parse(text: str, fmt: str) -> list:
    if fmt == "json":
        listing = json.loads(text)
        # kubectl unpacks a v1 List on the client; the API has no List object to check it against.
        assert set(listing) == {"apiVersion", "kind", "items"}
        assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
        return listing["items"]
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.fixture
def root():
    r = tempfile.mkdtemp(prefix="sbxc-k8s-", dir="/var/tmp")
    yield r
    shutil.rmtree(r, ignore_errors=True)


@pytest.mark.parametrize("kind", ["pod", "job"])
@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("source", SOURCES, ids=[s[0] for s in SOURCES])
def test_export_validates(source, fmt, kind, root):
    _id, files, setup, env = source
    code, out, err, _ = _export(root, files, setup, env, "--kind", kind, "--format", fmt,
                                "--image", "registry.invalid/build:1", "--", "make", "test")
    assert code == 0, err
    docs = parse(out, fmt)
    assert docs[-1]["kind"] == {"pod": "Pod", "job": "Job"}[kind]
    for doc in docs:
        assert doc["kind"] in KINDS, doc["kind"]
        validate(doc)


@pytest.mark.parametrize("network", ["--network=false", "--network=true"])
@pytest.mark.parametrize("uid", [0, 1000])
def test_export_as_root_and_user_with_network_flag_validates(uid, network, root):
    """As root the Pod has no runAsNonRoot/runAsUser; the --network flag adds or drops the
    NetworkPolicy over a policy that says otherwise."""
    files = {"sandbox.policy.yaml": open(os.path.join(GOLDEN, "netrules", "policy.yaml")).read()}
    code, out, err, _ = _export(root, files, "", {}, network, uid=uid)
    assert code == 0, err
    docs = parse(out, "yaml")
    sc = docs[-1]["spec"]["securityContext"]
    assert ("runAsNonRoot" in sc) == (uid != 0)
    assert any(d["kind"] == "NetworkPolicy" for d in docs) == (network == "--network=false")
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_written_workload_validates(fmt, root):
    """What ``-o DIR`` writes (the file a user hands to ``kubectl apply``), and the seccomp
    profile the Pod names is there, in the form the kubelet hands to the runtime."""
    files = {"sandbox.policy.yaml": open(os.path.join(GOLDEN, "basic", "policy.yaml")).read()}
    code, _out, err, proj = _export(root, files, "", {}, "-o", "k8s", "--format", fmt, "--kind", "job")
    assert code == 0, err
    docs = parse(open(os.path.join(proj, "k8s", f"workload.{fmt}")).read(), fmt)
    for doc in docs:
        validate(doc)
    pod_spec = docs[-1]["spec"]["template"]["spec"]
    profile = json.load(open(os.path.join(proj, "k8s", pod_spec["securityContext"]["seccompProfile"]["localhostProfile"])))
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW" and profile["syscalls"]
    for entry in profile["syscalls"]:
        assert set(entry) <= {"names", "action", "errnoRet", "args"} and entry["names"]


def test_every_kind_is_covered(root):
    """The sources above produce every kind the export emits, so none goes out unchecked
    (a new kind of object fails here until it is in KINDS and so validated)."""
    seen = set()
    for _id, files, setup, env in SOURCES:
        for kind in ("pod", "job"):
            sub = tempfile.mkdtemp(dir=root)
            code, out, err, _ = _export(sub, files, setup, env, "--kind", kind)
            assert code == 0, err
            seen |= {d["kind"] for d in parse(out, "yaml")}
    assert seen == KINDS, f"the exports made {sorted(seen)}, expected {sorted(KINDS)}"


# Controls: the same validation refuses what the API server would refuse or silently
# change. Each starts from a real export and breaks one thing.

def _real_docs(root):
    files = {"sandbox.policy.yaml": open(os.path.join(GOLDEN, "basic", "policy.yaml")).read()}
    code, out, err, _ = _export(root, files, "", {}, "--kind", "job")
    assert code == 0, err
    docs = parse(out, "yaml")
    for doc in docs:
        validate(doc)  # the unbroken one passes
    return docs


def _job_container(docs):
    return docs[-1]["spec"]["template"]["spec"]["containers"][0]


BREAKS = {
    # A misspelt field: the API server drops it, so the root would stay writable.
    "misspelt-field": lambda docs: _job_container(docs)["securityContext"].update(readOnlyRootFileSystem=True),
    # A number where the API wants an integer.
    "uid-as-text": lambda docs: docs[-1]["spec"]["template"]["spec"]["securityContext"].update(runAsUser="1000"),
    # A volume without its required name.
    "volume-without-name": lambda docs: docs[-1]["spec"]["template"]["spec"]["volumes"][0].pop("name"),
    # capabilities.drop must be a list.
    "drop-not-a-list": lambda docs: _job_container(docs)["securityContext"]["capabilities"].update(drop="ALL"),
    # policyTypes must be a list.
    "netpol-types-not-a-list": lambda docs: next(d for d in docs if d["kind"] == "NetworkPolicy")["spec"].update(
        policyTypes="Egress"),
    # A Job's template without containers.
    "job-without-containers": lambda docs: docs[-1]["spec"]["template"]["spec"].pop("containers"),
}


@pytest.mark.parametrize("brk", sorted(BREAKS))
def test_control_broken_manifest_is_refused(brk, root):
    docs = copy.deepcopy(_real_docs(root))
    BREAKS[brk](docs)
    failed = 0
    for doc in docs:
        for version in VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError:
                failed += 1
    assert failed == len(VERSIONS), f"{brk}: refused {failed} times, expected once per version ({VERSIONS})"


def test_control_unknown_api_is_refused():
    """An object of a kind or API version the schema does not have is an error, not a pass."""
    with pytest.raises(kv.SchemaNotFoundError):
        kv.validate({"apiVersion": "batch/v9", "kind": "Job", "metadata": {"name": "x"}}, VERSIONS[-1], strict=True)
