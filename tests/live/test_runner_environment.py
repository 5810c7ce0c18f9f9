"""The programs sbxc starts on the host (bwrap, runc) never get the command's environment.

They run outside the sandbox until it is made. Started with the command's variables, their
dynamic loader would take a policy's ``env.set`` of LD_PRELOAD (LD_LIBRARY_PATH and the
other loader variables alike) and run a library that an earlier sandboxed run
wrote, with the caller's rights. The test plants such a library in the project, as a
sandboxed command could, and records which programs load it: only the command may, inside
the sandbox; the controls show the same library is loaded by bwrap and runc when they do
get the variable, and that the command still gets it.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import runc_for

pytestmark = pytest.mark.live

SHIM = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    char exe[512] = {0}, line[600];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return;
    int fd = open(MARKS, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    size_t n = strlen(exe);
    memcpy(line, exe, n); line[n] = '\n';
    write(fd, line, n + 1);
    close(fd);
}
"""


def _plant(project: str, tmp_path) -> tuple[str, str]:
    src = tmp_path / "shim.c"
    src.write_text(SHIM)
    marks = os.path.join(project, "marks")
    lib = os.path.join(project, "shim.so")
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", lib, str(src)], check=True, timeout=60)
    return lib, marks


def _loaded_by(marks: str) -> list:
    if not os.path.exists(marks):
        return []
    with open(marks) as f:
        names = sorted({os.path.basename(x) for x in f.read().split()})
    os.unlink(marks)
    return names


@pytest.mark.parametrize("backend", ["bwrap", "oci", "landlock"])
def test_runners_never_load_what_env_set_names(sbxc, tmp_path, request, backend):
    runc_for(request)
    lib, marks = _plant(sbxc.project, tmp_path)
    policy = f"sbxc: 1\nextends: [builtin:default]\nnetwork: false\nenv:\n  set: {{LD_PRELOAD: {lib!r}}}\n"
    r = sbxc(policy, "/usr/bin/true", args=("--backend", backend))
    assert r.rc == 0, r
    # The command loaded it (the variable reached it), and nothing else did.
    assert _loaded_by(marks) == ["true"], r


@pytest.mark.parametrize("program", ["bwrap", "runc"])
def test_control_the_runners_load_the_library_when_given_the_variable(sbxc, tmp_path, program):
    from sbxc.runtime.probe import host_program

    found = host_program(program, os.environ)[0]
    if not found:
        pytest.fail(f"{program} is not installed here")
    lib, marks = _plant(sbxc.project, tmp_path)
    subprocess.run([found, "--version"], env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": lib},
                   capture_output=True, timeout=60)
    assert _loaded_by(marks) == [program]


@pytest.mark.parametrize("backend", ["bwrap", "landlock", "oci"])
def test_an_executable_without_a_shebang_line(sbxc, request, backend):
    """A file with its execute bit and no #! line runs as a shell script on every Linux
    backend, as execvp and a shell run it: bwrap through execvp, Landlock after ENOEXEC,
    and on OCI the runner hands it to /bin/sh itself, since runc execs the command with no
    such fallback (docs/decisions.md). The control: the same script with a #! line runs
    everywhere."""
    runc_for(request)
    bare = os.path.join(sbxc.project, "bare")
    with open(bare, "w") as f:
        f.write('echo "ran as a script: $1"\nexit 7\n')
    os.chmod(bare, 0o755)
    policy = "sbxc: 1\nextends: [builtin:default]\nnetwork: false\n"
    r = sbxc(policy, "./bare", "x", args=("--backend", backend))
    assert r.rc == 7 and r.out == "ran as a script: x\n", r
    with open(bare, "w") as f:
        f.write('#!/bin/sh\necho "ran as a script: $1"\nexit 7\n')
    r = sbxc(policy, "./bare", "x", args=("--backend", backend))
    assert r.rc == 7 and r.out == "ran as a script: x\n", r
