"""How the Kubernetes export mounts rules that lie inside other rules' volumes, and masks
over the runtime's own /proc and /dev.

- A ``read`` rule inside the project (the volume claim, writable) is a second, read-only
  mount of the same claim path (``subPath``): without it ``read {project}/.git/hooks``
  stayed writable in the Pod while the report called it read-only. A ``write`` rule
  inside the claim needs no volume (an emptyDir there would hide the project's files).
- A ``read`` rule inside a writable volume that holds nothing of this host (a tmpfs) gets
  an empty read-only stand-in, so the command cannot make the path writable there.
- Volumes inside a masked folder (a read-only emptyDir) need their mount points made
  before the command's container starts, or the runtime fails to start the Pod: an init
  container makes them. Rules that only hide or show host files there need no volume.
- A mask of a kernel file in /proc cannot be carried by a Pod (the runtime owns /proc):
  the export refuses it (SBX050). A mask of a /dev entry the runtime makes is a volume.
- The port rules open their ports to every address: a host rule on such a port says so.

Each shape validates against the Kubernetes API schemas (test_kubernetes_schema's
versions), and each has its control: the same export without the rule lacks the mount.
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile

import pytest
import yaml

from compiler_fakes import FakePaths, fake_environ, fake_host, make_tree
from test_kubernetes_schema import validate


@pytest.fixture
def root():
    r = tempfile.mkdtemp(prefix="sbxc-k8s-mounts-", dir="/var/tmp")
    yield r
    shutil.rmtree(r, ignore_errors=True)


def export(root: str, policy: str, setup: str = "", *args, extra=None):
    from sbxc.commands import export as mod

    make_tree(root, setup)
    proj = os.path.join(root, "proj")
    with open(os.path.join(proj, "sandbox.policy.yaml"), "w") as f:
        f.write(policy)
    home = os.path.join(root, "home/user")
    out, err = io.StringIO(), io.StringIO()
    code = mod.run(["kubernetes", *args], cwd=proj, environ=fake_environ(home), host=fake_host(home=home),
                   paths=FakePaths(root, extra), stdout=out, stderr=err)
    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d is not None]
    for d in docs:
        validate(d)
    return code, docs, err.getvalue()


def pod(docs) -> dict:
    return docs[-1]["spec"]


def mounts(docs) -> dict:
    return {m["mountPath"]: m for m in pod(docs)["containers"][0]["volumeMounts"]}


BASE = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"


def test_read_inside_the_project_is_a_read_only_mount_of_the_claim(root):
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/.git/hooks\n  - write {project}/src\n")
    assert code == 0, err
    proj = os.path.join(root, "proj")
    m = mounts(docs)
    claim = m[proj]
    assert claim["readOnly"] is False
    hooks = m[proj + "/.git/hooks"]
    assert hooks == {"name": claim["name"], "mountPath": proj + "/.git/hooks", "readOnly": True,
                     "subPath": ".git/hooks"}, hooks
    # The folder between the claim and the read-only mount is a mount of the claim too, before
    # it: renamed, it would take the hooks' mount along (tests/live/test_export_mounts_live.py).
    assert m[proj + "/.git"] == {"name": claim["name"], "mountPath": proj + "/.git", "readOnly": False,
                                 "subPath": ".git"}
    order = [x["mountPath"] for x in pod(docs)["containers"][0]["volumeMounts"]]
    assert order.index(proj + "/.git") < order.index(proj + "/.git/hooks")
    assert proj + "/src" not in m  # writable through the claim already: no emptyDir over it
    assert "read {project}/.git/hooks: enforced: a read-only mount of the same path of the volume claim" in err
    # Control: without the rule the hooks are only the claim's, writable.
    code, docs, err = export(root, BASE)
    assert code == 0 and proj + "/.git/hooks" not in mounts(docs)


def test_read_inside_a_tmpfs_gets_a_read_only_stand_in(root):
    data = os.path.join(root, "data")
    code, docs, err = export(root, BASE + f"filesystem:\n  - tmpfs {data}\n  - read {data}/x {data}/f\n",
                             "dir data/x\nfile data/f\n")
    assert code == 0, err
    m = mounts(docs)
    assert m[data]["readOnly"] is False
    assert m[data + "/x"]["readOnly"] is True and m[data + "/f"]["readOnly"] is True
    vols = {v["name"]: v for v in pod(docs)["volumes"]}
    assert "emptyDir" in vols[m[data + "/x"]["name"]]
    assert m[data + "/f"]["subPath"] == "empty"  # the empty ConfigMap key
    assert "an empty read-only stand-in covers the path" in err


def test_volumes_inside_a_masked_folder_get_their_mount_points(root):
    home = os.path.join(root, "home/user")
    code, docs, err = export(root, BASE + "home: hidden\nfilesystem:\n  - write ~/.cache\n")
    assert code == 0, err
    spec = pod(docs)
    m = mounts(docs)
    assert m[home]["readOnly"] is True and m[home + "/.cache"]["readOnly"] is False
    (init,) = spec["initContainers"]
    assert init["command"] == ["mkdir", "-p", "--", home + "/.cache"], init
    assert init["volumeMounts"] == [{"name": m[home]["name"], "mountPath": home, "readOnly": False}]
    assert init["securityContext"] == spec["containers"][0]["securityContext"]
    # The masks inside the hidden home add no volume (nothing of it shows anyway).
    assert home + "/.ssh" not in m and home + "/.netrc" not in m
    assert "mount points: enforced: an init container" in err
    # Control: without a volume inside the masked home there is no init container.
    code, docs, err = export(root, BASE + "home: hidden\n")
    assert code == 0 and "initContainers" not in pod(docs), docs


def test_masks_over_the_runtimes_proc_and_dev(root):
    extra = {"/proc": ("dir", 0, 0o555), "/proc/cpuinfo": ("file", 0, 0o444), "/dev": ("dir", 0, 0o755),
             "/dev/shm": ("dir", 0, 0o1777), "/dev/sda": ("device", 0, 0o660)}
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /proc/cpuinfo\n", extra=extra)
    assert code == 1 and "[SBX050]" in err and "mask /proc/cpuinfo: not enforceable" in err, err
    assert docs == []  # nothing written
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /dev/shm /dev/sda\n", extra=extra)
    assert code == 0, err
    m = mounts(docs)
    assert m["/dev/shm"]["readOnly"] is True and "/dev/sda" not in m
    assert "mask /dev/sda: enforced: not there" in err


def test_a_host_rule_on_an_open_port_says_it_is_reachable(root):
    pol = "sbxc: 1\nextends: [builtin:default]\nnetwork:\n  - connect tcp 443\n  - allow example.org\n"
    code, docs, err = export(root, pol)
    assert code == 0, err
    assert ("allow example.org: narrowed: a NetworkPolicy cannot allow a host name and the export starts no proxy: "
            "it gets no rule of its own, but the port rules open TCP 443 to every address, so it is reachable there; "
            "on its other ports egress is denied with the rest") in err, err
    # Control: with no port rule the host is denied with the rest.
    code, docs, err = export(root, "sbxc: 1\nextends: [builtin:default]\nnetwork:\n  - allow example.org\n")
    assert code == 0 and "allow example.org: narrowed: a NetworkPolicy cannot allow a host name and the export " \
                         "starts no proxy: egress to it is denied with the rest" in err, err


def test_strict_turns_partial_into_errors(root):
    code, docs, err = export(root, BASE, "", "--strict")
    assert code == 1 and docs == [] and "[SBX051]" in err and "network: false: partial" in err, err
    # Control: the same export without --strict writes the workload.
    code, docs, err = export(root, BASE)
    assert code == 0 and docs and "[SBX051]" not in err, err


def test_volumes_inside_a_read_only_part_of_the_project(root):
    """``read {project}/docs`` is a read-only subPath mount; a write rule inside it is the
    same claim path mounted writable (the kubelet makes a missing subPath), and a masked
    folder inside it needs its mount point made first in the claim path (the init
    container mounts that subPath writable for it alone)."""
    proj = os.path.join(root, "proj")
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/docs\n  - write {project}/docs/gen\n"
                             "  - mask {project}/docs/s\n", "dir proj/docs/gen\ndir proj/docs/s\n")
    assert code == 0, err
    m = mounts(docs)
    claim = m[proj]["name"]
    assert m[proj + "/docs"] == {"name": claim, "mountPath": proj + "/docs", "readOnly": True, "subPath": "docs"}
    assert m[proj + "/docs/gen"] == {"name": claim, "mountPath": proj + "/docs/gen", "readOnly": False,
                                     "subPath": "docs/gen"}
    assert m[proj + "/docs/s"]["readOnly"] is True
    (init,) = pod(docs)["initContainers"]
    assert init["command"] == ["mkdir", "-p", "--", proj + "/docs/s"], init
    assert init["volumeMounts"] == [dict(m[proj + "/docs"], readOnly=False)], init
    # Control: without the masked folder inside it, no mount point is needed.
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/docs\n  - write {project}/docs/gen\n")
    assert code == 0 and "initContainers" not in pod(docs), docs


def test_dev_and_proc_entries_are_the_runtimes_own(root):
    """The Pod's /dev is the runtime's: an entry it makes is covered even where this host
    lacks it (/dev/mqueue here), a missing path below an entry needs nothing, and /dev or
    /proc as a whole cannot be masked (the runtime needs them). A device sysctl of this
    host's network cannot be carried either: a Pod's own network has devices of its own,
    an eth0 as likely as not."""
    extra = {"/proc": ("dir", 0, 0o555), "/proc/sys/net/ipv4/conf/eth0": ("dir", 0, 0o555),
             "/dev": ("dir", 0, 0o755)}
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /dev/mqueue /dev/shm/none\n", extra=extra)
    assert code == 0, err
    m = mounts(docs)
    assert m["/dev/mqueue"]["readOnly"] is True and "/dev/shm/none" not in m
    vols = {v["name"]: v for v in pod(docs)["volumes"]}
    assert "emptyDir" in vols[m["/dev/mqueue"]["name"]]
    assert "mask /dev/shm/none: enforced: not there" in err, err
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /proc/sys/net/ipv4/conf/eth0\n", extra=extra)
    assert code == 1 and "mask /proc/sys/net/ipv4/conf/eth0: not enforceable" in err, err
    for whole in ("/dev", "/proc"):
        code, docs, err = export(root, BASE + f"filesystem:\n  - mask {whole}\n", extra=extra)
        assert code == 1 and f"mask {whole}: not enforceable" in err, err
    # A /proc entry this host lacks may be in the node's kernel, newer or older: not "not there".
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /proc/sys/kernel/sbxc_no_such_entry\n", extra=extra)
    assert code == 0 and "mask /proc/sys/kernel/sbxc_no_such_entry: partial: missing from this host's /proc" in err, err


def test_a_missing_mask_in_the_project_names_the_claim(root):
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/docs\n  - mask {project}/docs/gone\n",
                             "dir proj/docs\n")
    assert code == 0, err
    assert ("mask {project}/docs/gone: partial: the path is missing on this host, so no volume covers it: if the volume "
            "claim sbxc-proj-project has it") in err, err


def test_a_masked_file_inside_a_read_only_part_of_the_project(root):
    """Its mount point must be a file in the read-only claim path: an init container makes
    it empty where the claim lacks it (an existing one is left as it is)."""
    proj = os.path.join(root, "proj")
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/docs\n  - mask {project}/docs/f.txt\n",
                             "file proj/docs/f.txt\n")
    assert code == 0, err
    m = mounts(docs)
    assert m[proj + "/docs/f.txt"]["subPath"] == "empty"
    (init,) = pod(docs)["initContainers"]
    assert init["name"] == "sbxc-mount-files" and init["command"][-1] == proj + "/docs/f.txt", init
    assert init["volumeMounts"] == [dict(m[proj + "/docs"], readOnly=False)]


def test_folders_between_a_writable_volume_and_a_mount_in_it_are_pinned(root):
    """Every folder between a writable volume (the claim, an emptyDir) and a mount inside it
    is a mount of that volume's same path, parents first; a mount right inside needs none,
    and nothing is pinned inside a read-only volume (it cannot be renamed there)."""
    proj = os.path.join(root, "proj")
    data = os.path.join(root, "data")
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/a/b/c\n  - mask {project}/s/t/secret\n"
                             f"  - read {{project}}/top\n  - tmpfs {data}\n  - read {data}/x/y\n",
                             "dir proj/a/b/c\nfile proj/s/t/secret\ndir proj/top\ndir data/x/y\n")
    assert code == 0, err
    m = mounts(docs)
    claim = m[proj]["name"]
    for q, sub in (("/a", "a"), ("/a/b", "a/b"), ("/s", "s"), ("/s/t", "s/t")):
        assert m[proj + q] == {"name": claim, "mountPath": proj + q, "readOnly": False, "subPath": sub}, q
    assert m[data + "/x"] == {"name": m[data]["name"], "mountPath": data + "/x", "readOnly": False, "subPath": "x"}
    order = [x["mountPath"] for x in pod(docs)["containers"][0]["volumeMounts"]]
    assert order.index(proj + "/a") < order.index(proj + "/a/b") < order.index(proj + "/a/b/c")
    assert m[proj + "/top"]["readOnly"] is True and proj + "/top" in m  # right inside: no pin above it
    pinned = {x for x in m if not m[x]["readOnly"] and m[x].get("subPath") and x not in (proj,)}
    assert pinned == {proj + "/a", proj + "/a/b", proj + "/s", proj + "/s/t", data + "/x"}, pinned
    # Inside a read-only part of the project nothing is pinned: a folder there cannot be renamed.
    code, docs, err = export(root, BASE + "filesystem:\n  - read {project}/ro\n  - write {project}/ro/d/e/w\n",
                             "dir proj/ro/d/e/w\n")
    assert code == 0, err
    m = mounts(docs)
    assert proj + "/ro/d" not in m and proj + "/ro/d/e" not in m and m[proj + "/ro/d/e/w"]["readOnly"] is False


def _expand(text: str, names: dict) -> str:
    """Kubernetes' expansion of a container's env value, command or args, as its API
    documents it: $(NAME) becomes NAME's value where NAME is defined (else stays), $$
    becomes $, and any other $ stays."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(names[name] if name in names else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_dollars_reach_the_pod_as_written(root):
    """env.set values and the command's arguments are literal in a policy; Kubernetes would
    expand $(NAME) in them and turn $$ into $. Each $ is written doubled."""
    values = {"A": "$(PIP_CACHE_DIR)/x", "B": "cost $$5", "C": "$HOME and $", "D": "a$(B)b$$(C)"}
    env_set = "".join(f"    {k}: {v!r}\n".replace("'", '"') for k, v in values.items())
    cmd = ["sh", "-c", "echo $$; echo $(PIP_CACHE_DIR) $(A)"]
    code, docs, err = export(root, BASE + "env:\n  set:\n" + env_set, "", "--", *cmd)
    assert code == 0, err
    c = pod(docs)["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    defined = {k: _expand(v, {}) for k, v in env.items()}  # what the Pod's variables hold
    for k, v in values.items():
        assert _expand(env[k], defined) == v, (k, env[k])
    assert [_expand(a, defined) for a in c["command"]] == cmd, c["command"]
    # Control: written as they are, the Pod would get other values.
    assert _expand(values["B"], {}) != values["B"] and _expand(cmd[2], defined) != cmd[2]


def test_yaml_strings_stay_strings_for_a_yaml_1_1_reader(root):
    """kubectl reads YAML 1.1, where plain y, n, on, 1e3, 0o17 or -.5 are not strings; such
    values are written quoted (PyYAML's own reader would take them as strings either way)."""
    tricky = ["y", "N", "on", "1e3", "0o17", "-.5", ".inf", "1:30", "2024-01-02", "null", "~", ""]
    env_set = "".join(f'    V{i}: "{v}"\n' for i, v in enumerate(tricky))
    code, docs, err = export(root, BASE + "env:\n  set:\n" + env_set, "", "--", "yes", "n")
    assert code == 0, err
    from sbxc.commands import export as mod

    text = mod.render(docs, "yaml")
    for i, v in enumerate(tricky):
        assert f'value: "{v}"' in text, v
    assert '- "n"' in text
    assert [d for d in yaml.safe_load_all(text)] == docs


def test_names_are_ascii_dns_labels(root):
    import re

    dns = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    code, docs, err = export(root, BASE + "filesystem:\n  - mask {project}/donn\u00e9es\n", "dir proj/donn\u00e9es\n",
                             "--name", "\u00dcn\u00efcode\u00b2")
    assert code == 0, err
    names = [v["name"] for v in pod(docs)["volumes"]] + [docs[-1]["metadata"]["name"]]
    assert all(dns.match(n) for n in names), names
    assert docs[-1]["metadata"]["name"] == "n-code", docs[-1]["metadata"]


def test_text_a_manifest_cannot_carry_is_refused(root):
    from sbxc.commands import export as mod

    code, docs, err = export(root, BASE, "", "--", "echo", "\udcff\udcfe")
    assert code == 1 and "is not valid UTF-8" in err and not docs, err
    code, docs, err = export(root, BASE, "", "--image", "")
    assert code == 1 and "--image is empty" in err and not docs, err
    assert mod  # control below: a plain argument exports
    code, docs, err = export(root, BASE, "", "--", "echo", "ok")
    assert code == 0 and docs, err


def test_kubelet_files_and_shapes_a_pod_cannot_start_with(root):
    code, docs, err = export(root, BASE)
    assert code == 0 and "read /: partial:" in err and "/etc/hosts and /dev/termination-log stay writable" in err
    extra = {"/dev": ("dir", 0, 0o755), "/dev/termination-log": ("file", 0, 0o644)}
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /dev/termination-log\n", "", extra=extra)
    assert code == 0, err
    assert "mask /dev/termination-log: partial: the kubelet mounts the container's termination-message file" in err
    assert "/dev/termination-log" not in mounts(docs)
    code, docs, err = export(root, BASE + "filesystem:\n  - mask /etc\n")
    assert code == 1 and "SBX050" in err and "an empty volume there fails the Pod" in err, err
    code, docs, err = export(root, "sbxc: 1\nfilesystem:\n  - write /\n")
    assert code == 1 and "SBX050" in err and "a volume over / hides the image" in err, err
