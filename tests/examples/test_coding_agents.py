"""The coding-agent configs (``examples/coding_agents``): the docs' recipes, and their reward.

Each config must be a valid training config on Gemma 3 270M that runs its agent exactly as the
recipe in ``docs/command-agents.md`` says, with the same training settings as the others; the
reward must score the file, the final reply where each agent leaves it, and the exit status.
(Training them takes minutes to an hour each on a CPU: ``benchmarks/coding_agents.py``, figures
in the example's README.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from fulmen.agent.command import CommandAgentConfig, CommandResult
from fulmen.trainer.config import load_config
from tests.examples.loading import EXAMPLES, example_modules

FOLDER = EXAMPLES / "coding_agents"
DOCS = EXAMPLES.parent / "docs" / "command-agents.md"
CONFIGS = sorted(FOLDER.glob("*.yaml"))
NAMES = ("tasks", "reward")


@pytest.fixture
def modules() -> Iterator[dict[str, ModuleType]]:
    """The example's ``tasks`` and ``reward`` (another example's of those names set aside)."""
    aside = {name: sys.modules.pop(name) for name in NAMES if name in sys.modules}
    try:
        with example_modules("coding_agents", *NAMES) as imported:
            yield dict(zip(NAMES, imported, strict=True))
    finally:
        sys.modules.update(aside)


def _documented_recipes() -> dict[str, dict[str, Any]]:
    """The docs' recipes by the program they run (``claude``, ``codex``, ``opencode``, ...)."""
    recipes = DOCS.read_text().split("## Recipes", 1)[1]
    blocks = [block.split("```", 1)[0] for block in recipes.split("```yaml\n")[1:]]
    agents = [yaml.safe_load(block)["agent"] for block in blocks]
    return {Path(agent["command"][0]).name: agent for agent in agents}


def test_every_recipe_has_a_config_that_loads_and_trains_gemma() -> None:
    assert {path.stem for path in CONFIGS} == {
        "claude_code",
        "claude_agent_sdk",
        "codex",
        "opencode",
        "ai_sdk",
        "mini_swe_agent",
    }
    shared: dict[str, Any] | None = None
    for path in CONFIGS:
        config = load_config(path)
        assert config.model == "gemma-3-270m"
        agent = config.agent
        assert isinstance(agent, CommandAgentConfig)
        assert agent.reward_function == "reward:score"
        # One training setup for all; the agent and its max_tokens differ, and mini's group.
        raw = yaml.safe_load(path.read_text())
        same = {key: raw[key] for key in ("data", "engine", "algorithm", "seed", "python_path")}
        same["temperature"] = raw["rollouts"]["train_sampling"]["temperature"]
        if path.stem == "mini_swe_agent":  # a group of four at once (two tied: no signal)
            assert (raw["algorithm"]["group_size"], raw["rollouts"]["concurrency"]) == (4, 4)
            same["algorithm"] = raw["algorithm"] | {"group_size": 2}
            same["engine"] = raw["engine"] | {"max_batch": 2}
        shared = shared or same
        assert same == shared, path.name
        # The update's length limit stays the model's context: every call of these agents trains.
        assert "max_seq_len" not in raw["algorithm"]["grpo"]


def test_the_configs_run_the_documented_recipes() -> None:
    documented = _documented_recipes()
    for stem, program in [
        ("claude_code", "claude"),
        ("codex", "codex"),
        ("opencode", "opencode"),
        ("mini_swe_agent", "mini"),
        ("claude_agent_sdk", "python"),
    ]:
        agent = yaml.safe_load((FOLDER / f"{stem}.yaml").read_text())["agent"]
        recipe = documented[program]
        command = list(recipe["command"])
        if stem == "claude_code":  # the one difference: stream-json, so the reward sees the text
            at = command.index("--output-format") + 1
            command[at : at + 1] = ["stream-json", "--verbose"]
        assert agent["command"] == command, stem
        for key, value in recipe.get("env", {}).items():
            assert agent["env"][key] == value, (stem, key)
        assert agent.get("files", {}) == recipe.get("files", {}), stem
    # The Claude Code recipe's variables are the SDK script's too (it runs Claude Code).
    sdk = yaml.safe_load((FOLDER / "claude_agent_sdk.yaml").read_text())["agent"]
    assert sdk["env"] == documented["claude"]["env"]


