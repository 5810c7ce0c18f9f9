"""``sbxc export kubernetes`` and the OCI bundle: golden files, and the structure a cluster
checks.

Golden: for the cases in ``EXPORT_CASES`` (folders under tests/golden/), the workload and
its report are ``kubernetes.yml`` and ``kubernetes.txt``, and the seccomp profile is the
``linux.seccomp`` of that case's ``config.json`` (one lowering for both). Regenerate on
purpose with ``SBXC_REGEN=1`` and read the diff, as for test_golden.py.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile

import pytest
import yaml

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree, stable

HERE = os.path.join(os.path.dirname(__file__), "golden")
EXPORT_CASES = ("basic", "home_hidden_cache", "netrules")
REGEN = os.environ.get("SBXC_REGEN") == "1"


@pytest.fixture
def case_root():
    root = tempfile.mkdtemp(prefix="sbxc-export-", dir="/var/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _export(case: str, root: str, *args):
    from sbxc.commands import export

    make_tree(root, open(os.path.join(HERE, case, "setup.txt")).read()
              if os.path.exists(os.path.join(HERE, case, "setup.txt")) else "")
    proj = os.path.join(root, "proj")
    for name in os.listdir(os.path.join(HERE, case)):
        if name.endswith(".yaml"):
            dest = "sandbox.policy.yaml" if name == "policy.yaml" else name
            shutil.copy(os.path.join(HERE, case, name), os.path.join(proj, dest))
    home = os.path.join(root, "home/user")
    env_txt = os.path.join(HERE, case, "env.txt")
    extra = dict(line.split("=", 1) for line in open(env_txt).read().splitlines() if "=" in line) \
        if os.path.exists(env_txt) else {}
    out, err = io.StringIO(), io.StringIO()
    code = export.run(["kubernetes", *args], cwd=proj, environ=fake_environ(home, **extra), host=fake_host(home=home),
                      paths=FakePaths(root), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue(), proj


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_export_golden(case, case_root):
    code, out, err, _ = _export(case, case_root, "--kind", "job", "--image", "registry.invalid/build:1", "--",
                                "make", "test")
    assert code == 0, err
    got = {"kubernetes.yml": stable(out, case_root), "kubernetes.txt": stable(err + f"exit: {code}\n", case_root)}
    for name, text in got.items():
        path = os.path.join(HERE, case, name)
        if REGEN:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            continue
        assert os.path.exists(path), f"{case}/{name} is missing; run with SBXC_REGEN=1 and review it"
        assert text == open(path, encoding="utf-8").read(), f"{case}/{name} differs (SBXC_REGEN=1 to accept on purpose)"


def test_profile_beside_the_workload_is_the_oci_profile(case_root):
    code, _out, err, proj = _export("basic", case_root, "-o", "k8s", "--format", "json")
    assert code == 0, err
    listing = json.load(open(os.path.join(proj, "k8s", "workload.json")))
    assert listing["kind"] == "List"
    pod = listing["items"][-1]
    where = pod["spec"]["securityContext"]["seccompProfile"]
    assert where["type"] == "Localhost"
    profile = json.load(open(os.path.join(proj, "k8s", where["localhostProfile"])))
    config = json.load(open(os.path.join(HERE, "basic", "config.json")))
    assert profile == config["linux"]["seccomp"]
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW" and profile["architectures"] == ["SCMP_ARCH_X86_64"]
    denied = {n for e in profile["syscalls"] if "args" not in e for n in e["names"]}
    assert {"ptrace", "bpf", "keyctl", "mount", "userfaultfd"} <= denied


def _walk_docs(text: str) -> list:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_workload_shape(case_root):
    """What the API server and the kubelet require of these objects, and what the policy asks
    of them: every volume mount names a volume, names are DNS labels, the container's
    securityContext is the locked-down one, the NetworkPolicy selects the Pod and denies all."""
    import re

    code, out, err, _ = _export("basic", case_root)
    assert code == 0, err
    docs = _walk_docs(out)
    kinds = [d["kind"] for d in docs]
    # What the Pod needs comes before it: `kubectl apply -f` creates in the file's order, and a
    # Pod created before its NetworkPolicy starts without it.
    assert kinds[-1] == "Pod" and kinds.index("NetworkPolicy") < kinds.index("Pod")
    pod = docs[-1]
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    c = spec["containers"][0]
    assert c["securityContext"] == {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                    "privileged": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    names = [v["name"] for v in spec["volumes"]]
    assert len(names) == len(set(names))
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    assert all(dns.match(n) for n in names + [pod["metadata"]["name"]])
    for m in c["volumeMounts"]:
        assert m["name"] in names and m["mountPath"].startswith("/")
    paths = [m["mountPath"] for m in c["volumeMounts"]]
    assert len(paths) == len(set(paths)), "two volumes on one path: the API server refuses the Pod"
    for v in spec["volumes"]:
        assert len([k for k in v if k != "name"]) == 1, v
    netpol = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert netpol["spec"]["podSelector"]["matchLabels"] == {k: v for k, v in pod["metadata"]["labels"].items()
                                                            if k == "sbxc.dev/workload"}
    assert netpol["spec"]["egress"] == [] and set(netpol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    masked = {m["mountPath"]: m for m in c["volumeMounts"] if m["readOnly"]}
    assert any(p.endswith("/.ssh") for p in masked)


def test_port_rules_become_egress_ports(case_root):
    code, out, err, _ = _export("netrules", case_root)
    assert code == 0, err
    netpol = next(d for d in _walk_docs(out) if d["kind"] == "NetworkPolicy")
    ports = [p for rule in netpol["spec"]["egress"] for p in rule["ports"]]
    assert ports and all(p["protocol"] == "TCP" for p in ports)


def test_host_rules_deny_all_egress_and_say_so(case_root):
    """A NetworkPolicy cannot name hosts: a host rule must leave no egress open, and the
    report must say the rule is narrowed rather than pass it over in silence."""
    code, out, err, _ = _export("hostrules", case_root)
    assert code == 0, err
    netpol = next(d for d in _walk_docs(out) if d["kind"] == "NetworkPolicy")
    assert [r for r in netpol["spec"]["egress"] if "to" in r or not r.get("ports")] == []
    assert "allow example.org: narrowed: a NetworkPolicy cannot allow a host name" in err
    # An address rule is no host name: it is left out because the export makes no allow of it.
    assert ("allow 127.0.0.2:5432: narrowed: the export starts no proxy and turns no address rule into a "
            "NetworkPolicy allow") in err, err


def test_export_of_a_broken_policy_is_1(case_root):
    make_tree(case_root, "")
    proj = os.path.join(case_root, "proj")
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nfilesystem:\n  - wirte /x\n")
    from sbxc.commands import export

    home = os.path.join(case_root, "home/user")
    err = io.StringIO()
    code = export.run(["kubernetes"], cwd=proj, environ=fake_environ(home), host=fake_host(home=home),
                      paths=FakePaths(case_root), stdout=io.StringIO(), stderr=err)
    assert code == 1 and "SBX" in err.getvalue()


def test_yaml_stays_off_the_exec_path():
    """The exported YAML needs PyYAML; the exec path (runtime and the OCI runner) imports none."""
    import subprocess
    import sys

    code = ("import sys; import sbxc.runtime.launch, sbxc.runtime.oci_run; "
            "bad = [m for m in ('yaml', 'json', 're', 'lark', 'pyseccomp') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_mask_of_a_missing_path_without_read_root_exports(case_root):
    """A policy with no ``read /`` and a mask of a missing path whose parents no rule names:
    the export reports the mask and exits 0, rather than failing with a traceback."""
    code, out, err, _ = _export("sbpl_narrow", case_root)
    assert code == 0, err
    assert "Traceback" not in err
    assert _walk_docs(out)[-1]["kind"] == "Pod"
    assert "mask /var/tmp/sbxc-1000: partial: the path is missing on this host" in err


def test_no_read_root_says_the_image_stays_readable(case_root):
    """Without ``read /`` the bundle's root is empty; a Pod's root is its image, readable
    where no rule names it. That is wider than the policy, so the report must say so."""
    code, _out, err, _ = _export("sbpl_narrow", case_root)
    assert code == 0, err
    assert "paths no rule names: partial: a Pod always has its image as the root" in err
    code, _out, err, _ = _export("basic", case_root)
    assert code == 0 and "paths no rule names" not in err
