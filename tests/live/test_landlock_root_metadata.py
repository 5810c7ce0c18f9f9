"""As root on Landlock, metadata calls are refused everywhere: root owns every root-owned
host file, and no Landlock ABI covers chmod/chown/xattrs/times."""
import os

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = [pytest.mark.live, pytest.mark.root_only]  # what uid 0 can change


def test_root_cannot_change_modes_of_host_files(bwrap_works, project, home, tmp_path):
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    outside = tmp_path / "system-file"
    outside.write_text("root's\n")
    os.chmod(outside, 0o600)
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\n")
    env = base_env(home)
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", "chmod", "666", str(outside)), env=env, cwd=project)
    assert r.rc != 0 and "Operation not permitted" in r.err, r
    assert oct(os.stat(outside).st_mode & 0o777) == "0o600"
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", "setfacl", "-m", "o:rw", str(outside)), env=env, cwd=project)
    assert r.rc != 0, r  # an ACL is an xattr: refused like chmod (127 if setfacl is not installed)
    assert oct(os.stat(outside).st_mode & 0o777) == "0o600"
    # control: the project stays writable, and the same chmod works outside the sandbox
    r = run(sbxc_argv("exec", "--backend", "landlock", "--", "sh", "-c", "echo ok > built.txt"), env=env, cwd=project)
    assert r.rc == 0 and os.path.exists(os.path.join(project, "built.txt")), r
    os.chmod(outside, 0o666)
    assert oct(os.stat(outside).st_mode & 0o777) == "0o666"
