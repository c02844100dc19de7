"""A rollout's tree, as an agent may shape it: deep, full of files, links out, FIFOs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fulmen.agent.command import tree


def deep(path: Path, levels: int) -> None:
    """Make ``levels`` nested folders under ``path`` (by descriptor: the path outgrows PATH_MAX)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_deep_tree_is_measured_without_recursion_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "rollout"
    root.mkdir()
    deep(root, 1500)
    usage = tree.measure(root, max_entries=100_000)
    assert usage.too_deep and usage.stopped and usage.entries == tree.MAX_DEPTH
    assert tree.defuse(root) == []  # walked to the depth it may, nothing to remove
    tree.remove(root)
    assert not root.exists()


def test_empty_files_count_though_they_take_no_blocks(tmp_path: Path) -> None:
    for n in range(300):
        (tmp_path / f"f{n}").touch()
    assert tree.measure(tmp_path).entries == 300
    stopped = tree.measure(tmp_path, max_entries=100)
    assert stopped.stopped and stopped.entries == 101
    (tmp_path / "big").write_bytes(b"x" * 1_000_000)
    assert tree.measure(tmp_path, max_bytes=500_000).stopped


def test_links_out_fifos_and_sockets_are_removed_links_inside_kept(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "main.py").write_text("print(1)\n")
    (tmp_path / "secret").write_text("not the agent's")
    (work / "inside").symlink_to("src/main.py")
    (work / "answer.txt").symlink_to(tmp_path / "secret")
    (work / "src" / "up").symlink_to("../../secret")
    (work / "loop").symlink_to("loop")
    os.mkfifo(work / "fifo")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(work / "sock"))
        removed = sorted(tree.defuse(work))
    assert removed == ["answer.txt", "fifo", "sock", "src/up"]
    assert (work / "inside").read_text() == "print(1)\n"
    assert (work / "loop").is_symlink()  # a loop leads nowhere: nothing can read through it
