"""Rollout directories and the user ids rollouts run as (as root)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fulmen.agent.command.config import SandboxConfig
from fulmen.agent.command.sandbox import Sandbox
from fulmen.agent.command.workspace import Workspaces


@pytest.mark.skipif(os.geteuid() != 0, reason="user ids per rollout need root")
def test_two_runners_on_one_machine_never_give_two_rollouts_one_user_id(tmp_path: Path) -> None:
    """Each runner ends a rollout by killing every process of its user id: ids must not meet."""
    first = Workspaces(tmp_path / "a", uid_base=62000)
    second = Workspaces(tmp_path / "b", uid_base=62000)  # another runner, same settings
    spaces = [w.create({"q": 1}, template=None, files=lambda s: {}) for w in (first, second)]
    assert spaces[0].uid != spaces[1].uid
    # A runner in another process skips both while they run...
    probe = (
        "from pathlib import Path; from fulmen.agent.command.workspace import Workspaces; "
        f"w = Workspaces(Path({str(tmp_path / 'c')!r}), uid_base=62000); "
        "print(w.create(1, template=None, files=lambda s: {}).uid)"
    )
    taken = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert int(taken.stdout) not in {s.uid for s in spaces}, taken.stderr
    # ...and a freed id is taken again.
    first.remove(spaces[0], keep=False)
    again = second.create({"q": 2}, template=None, files=lambda s: {})
    assert again.uid == spaces[0].uid
    assert not spaces[0].root.exists() and (spaces[1].root / "task.json").exists()
    for space in (spaces[1], again):
        second.remove(space, keep=False)


@pytest.mark.parametrize("keep", [False, True])
def test_a_temporary_base_is_removed_with_its_runner_unless_a_rollout_was_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """Every command agent's setup made a base folder (with the sandbox's scripts) and left it."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    spaces = Workspaces(None, uid_base=None)
    Sandbox(SandboxConfig(backend="process"), spaces.base)  # writes bin/ into the base
    base = spaces.base
    assert base.parent == tmp_path and (base / "bin" / "relay.py").is_file()
    space = spaces.create({"q": 1}, template=None, files=lambda s: {"out.txt": "x"})
    spaces.remove(space, keep=keep)
    del spaces
    gc.collect()
    if keep:  # the kept rollout directory stays readable where the user was told it is
        assert (space.work / "out.txt").read_text() == "x"
        assert not (base / "bin").exists()
    else:
        assert not base.exists()
    # A base the caller gave is the caller's: never removed.
    given = Workspaces(tmp_path / "given", uid_base=None)
    del given
    gc.collect()
    assert (tmp_path / "given").is_dir()
