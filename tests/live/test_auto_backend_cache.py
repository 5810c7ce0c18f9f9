"""`backend: auto` picks bwrap where it can make namespaces, else Landlock. A cached plan must
not keep a choice made under other conditions: run once normally (bwrap), once under a
seccomp filter that forbids new user namespaces (as in a container: Landlock), and once
normally again (bwrap)."""
import os
import sys
import textwrap

import pytest

from conftest import base_env, run, sbxc_argv

pytestmark = pytest.mark.live

# Refuses clone/unshare with CLONE_NEWUSER, then execs the rest of argv.
NO_USERNS = textwrap.dedent("""
    import errno, os, sys
    import pyseccomp as s
    f = s.SyscallFilter(s.ALLOW)
    for call in ("unshare", "clone"):
        f.add_rule(s.ERRNO(errno.EPERM), call, s.Arg(0, s.MASKED_EQ, 0x10000000, 0x10000000))
    f.add_rule(s.ERRNO(errno.ENOSYS), "clone3")
    f.load()
    os.execv(sys.argv[1], sys.argv[1:])
""")


HOST_MNT = os.readlink("/proc/self/ns/mnt")


def own_mounts(result) -> bool:
    """Whether the command ran in a mount namespace of its own (bwrap's); the Landlock
    backend has none (a PID namespace it may have: for root)."""
    assert result.rc == 0, result
    return result.out.strip().splitlines()[-1] != HOST_MNT


def test_cached_auto_choice_follows_the_host(bwrap_works, project, home):
    from sbxc.runtime.probe import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    with open(os.path.join(project, "sandbox.policy.yaml"), "w") as f:
        f.write("sbxc: 1\nextends: [builtin:default]\n")
    env = base_env(home)
    cmd = sbxc_argv("exec", "--", "readlink", "/proc/self/ns/mnt")
    # bwrap: the command runs in new namespaces, a mount namespace among them.
    assert own_mounts(run(cmd, env=env, cwd=project))
    # No user namespaces: bwrap cannot run; auto must pick Landlock, whose command keeps the host's mounts.
    confined = run([sys.executable, "-c", NO_USERNS, *cmd], env=env, cwd=project)
    assert not own_mounts(confined), confined
    # And back: the Landlock plan made under the filter is not reused.
    assert own_mounts(run(cmd, env=env, cwd=project))