def test_train_and_held_out_tasks_do_not_share_a_word(modules: dict[str, ModuleType]) -> None:
    train, held_out = modules["tasks"].train_tasks(), modules["tasks"].val_tasks()
    assert len(train) == 24 and len(held_out) == 8
    assert not {t["expect"] for t in train} & {t["expect"] for t in held_out}
    assert len({t["id"] for t in train + held_out}) == 32
    for task in train + held_out:
        assert task["expect"] in task["prompt"] and task["file"] == "answer.txt"


def _result(workdir: Path, *, stdout: str = "", exit_code: int = 0) -> CommandResult:
    task = {"id": "word-0", "prompt": "...", "file": "answer.txt", "expect": "amber"}
    return CommandResult(
        task=task, exit_code=exit_code, stdout=stdout, stderr="", workdir=workdir, duration_s=1.0
    )


def test_the_reward_scores_the_file_the_reply_and_the_exit(
    modules: dict[str, ModuleType], tmp_path: Path
) -> None:
    score = modules["reward"].score
    # Nothing done, failed: 0.
    empty = score(_result(tmp_path, exit_code=1))
    assert empty == {"reward": 0.0, "file": 0.0, "reply": 0.0, "finished": 0.0}
    # The file and the exact reply (Claude Code's JSON line), finished: 1.
    (tmp_path / "answer.txt").write_text("Amber\n")
    shown = json.dumps({"type": "result", "result": "amber"})
    assert score(_result(tmp_path, stdout=f"noise\n{shown}\n"))["reward"] == pytest.approx(1.0)
    # The Codex CLI's -o last.txt wins over stdout; a near reply earns part of 0.4.
    (tmp_path / "last.txt").write_text("ambr")
    near = score(_result(tmp_path, stdout="amber\n", exit_code=1))
    assert near["file"] == 0.5 and near["finished"] == 0.0
    assert 0.3 < near["reply"] < 0.4
    # Without last.txt or a JSON result: stdout's last non-empty line.
    (tmp_path / "last.txt").unlink()
    (tmp_path / "answer.txt").write_text("basil")
    plain = score(_result(tmp_path, stdout="thinking...\namber\n\n"))
    assert plain == {"reward": pytest.approx(0.5), "file": 0.0, "reply": 0.4, "finished": 0.1}
    # mini-swe-agent's trajectory file: its submission, else its last assistant message.
    saved = {"info": {"submission": ""}, "messages": [
        {"role": "assistant", "content": "amber"}, {"role": "user", "content": "{...}"},
    ]}  # fmt: skip
    (tmp_path / "trajectory.json").write_text(json.dumps(saved))
    assert score(_result(tmp_path, stdout="Limits exceeded\n"))["reply"] == pytest.approx(0.4)
    # A reply without a tool call is kept only in mini's format-error message (its raw response).
    rejected = {"role": "user", "content": "Tool call error", "extra": {"response": {
        "choices": [{"message": {"role": "assistant", "content": "amber"}}],
    }}}  # fmt: skip
    saved["messages"] = [{"role": "assistant", "content": "basil"}, rejected]
    (tmp_path / "trajectory.json").write_text(json.dumps(saved))
    assert score(_result(tmp_path))["reply"] == pytest.approx(0.4)
    saved["info"]["submission"] = "xyz"
    (tmp_path / "trajectory.json").write_text(json.dumps(saved))
    assert score(_result(tmp_path))["reply"] == 0.0
    # Claude Code's stream-json: the model's last text, not its own "<synthetic>" error note
    # nor the error result after it.
    (tmp_path / "trajectory.json").unlink()
    events = [
        {"type": "assistant", "message": {"model": "m", "content": [
            {"type": "text", "text": "am"},
        ]}},
        {"type": "assistant", "message": {"model": "m", "content": [
            {"type": "text", "text": "amb"}, {"type": "tool_use", "name": "Write"},
            {"type": "text", "text": "er"},
        ]}},
        {"type": "assistant", "message": {"model": "<synthetic>", "content": [
            {"type": "text", "text": "API Error: ..."},
        ]}},
        {"type": "result", "is_error": True, "result": "API Error: ..."},
    ]  # fmt: skip
    stream = "\n".join(json.dumps(event) for event in events)
    assert score(_result(tmp_path, stdout=stream, exit_code=1))["reply"] == pytest.approx(0.4)
    assert score(_result(tmp_path, stdout=json.dumps(events[-1])))["reply"] == 0.0
