"""``sbxc export kubernetes [--policy P] [--network[=true|false]] [--kind pod|job] [--image I]
[--name N] [--format yaml|json] [-o DIR] [-- CMD...]``, and the OCI bundle ``sbxc compile
--backend oci -o DIR`` writes.

The workload comes from the same plan and the same OCI lowering as ``sbxc exec --backend
oci`` (the seccomp profile is the OCI backend's JSON), so what the enforcement report
says here is about the same rules. What a Pod cannot express the way the host does is
narrowed or reported, never widened (SPEC §3): a Pod sees its image's files, not this
host's, so ``read`` rules of host folders hold only for what the image has; the caller's
environment does not exist there (``env.pass`` lets nothing through); NetworkPolicy holds
only where the cluster's network plugin enforces it.

Output: the workload (a Pod or a Job) and, for ``network: false`` or port rules, a
NetworkPolicy, as one YAML stream (``---`` between documents) or a JSON ``List``; the
report on stderr. With ``-o DIR``: ``DIR/workload.yaml`` (or ``.json``) and the seccomp
profile at ``DIR/profiles/<name>.json``, the path the Pod's ``localhostProfile`` names
under the kubelet's seccomp folder. Exit 0; 1 on errors (a policy with errors, a rule
Kubernetes cannot enforce in any narrower form, a file that cannot be written).
"""
from __future__ import annotations

import os
import sys

from ..compiler.plan import BUILTIN_SPAN, KIND_DIR, KIND_MISSING, MASK, NET_OFF, NET_ON, READ, TMPFS, WRITE, is_within
from ..verdict import ENFORCED, NARROWED, NOT_ENFORCEABLE, PARTIAL, SKIPPED, verdict
from . import _args, _help
from ._output import write_file

TARGET = "kubernetes"
_LABEL = "sbxc.dev/workload"
TERMINATION_LOG = "/dev/termination-log"  # a container's default terminationMessagePath
ETC_HOSTS = "/etc/hosts"  # the kubelet's own mount, writable, unless the container mounts one there




def main(argv) -> int:
    from ..runtime.probe import probe_host

    return run(argv, cwd=os.getcwd(), environ=os.environ, host=None, probe=probe_host)


def _dns_name(text: str) -> str:
    """``text`` as a DNS label (what Kubernetes takes as a name): ASCII letters and digits
    in lower case, runs of anything else one ``-``."""
    out = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return (out or "project")[:50].strip("-")


def _subject(rule, plan) -> str:
    from ..backends.oci import _subject as oci_subject

    return oci_subject(rule, plan)


