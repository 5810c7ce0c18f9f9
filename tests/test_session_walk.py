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


def test_a_folder_swapped_for_a_link_while_walked_is_never_entered(tmp_path):
    """A command of the session still running swaps a folder for a link to a host folder
    between the walk's listing and its entering the folder (here: at the moment the walk
    hands the folder out): nothing of the host folder is listed, and the walk says the
    folder changed. It went in by path before and listed the host's tree."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "mine.py").write_text("x\n")
    host = tmp_path / "host-only"
    (host / "inner").mkdir(parents=True)
    (host / "inner" / "PRIVATE").write_text("secret\n")
    seen = []
    with pytest.raises(Refusal) as e:
        for rel, _ in walk(str(ws)):
            seen.append(rel)
            if rel == "src":
                os.rename(ws / "src", ws / "src-moved")
                os.symlink(host, ws / "src")
    assert not any("inner" in r or "PRIVATE" in r for r in seen), seen
    assert "changed while it was read" in e.value.line() and "\n" not in e.value.line()
    # The control: the same tree, walked again now, shows the link as a link, never entered.
    assert sorted(r for r, _ in walk(str(ws))) == ["", "src", "src-moved", "src-moved/mine.py"]


def test_comparing_a_fifo_swapped_in_returns_at_once(tmp_path):
    """A FIFO where a file was (a command still running swapped it) is not opened for a
    read that waits for a writer: the comparison says "not the same" at once."""
    import threading

    from sbxc.runtime.session_copy import _same_content

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("x\n")
    os.mkfifo(tmp_path / "a" / "x")
    got = []
    t = threading.Thread(target=lambda: got.append(_same_content(str(tmp_path / "a"), str(tmp_path / "b"), "x")),
                         daemon=True)
    t.start()
    t.join(5)
    assert got == [False], "the comparison waited on the FIFO"


def test_the_comparison_never_goes_through_a_folder_swapped_for_a_link(tmp_path):
    """The workspace's src swapped for a link to a host folder holding a file equal to
    the project's: the comparison (a yes or no about a host file) is never made through
    the link. It went by path before and answered "the same". The control: the real
    folder, with the same bytes, compares equal."""
    from sbxc.runtime.session_copy import _same_content

    ws, project, host = tmp_path / "ws", tmp_path / "project", tmp_path / "host-only"
    for d in (ws, project / "src", host):
        d.mkdir(parents=True)
    (project / "src" / "f").write_text("same bytes\n")
    (host / "f").write_text("same bytes\n")
    os.symlink(host, ws / "src")
    assert _same_content(str(ws), str(project), "src/f") is False
    os.unlink(ws / "src")
    (ws / "src").mkdir()
    (ws / "src" / "f").write_text("same bytes\n")
    assert _same_content(str(ws), str(project), "src/f") is True
