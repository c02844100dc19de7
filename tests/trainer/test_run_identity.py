"""A run folder knows what it is: another agent's (model's, data's) config is refused there before
anything starts, ``--resume-anyway`` goes on, changed hyperparameters are a new config version,
and a finished run still checks its data. None of these start the engine: a refused or finished
run stops before it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.trainer.config import TrainConfig, load_config
from fulmen.trainer.identity import (
    IdentityMismatch,
    check_run_folder,
    record_start,
    run_identity,
    run_settings,
)
from fulmen.trainer.state import RunState
from fulmen.trainer.trainer import Trainer

AGENT = """
import fulmen


@fulmen.rollout
async def rollout(task, llm):
    return 1.0
"""

CONFIG = """\
model: tiny
agent: {module}:rollout
python_path: ["."]
run_dir: shared
data: {{train: {tasks}}}
algorithm: {{steps: 2, tasks_per_step: 1, group_size: 2}}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """Two agents, two task files and a config for each, all in one folder (``run_dir: shared``)."""
    path, modules = list(sys.path), set(sys.modules)
    for name in ("first", "second"):
        (tmp_path / f"identity_{name}.py").write_text(AGENT, encoding="utf-8")
        (tmp_path / f"{name}.jsonl").write_text(f'{{"id": "{name}"}}\n', encoding="utf-8")
        text = CONFIG.format(module=f"identity_{name}", tasks=f"{name}.jsonl")
        (tmp_path / f"{name}.yaml").write_text(text, encoding="utf-8")
    yield tmp_path
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name.startswith("identity_"):
            del sys.modules[name]


def started(config: TrainConfig, *, finished: bool = False) -> RunState:
    """Leave ``config.run_dir`` as a start of ``config`` does (``finished``: every step done)."""
    config.run_dir.mkdir(parents=True, exist_ok=True)
    state = RunState(config.run_dir)
    record_start(state, run_identity(config), run_settings(config), None)
    if finished:
        state.step = state.validated_step = 2  # the configs' algorithm.steps
        (config.run_dir / "metrics.jsonl").touch()
    state.save()
    return state


def test_a_second_agents_config_in_the_first_runs_folder_is_refused_with_what_differs(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = load_config(folder / "first.yaml")
    state = started(first)
    code = main(["train", str(folder / "second.yaml"), "--no-dashboard"])
    error = capsys.readouterr().err
    assert code == 1, error
    assert f"{first.run_dir} holds another run (run {state.run_id}, 0 steps done)" in error
    assert "agent: the run has 'identity_first:rollout', this config 'identity_second:rollout'" in (
        error
    )
    assert f"data.train: the run has '{folder / 'first.jsonl'}', this config" in error
    assert "--set run_dir=" in error and "--resume-anyway" in error
    # Refused before anything started: no engine log, no store, the run's record unchanged.
    assert sorted(p.name for p in first.run_dir.iterdir()) == ["state.json"]
    assert RunState(first.run_dir).identity == run_identity(first).model_dump()


def test_resume_anyway_goes_on_with_the_other_config(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started(load_config(folder / "first.yaml"), finished=True)
    second = ["train", str(folder / "second.yaml"), "--no-dashboard"]
    assert main(second) == 1
    with pytest.raises(IdentityMismatch):
        Trainer(load_config(folder / "second.yaml")).fit()
    capsys.readouterr()
    # Past the refusal, this finished run has nothing left to do (no engine starts for it).
    assert main([*second, "--resume-anyway"]) == 0
    assert "done: 0 steps in this run" in capsys.readouterr().out
    assert Trainer(load_config(folder / "second.yaml"), resume_anyway=True).fit() == []


def test_changed_hyperparameters_resume_as_a_new_config_version(folder: Path) -> None:
    first = load_config(folder / "first.yaml")
    state = started(first)
    state.step = 1
    changed = load_config(
        folder / "first.yaml", overrides=["algorithm.grpo.learning_rate=0.5", "seed=7"]
    )
    identity, settings = run_identity(changed), run_settings(changed)
    change = check_run_folder(state, identity, settings)
    assert change is not None
    assert (change.version, change.step) == (2, 1)
    assert change.keys == ["algorithm.grpo.learning_rate", "seed"]
    assert "changed settings (algorithm.grpo.learning_rate, seed)" in change.line(first.run_dir)
    record_start(state, identity, settings, change)
    state.save()
    again = RunState(first.run_dir)
    assert again.config_version == 2 and again.settings == settings
    # The same settings again (the same folder moved elsewhere too) are no change.
    assert check_run_folder(again, identity, settings) is None
    moved = changed.model_copy(update={"run_dir": folder / "elsewhere"})
    assert check_run_folder(again, run_identity(moved), run_settings(moved)) is None


def test_a_run_folder_from_before_identities_is_adopted(folder: Path) -> None:
    first = load_config(folder / "first.yaml")
    first.run_dir.mkdir()
    (first.run_dir / "state.json").write_text('{"run_id": "old", "step": 1}', encoding="utf-8")
    state = RunState(first.run_dir)
    assert check_run_folder(state, run_identity(first), run_settings(first)) is None


def test_a_finished_run_whose_tasks_file_is_missing_fails(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started(load_config(folder / "first.yaml"), finished=True)
    (folder / "first.jsonl").unlink()
    assert main(["train", str(folder / "first.yaml"), "--no-dashboard"]) == 1
    error = capsys.readouterr().err
    assert f"cannot read tasks from {folder / 'first.jsonl'}" in error
