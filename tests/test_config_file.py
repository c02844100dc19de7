"""A config's relative paths: each section resolves its own against the file's folder, and a
path given with ``--set`` stays relative to the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.agent.command.config import CommandAgentConfig
from fulmen.config_file import ConfigFile
from fulmen.trainer.config import TrainConfig, load_config

CONFIG = """
model: tiny
agent: {command: ["true"]}
run_dir: out
python_path: [src, /abs/src]
data: {train: tasks/train.jsonl, val: tasks/val.jsonl}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    path = folder / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def test_paths_the_file_writes_are_relative_to_its_folder(config_path: Path) -> None:
    folder = config_path.parent
    config = load_config(config_path)
    assert config.run_dir == folder / "out"
    assert config.python_path == [folder / "src", Path("/abs/src")]
    assert config.data.train == str(folder / "tasks/train.jsonl")
    assert config.data.val == str(folder / "tasks/val.jsonl")
    assert isinstance(config.agent, CommandAgentConfig)
    assert config.agent.folder == folder


def test_paths_given_with_set_are_relative_to_the_current_directory(config_path: Path) -> None:
    folder = config_path.parent
    config = load_config(
        config_path,
        overrides=["run_dir=elsewhere", "data.val=mine.jsonl", "python_path=[here]"],
    )
    assert config.run_dir == Path("elsewhere")
    assert config.python_path == [Path("here")]
    assert config.data.val == "mine.jsonl"
    assert config.data.train == str(folder / "tasks/train.jsonl")  # not overridden
    # A whole section given on the command line is the command line's: nothing in it is moved.
    config = load_config(
        config_path, overrides=['agent={command: ["true"]}', "data={train: t.jsonl}"]
    )
    assert config.data.train == "t.jsonl"
    assert isinstance(config.agent, CommandAgentConfig)
    assert config.agent.folder == Path.cwd().resolve()
    # A key beside config_dir leaves the file's folder in place.
    config = load_config(config_path, overrides=['agent.env={A: "1"}'])
    assert isinstance(config.agent, CommandAgentConfig)
    assert config.agent.folder == folder


def test_a_config_validated_without_a_file_keeps_its_paths() -> None:
    raw = {"model": "tiny", "agent": "a:b", "run_dir": "out", "data": {"train": "t.jsonl"}}
    config = TrainConfig.model_validate(raw)
    assert config.run_dir == Path("out")
    assert config.data.train == "t.jsonl"


def test_written_covers_the_key_and_every_section_holding_it() -> None:
    file = ConfigFile(folder=Path("/cfg"), stem="c", given=frozenset({"data", "agent.env"}))
    assert not file.written("data.train")
    assert file.written("agent.config_dir")
    assert file.written("run_dir")
    assert file.resolve("run_dir", "out") == "/cfg/out"
    assert file.resolve("data.train", "t.jsonl") == "t.jsonl"
    assert file.resolve("run_dir", "/abs") == "/abs"