def workload(plan, host, *, name: str, kind: str, image: str, command, profile_path: str):
    """(manifests, verdicts, seccomp profile or None) for ``plan``: pure, like a backend."""
    from ..backends import oci

    verdicts = []
    volumes: list[dict] = []
    mounts: list[dict] = []
    need_empty_file = False
    by_path = {r.path: r for r in plan.fs}

    role: dict[str, str] = {}  # mountPath -> "claim", "claim-ro", "scratch", "mask" or "file"
    at: dict[str, dict] = {}  # mountPath -> its volumeMount
    claim = [""]  # the project's volume claim: its volume name

    def vol(rule, source: dict, read_only: bool, what: str, sub_path: str = "", name_: str = "") -> None:
        vname = name_ or f"v{len(volumes)}-{_dns_name(rule.path.rsplit('/', 1)[-1] or 'root')}"[:63].rstrip("-")
        if sub_path == "empty":
            vname = "sbxc-empty"
        if not any(v["name"] == vname for v in volumes):
            volumes.append({"name": vname, **source})
        pin(rule.path)
        m = {"name": vname, "mountPath": rule.path, "readOnly": read_only}
        if sub_path:
            m["subPath"] = sub_path
        mounts.append(m)
        role[rule.path] = what
        at[rule.path] = m

    def pin(path: str) -> None:
        """The folders between a writable volume (the claim, an emptyDir) and a mount made
        inside it become mounts of that volume too, of the same path, writable: a folder
        that is a mount point cannot be renamed. Else the command renames the folder above
        the deeper mount (``mv .git .git-old``, which moves the read-only
        ``.git/hooks`` mount along) and makes the path anew, writable, in the volume: hooks
        of its own in the claim, where the next Pod's git runs them. The same as the OCI
        backend's self-binds (``backends.oci``)."""
        under = holder(path)
        if under is None or under == "/" or role.get(under) not in ("claim", "scratch"):
            return
        base = at[under]
        between = [q for q in _parents(path) if q.startswith(under + "/")]
        for q in reversed(between):  # parents first, as the runtime mounts them
            sub = "/".join(x for x in (base.get("subPath", ""), q[len(under) + 1:]) if x)
            m = {"name": base["name"], "mountPath": q, "readOnly": False, "subPath": sub}
            mounts.append(m)
            role[q] = role[under]
            at[q] = m

    def holder(path: str):
        """The deepest mount made so far strictly above ``path`` (rules come parents first):
        a walk up the path's folders, not over every mount (a policy may hold thousands)."""
        for q in _parents(path):
            if q in role:
                return q
        return None

    def cover(rule, folder=None) -> None:
        """An empty read-only volume over ``rule.path``: a folder, or the empty ConfigMap key."""
        nonlocal need_empty_file
        if (rule.kind == KIND_DIR) if folder is None else folder:
            vol(rule, {"emptyDir": {"sizeLimit": "1Mi"}}, True, "mask")
        else:
            need_empty_file = True
            vol(rule, {"configMap": {"name": f"{name}-empty"}}, True, "file", sub_path="empty")

    points: dict[str, list] = {}  # a read-only mount's mountPath -> the folders to make in it as mount points
    file_points: dict[str, list] = {}  # the same for files (a masked file)

    for rule in plan.fs:
        subj = _subject(rule, plan)
        p = rule.path
        parent = next((by_path[q] for q in _parents(p) if q in by_path), None)
        under = holder(p)
        inside = role.get(under, "")
        if any(is_within(p, own) for own in ("/proc", "/dev")):
            entry = p[5:].split("/", 1)[0] if p.startswith("/dev/") else ""
            if p == TERMINATION_LOG and rule.access == MASK:
                verdicts.append(verdict(TARGET, subj, PARTIAL, rule.span,
                                        "the kubelet mounts the container's termination-message file there, "
                                        "writable (terminationMessagePath): no volume can take its place"))
                continue
            if rule.access != MASK:
                verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                        "the container runtime gives the Pod its own /proc and /dev"))
            elif p in ("/proc", "/dev"):
                verdicts.append(verdict(TARGET, subj, NOT_ENFORCEABLE, rule.span,
                                        f"the container runtime cannot start a container without {p}; mask the "
                                        "paths in it instead"))
            elif entry and (entry not in oci.DEV_FILES or ("/" in p[5:] and rule.kind == KIND_MISSING)):
                # The Pod's /dev is the runtime's: what this host has there says nothing of
                # its entries.
                verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                        "not there: the runtime's own /dev has no such entry"))
            elif not entry and rule.kind == KIND_MISSING:
                # Missing from this host's /proc says nothing of the node's kernel, which may
                # be newer (a Pod's network devices are the plugin's, often an eth0 too).
                verdicts.append(verdict(TARGET, subj, PARTIAL, rule.span,
                                        "missing from this host's /proc: the node's kernel may have it, and a Pod "
                                        "cannot mount over its runtime's /proc (maskedPaths is the runtime's)"))
            elif not entry:
                verdicts.append(verdict(TARGET, subj, NOT_ENFORCEABLE, rule.span,
                                        "a Pod cannot mount over its runtime's /proc, and the file is there in it "
                                        "(maskedPaths is the runtime's, not the Pod's)"))
            else:
                cover(rule, folder=entry in ("shm", "pts", "mqueue") if rule.kind == KIND_MISSING else None)
                verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                        "an empty read-only volume covers the runtime's own"))
            continue
        if inside == "claim-ro" and rule.access == WRITE:
            # Writable again inside a read-only part of the project: the same claim path,
            # mounted writable (the kubelet makes a missing subPath, so no mount point is
            # needed in the read-only part, which is the same volume).
            vol(rule, {}, False, "claim", sub_path=p[len(plan.project):].lstrip("/"), name_=claim[0])
            verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                    f"a writable mount of the same path of the volume claim {name}-project"))
            continue
        if inside == "claim-ro" and rule.access in (MASK, TMPFS) and rule.kind == KIND_DIR:
            points.setdefault(under, []).append(p)  # its mount point, in the read-only claim path
        elif inside == "claim-ro" and rule.access == MASK and rule.kind != KIND_MISSING:
            file_points.setdefault(under, []).append(p)  # a file's mount point, the same way
        if inside in ("mask", "file"):
            # Below a masked folder: the Pod shows an empty read-only folder there, so the
            # path is not there and cannot be made. A volume is mounted only where the
            # policy gives the command something (the project, a cache, a tmpfs, a
            # writable folder); its mount point is made beforehand (``points``).
            if rule.access == MASK or rule.access == READ:
                verdicts.append(verdict(TARGET, subj, ENFORCED if rule.access == MASK else NARROWED, rule.span,
                                        f"inside the masked {under}, which the Pod shows empty and read-only"
                                        + ("" if rule.access == MASK else ": a Pod cannot see this host's files")))
                continue
            points.setdefault(under, []).append(p)
        if p == "/etc" and rule.access in (MASK, TMPFS):
            verdicts.append(verdict(TARGET, subj, NOT_ENFORCEABLE, rule.span,
                                    "the kubelet and the runtime mount /etc/hosts, /etc/hostname and /etc/resolv.conf "
                                    "into the container's /etc, and an empty volume there fails the Pod at its start; "
                                    "mask the files in /etc instead"))
            continue
        if p == "/" and rule.access in (WRITE, TMPFS):
            verdicts.append(verdict(TARGET, subj, NOT_ENFORCEABLE, rule.span,
                                    "a Pod's root is its image: a volume over / hides the image and the Pod cannot "
                                    "start; use `read /` and write rules for the folders the command writes"))
            continue
        if rule.access == MASK:
            if rule.kind == KIND_MISSING:
                if parent is not None and parent.access in (WRITE, TMPFS):
                    verdicts.append(verdict(TARGET, subj, PARTIAL, rule.span,
                                            "the path does not exist and its parent is writable in the Pod: the command "
                                            "could create it"))
                else:
                    # Missing here says nothing of the image: the kind of volume that would
                    # cover it (a folder or a file) is unknown, and a wrong one fails the Pod.
                    holds = (f"the volume claim {name}-project" if claim[0] and is_within(p, plan.project)
                             else "the image")
                    verdicts.append(verdict(TARGET, subj, PARTIAL, rule.span,
                                            f"the path is missing on this host, so no volume covers it: if {holds} "
                                            "has it, the command can read it"))
                continue
            cover(rule)
            verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                    "an empty read-only volume covers the path, whatever the image has there"))
        elif rule.access == TMPFS:
            if rule.kind != KIND_DIR:
                verdicts.append(verdict(TARGET, subj, NOT_ENFORCEABLE, rule.span,
                                        f"a tmpfs needs a folder and this is a {rule.kind}"))
                continue
            vol(rule, {"emptyDir": {"medium": "Memory"}}, False, "scratch")
            verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span))
        elif rule.origin == "cache":
            vol(rule, {"emptyDir": {}}, False, "scratch")
            verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                    "an emptyDir volume: the cache lasts as long as the Pod, not across runs"))
        elif rule.access == WRITE and p == plan.project:
            vol(rule, {"persistentVolumeClaim": {"claimName": f"{name}-project"}}, False, "claim")
            claim[0] = mounts[-1]["name"]
            verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                    f"the project is the volume claim {name}-project, mounted at the same path; "
                                    "sbxc copies nothing of this host's project into it"))
        elif rule.access == WRITE and inside == "claim":
            verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                    f"writable inside the volume claim {name}-project"))
        elif rule.access == WRITE:
            vol(rule, {"emptyDir": {}}, False, "scratch")
            verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                    "a Pod cannot see this host's folders: an empty writable volume stands in, "
                                    "and nothing written there reaches a host"))
        elif rule.access == READ:
            if p == "/":
                verdicts.append(verdict(TARGET, subj, PARTIAL, rule.span,
                                        "the image's files, read-only (readOnlyRootFilesystem), but for the files the "
                                        f"kubelet mounts itself: {ETC_HOSTS} and {TERMINATION_LOG} stay writable"))
            elif inside == "claim":
                # The same path of the project's volume, mounted again read-only on top: a
                # `read {project}/.git/hooks` must not stay writable through the claim.
                vol(rule, {}, True, "claim-ro", sub_path=p[len(plan.project):].lstrip("/"), name_=claim[0])
                verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                        f"a read-only mount of the same path of the volume claim {name}-project "
                                        "(a path the claim lacks is made there as an empty folder)"))
            elif inside == "scratch":
                # Inside a writable volume that holds nothing of this host: an empty
                # read-only stand-in, so the path cannot be made writable there.
                cover(rule)
                verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                        f"a Pod cannot see this host's files, and {under} is a writable volume: an "
                                        "empty read-only stand-in covers the path"))
            elif inside == "claim-ro":
                verdicts.append(verdict(TARGET, subj, ENFORCED, rule.span,
                                        f"inside the read-only mount of {under}"))
            else:
                verdicts.append(verdict(TARGET, subj, NARROWED, rule.span,
                                        "a Pod sees its image's files, not this host's: the path is there read-only "
                                        "only if the image has it"))
    for s in plan.skipped:
        verdicts.append(verdict(TARGET, f"{s.access}? {s.path}", SKIPPED, s.span, s.reason))
    inner = [r for r in plan.fs if claim[0] and r.path != plan.project and r.path.startswith(plan.project + "/")]
    if inner:
        verdicts.append(verdict(TARGET, "rules inside the project", PARTIAL, inner[0].span,
                                "resolved on this host's copy of the project (links followed, files told from "
                                f"folders): the volume claim {name}-project must hold the same, or a rule meets "
                                "something else there (a file where this host has a link) or the Pod fails to start "
                                "(a file where this host has a folder)"))

    span0 = plan.fs[0].span if plan.fs else BUILTIN_SPAN
    if not any(r.path == "/" and r.access in (READ, WRITE) for r in plan.fs):
        # On this host what no rule names is not there at all (an empty root); a Pod's root
        # is always its image, and readOnlyRootFilesystem keeps it readable. The export cannot
        # hide the rest of the image without knowing it, so it says so.
        verdicts.append(verdict(TARGET, "paths no rule names", PARTIAL, span0,
                                "a Pod always has its image as the root: what the policy does not name is readable "
                                "(read-only) wherever the image has it, where this host's sandbox shows nothing"))
    profile = None
    try:
        profile = oci.seccomp_json(plan, host.arch)
        verdicts.append(verdict(TARGET, "syscalls", PARTIAL, span0,
                                "the profile holds when the node's runtime loads it (copied into the kubelet's seccomp "
                                "folder on every node); a runtime whose libseccomp lacks a call's name skips that rule"))
        from ..backends.seccomp import families_verdict_text

        # The same profile as the OCI backend's: its narrowings hold in a Pod too.
        verdicts.append(verdict(TARGET, "socket families", NARROWED, BUILTIN_SPAN, families_verdict_text()))
        verdicts.append(verdict(TARGET, "other syscall ABIs", NARROWED, BUILTIN_SPAN,
                                "the profile lists the node's native architecture only: a call through another ABI "
                                "(i386 int 0x80, x32) meets the runtime's action for an unlisted one (runc: the "
                                "process is killed) instead of failing with EPERM"))
    except Exception as e:  # missing libseccomp, unknown syscall, unsupported arch
        verdicts.append(verdict(TARGET, "syscalls", NOT_ENFORCEABLE, span0, f"the seccomp profile could not be built: {e}"))

    net = plan.network
    policy_doc = None
    if net.mode != NET_ON:
        egress = []
        ingress = []
        for r in net.rules:
            port = {"protocol": "TCP", "port": r.port_lo}
            if r.port_hi != r.port_lo:
                port["endPort"] = r.port_hi
            (egress if r.op == "connect" else ingress).append({"ports": [port]})
        policy_doc = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"{name}-network"},
            "spec": {"podSelector": {"matchLabels": {_LABEL: name}}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": ingress, "egress": egress},
        }
        why = ("the NetworkPolicy holds only where the cluster's network plugin enforces NetworkPolicy, and only "
               "once the plugin has matched the Pod (apply it first: it comes first in the output); traffic between "
               "the Pod and its own node (the node's services, a node-local DNS cache) stays allowed whatever the "
               "policy, other NetworkPolicies that select the Pod add what they allow, and the Pod's own loopback "
               "stays open")
        if net.mode == NET_OFF:
            verdicts.append(verdict(TARGET, "network: false", PARTIAL, net.span, why))
        for r in net.rules:
            ports = str(r.port_lo) if r.port_lo == r.port_hi else f"{r.port_lo}-{r.port_hi}"
            verdicts.append(verdict(TARGET, f"{r.op} {r.proto} {ports}", PARTIAL, r.span,
                                    why + ("; to any address (the cluster's API server and a cloud's metadata "
                                           "address among them)" if r.op == "connect" else "; from any address")))
        for h in getattr(net, "hosts", ()):
            # A NetworkPolicy matches addresses and ports, never names, and no proxy runs in
            # the Pod: the host gets no egress rule, so it stays unreachable.
            from ..hostnames import parse_addr

            literal = h.host[1:-1] if h.host.startswith("[") else h.host
            why = ("the export starts no proxy and turns no address rule into a NetworkPolicy allow"
                   if parse_addr(literal) is not None else
                   "a NetworkPolicy cannot allow a host name and the export starts no proxy")
            opened = sorted({q for q in h.ports for r in net.rules if r.op == "connect" and r.port_lo <= q <= r.port_hi})
            if opened:
                # A port rule opens its port to every address, this host's among them.
                verdicts.append(verdict(TARGET, h.text, NARROWED, h.span,
                                        why + ": it gets no rule of its own, but the port rules open "
                                        + ", ".join(f"TCP {q}" for q in opened) + " to every address, so it is "
                                        "reachable there; on its other ports egress is denied with the rest"
                                        if set(opened) != set(h.ports) else
                                        why + ": it gets no rule of its own, but the port rules open "
                                        + ", ".join(f"TCP {q}" for q in opened) + " to every address, so it is "
                                        "reachable on them"))
                continue
            verdicts.append(verdict(TARGET, h.text, NARROWED, h.span, why + ": egress to it is denied with the rest"))
    else:
        verdicts.append(verdict(TARGET, "network: true", ENFORCED, net.span))

    # Kubernetes expands $(NAME) in a container's env values, command and args, and reads
    # $$ as $: every $ is written doubled, so each value and argument stays as written.
    env = [{"name": k, "value": _literal(v)} for k, v in list(plan.cache.env) + list(plan.env.set)]
    verdicts.append(verdict(TARGET, "env", PARTIAL, span0,
                            ("a Pod has no caller's environment: env.pass lets nothing through; " if plan.env.passed
                             else "") + "env.set and the cache variables are set, and so are the image's own "
                            "variables (its ENV) and the cluster's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                            "(enableServiceLinks: false drops the other services' variables, not these)"))
    verdicts.append(verdict(TARGET, "capabilities", ENFORCED, BUILTIN_SPAN))
    verdicts.append(verdict(TARGET, "processes", ENFORCED, BUILTIN_SPAN, "the Pod's own PID namespace (no shareProcessNamespace, no hostPID)"))
    verdicts.append(verdict(TARGET, "ipc", ENFORCED, BUILTIN_SPAN))

    sc_pod = {"seccompProfile": {"type": "Localhost", "localhostProfile": profile_path}}
    if host.uid != 0:
        sc_pod.update(runAsNonRoot=True, runAsUser=host.uid, runAsGroup=host.gid)
        verdicts.append(verdict(TARGET, "uid", ENFORCED, BUILTIN_SPAN, f"runAsNonRoot, as uid {host.uid} (the caller's)"))
    else:
        verdicts.append(verdict(TARGET, "uid", PARTIAL, BUILTIN_SPAN,
                                "compiled as root: runAsNonRoot is not set and the command runs as the image's "
                                "user (export as a user to get runAsNonRoot)"))
    container = {
        "name": "sandboxed",
        "image": image,
        "workingDir": plan.project,
        "env": env,
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    if command:
        container["command"] = [_literal(a) for a in command]
    init = []

    def maker(cname: str, argv: list, where: dict) -> dict:
        """An init container as restricted as the command's that runs ``argv`` on the paths
        of ``where`` (a read-only mount's path -> paths in it), with those mounts writable."""
        return {"name": cname, "image": image, "command": argv + sorted(q for at in where for q in where[at]),
                "securityContext": {k: (dict(v, drop=list(v["drop"])) if k == "capabilities" else v)
                                    for k, v in container["securityContext"].items()},
                "volumeMounts": [dict(m, readOnly=False) for m in mounts if m["mountPath"] in where]}

    if points:
        # A masked folder is a read-only emptyDir, and the runtime cannot make the mount
        # point of a deeper volume (the project under a hidden home, the cache under its
        # masked root) in a read-only folder: the Pod would fail to start. So an init
        # container, as restricted as the command's, mounts those folders writable first
        # and makes the mount points; the command's container gets them read-only.
        made = sorted(points)
        init.append(maker("sbxc-mount-points", ["mkdir", "-p", "--"], points))
        verdicts.append(verdict(TARGET, "mount points", ENFORCED, BUILTIN_SPAN,
                                "an init container (mkdir from the image) makes the mount points of the volumes "
                                f"inside the read-only {', '.join(made)} before the command's container starts"))
    if file_points:
        # A file's mount point must be a file: made empty where the claim lacks it (an
        # existing file is left as it is, its times too), by the image's sh.
        made = sorted(file_points)
        init.append(maker("sbxc-mount-files", ["sh", "-c", 'for f; do [ -e "$f" ] || : > "$f"; done', "sh"],
                          file_points))
        verdicts.append(verdict(TARGET, "file mount points", ENFORCED, BUILTIN_SPAN,
                                "an init container (sh from the image) makes the masked files' mount points inside "
                                f"the read-only {', '.join(made)} where the claim lacks them"))
    pod_spec = {
        "restartPolicy": "Never",
        # No API credentials and no service variables: the command gets nothing of the
        # cluster the policy did not name.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": sc_pod,
        **({"initContainers": init} if init else {}),
        "containers": [container],
        "volumes": volumes,
    }
    labels = {_LABEL: name, "app.kubernetes.io/managed-by": "sbxc-export"}
    if kind == "job":
        doc = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
               "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}
    else:
        doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": pod_spec}
    # The NetworkPolicy and the ConfigMap first: `kubectl apply -f` creates in the file's
    # order, and a Pod created before its NetworkPolicy starts without it.
    docs = []
    if policy_doc is not None:
        docs.append(policy_doc)
    if need_empty_file:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-empty"}, "data": {"empty": ""}})
    docs.append(doc)
    return docs, verdicts, profile


def _literal(text: str) -> str:
    """``text`` as Kubernetes keeps it in a container's env value, command or args."""
    return text.replace("$", "$$")


def _parents(path: str):
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        yield path


def render(docs, fmt: str) -> str:
    if fmt == "json":
        import json

        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=1) + "\n"
    import yaml  # only here: export is not on any hot path

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if _ambiguous(value) else None)

    Dumper.add_representer(str, text)
    return "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False)
                         for d in docs)


# What YAML 1.1 (the YAML reader of kubectl and the API server) takes for a boolean or a
# null when written plain; PyYAML's own reader knows fewer (not y and n).
_YAML11_WORDS = frozenset(("", "~", "null", "y", "yes", "n", "no", "true", "false", "on", "off"))


def _ambiguous(value: str) -> bool:
    """Whether a string written plain could be read back as something else by another YAML
    reader: a YAML 1.1 boolean or null word, or anything that starts like a number (1e3,
    0o17, -.5, .inf, 1:30, a date). Such strings are written quoted."""
    return value.lower() in _YAML11_WORDS or value[:1] in "+-.0123456789"


def run(argv, *, cwd, environ, host, probe=None, stdout=None, stderr=None, paths=None) -> int:
    from ..compiler.api import compile_policy
    from ..compiler.diagnostics import ERROR, diag, render_text
    from ..compiler.report import render_report_text
    from .build import BackendReport

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    else:
        command = []
    args, code = _help.run_parse(_args.EXPORT, argv, stdout, stderr)
    if args is None:
        return code
    if host is None:
        host = probe(environ)
    overrides = {"backend": "oci"}
    if args.network is not None:
        overrides["network"] = args.network == "on"
    res = compile_policy(args.policy, cwd=cwd, environ=environ, host=host, overrides=overrides, paths=paths)
    diags = list(res.diagnostics)
    if res.plan is None:
        stderr.write(render_text(diags, res.lines, cwd))
        return 1
    for what, text in [("an argument of the command", a) for a in command] + \
            [(f"the value of {k}", v) for k, v in list(res.plan.cache.env) + list(res.plan.env.set)]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A byte that is not UTF-8 (surrogateescape): a manifest carries text only, and
            # the Pod would get another value than the one given.
            stderr.write(f"sbxc export: {what} is not valid UTF-8, which a Kubernetes manifest cannot carry; "
                         "pass it in UTF-8\n")
            return 1
    if args.image is not None and not args.image.strip():
        stderr.write("sbxc export: --image is empty; name the image the Pod runs (or leave --image out for the "
                     "placeholder IMAGE)\n")
        return 1
    name = _dns_name(args.name or "sbxc-" + os.path.basename(res.plan.project))
    profile_path = f"profiles/{name}.json"
    docs, verdicts, profile = workload(res.plan, host, name=name, kind=args.kind or "pod", image=args.image or "IMAGE",
                                       command=command, profile_path=profile_path)
    for v in verdicts:
        if v.status == NOT_ENFORCEABLE:
            diags.append(diag("SBX050", v.span, backend=TARGET, subject=v.subject, why=v.why))
        elif v.status == PARTIAL and args.strict:
            diags.append(diag("SBX051", v.span, backend=TARGET, subject=v.subject, why=v.why))
    text = render_text(diags, res.lines, cwd)
    if text:
        stderr.write(text)
    stderr.write(render_report_text([BackendReport(TARGET, tuple(verdicts))], TARGET, cwd))
    if any(d.severity == ERROR for d in diags):
        return 1
    fmt = args.format or "yaml"
    out = render(docs, fmt)
    if not args.output:
        stdout.write(out)
        stderr.write(f"sbxc export: the seccomp profile was not written (use -o DIR); the Pod expects it at "
                     f"<kubelet seccomp folder>/{profile_path} on every node\n")
        return 0
    from ..runtime.oci_run import dumps

    base = os.path.join(cwd, args.output)
    try:
        os.makedirs(os.path.join(base, "profiles"), exist_ok=True)
        write_file(os.path.join(base, f"workload.{fmt}"), out.encode())
        write_file(os.path.join(base, profile_path), (dumps(profile) + "\n").encode())
    except OSError as e:
        stderr.write(f"sbxc export: cannot write into {args.output}: {e.strerror or e}\n")
        return 1
    return 0


def write_bundle(directory: str, planfile_bytes: bytes, config: dict, plan, links=()) -> None:
    """An OCI bundle for ``runc run --bundle DIRECTORY``: ``config.json`` (the command is
    ``sh``, the folder the project, the environment ``env.set`` and the cache variables:
    nothing of the caller's environment is written to disk), a ``rootfs`` holding only the
    ``links`` (the lowering's symlinks, as the runner makes them), the empty file masked
    files are bound from, and the plan file itself (``plan.json``)."""
    import json

    from ..backends.oci import EMPTY_FILE, ROOTFS
    from ..runtime.oci_links import make_links

    cfg = json.loads(json.dumps(config))
    cfg["process"].update(args=["sh"], cwd=plan.project,
                          env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
                          + [f"{k}={v}" for k, v in list(plan.cache.env) + list(plan.env.set)])
    os.makedirs(os.path.join(directory, ROOTFS), exist_ok=True)
    make_links(os.path.join(directory, ROOTFS), links)
    empty = os.path.join(directory, EMPTY_FILE)
    if not os.path.exists(empty):
        os.close(os.open(empty, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444))
    write_file(os.path.join(directory, "config.json"), (json.dumps(cfg, indent=1, sort_keys=True) + "\n").encode())
    write_file(os.path.join(directory, "plan.json"), planfile_bytes)
