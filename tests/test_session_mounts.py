"""A session's workspace in an OCI config's mounts (runtime/session_mounts.oci_mounts): what
moves, what is added and where. Live runs under runc: tests/live/test_sessions.py."""
from __future__ import annotations

import os

import pytest

from sbxc.runtime.errors import Refusal
from sbxc.runtime.session_mounts import host_path, oci_mounts

RW = ["rbind", "nosuid", "nodev", "rnosuid", "rnodev", "rw"]
RO = ["rbind", "nosuid", "nodev", "rnosuid", "rnodev", "rro"]


def bind(src, dest=None, opts=RW):
    return {"destination": dest or src, "type": "bind", "source": src, "options": list(opts)}


def test_binds_from_the_project_take_the_workspace_as_source(tmp_path):
    ws = str(tmp_path / "ws")
    os.makedirs(ws + "/src")
    mounts = [bind("/", opts=RO), bind("/p"), bind("/p/src"), bind("/p/.git/hooks", opts=RO),
              {"destination": "/p/.env", "type": "bind", "source": "sbxc-empty", "options": ["bind", "ro"]},
              bind("/pp")]
    out = oci_mounts(mounts, "/p", ws, "write")
    assert [(m["source"], m["destination"]) for m in out] == [
        ("/", "/"), (ws, "/p"), (ws + "/src", "/p/src"), (ws + "/.git/hooks", "/p/.git/hooks"),
        ("sbxc-empty", "/p/.env"), ("/pp", "/pp")]  # /pp is no part of /p
    assert out[3]["options"] == RO and mounts[1]["source"] == "/p"  # the options kept, the input untouched


@pytest.mark.parametrize("access,opt", [("write", "rw"), ("read", "rro")])
def test_a_project_under_a_rule_above_it_gets_the_workspace_before_its_inner_mounts(tmp_path, access, opt):
    ws = str(tmp_path / "ws")
    os.mkdir(ws)
    mounts = [bind("/", opts=RO), bind("/home/u"), {"destination": "/home/u/.ssh", "type": "tmpfs", "source": "tmpfs"},
              {"destination": "/home/u/p/.env", "type": "bind", "source": "sbxc-empty", "options": ["bind", "ro"]}]
    out = oci_mounts(mounts, "/home/u/p", ws, access)
    assert [m["destination"] for m in out] == ["/", "/home/u", "/home/u/.ssh", "/home/u/p", "/home/u/p/.env"]
    assert out[3]["source"] == ws and out[3]["options"][-1] == opt
    # Nothing inside the project: at the end.
    out = oci_mounts(mounts[:2], "/home/u/p", ws, access)
    assert [m["destination"] for m in out] == ["/", "/home/u", "/home/u/p"]


@pytest.mark.parametrize("access", ["none", "mask", "tmpfs"])
def test_a_project_the_policy_does_not_show_is_refused(tmp_path, access):
    with pytest.raises(Refusal, match="does not show the project"):
        oci_mounts([bind("/", opts=RO)], "/p", str(tmp_path), access)


def test_a_bind_source_reached_through_a_link_in_the_workspace_is_refused(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (ws / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Refusal, match="is a symlink, and the policy binds that path"):
        oci_mounts([bind("/p"), bind("/p/out/deeper")], "/p", str(ws), "write")
    # The control: a real folder there is bound as it is.
    (ws / "out").unlink()
    (ws / "out").mkdir()
    assert oci_mounts([bind("/p"), bind("/p/out/deeper")], "/p", str(ws), "write")[1]["source"] == f"{ws}/out/deeper"


def test_host_path_maps_the_project_alone():
    assert host_path("/p", "/p", "/w") == "/w"
    assert host_path("/p/a/b", "/p", "/w") == "/w/a/b"
    assert host_path("/pp/a", "/p", "/w") == "/pp/a"
    assert host_path("/usr/bin/sh", "/p", "/w") == "/usr/bin/sh"
