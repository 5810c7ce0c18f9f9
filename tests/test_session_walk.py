"""Walking a workspace whose folders nest past the system's path limit is one line, not an
internal error: the workspace's path is longer than the project's, so a tree a command
made can pass the limit there only."""
from __future__ import annotations

import os

import pytest

from sbxc.runtime.errors import Refusal
from sbxc.runtime.session_copy import walk


def test_a_tree_deeper_than_the_path_limit_is_refused_in_one_line(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(24):  # 24 x 201 characters: past PATH_MAX (4096) from tmp_path
            os.mkdir("a" * 200, dir_fd=fd)
            nfd = os.open("a" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    with pytest.raises(Refusal) as e:
        list(walk(str(tmp_path)))
    assert "cannot read the folder" in e.value.line() and "\n" not in e.value.line()


def test_control_a_tree_within_the_limit_is_walked(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert [rel for rel, _ in walk(str(tmp_path))] == ["", "a", "a/b"]
