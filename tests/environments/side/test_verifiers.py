"""verifiers through fulmen (run in .venvs/environments): its environments run their own loop.

Tasksets ``vf_addition`` (single turn) and ``vf_turns`` (multi-turn, driven by the env's own
``run``) live beside this file. Proven: the held-out split never shares a task with training,
what cannot be honoured here is refused with its reason, a rubric's functions arrive as named
rewards with their weighted sum as the primary, and a GRPO step on the tiny model stores every
turn of the env's own loop at token level with verifiers' rewards.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers.v1")

from fulmen.agent.context import LLM
from fulmen.environments.config import EnvironmentAdapter, VerifiersConfig
from fulmen.environments.verifiers import VerifiersAgent, verifiers_tasks
from fulmen.errors import ConfigError
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


@pytest.fixture(autouse=True)
def _tasksets_and_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasksets importable by name; uv (verifiers' harness installer) on PATH."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _config(taskset: dict[str, Any], **raw: Any) -> VerifiersConfig:
    env = {"taskset": taskset, "agent": {"harness": {"id": "null"}}}
    config = EnvironmentAdapter.validate_python({"library": "verifiers", "env": env, **raw})
    assert isinstance(config, VerifiersConfig)
    return config


def test_held_out_tasks_come_first_and_are_never_trained() -> None:
    config = _config({"id": "vf_addition", "num_tasks": 30}, train_size=20, val_size=10)
    train, val = verifiers_tasks(config, "train"), verifiers_tasks(config, "val")
    keys = [t["verifiers"]["key"] for t in train + val]
    assert len(set(keys)) == 30
    assert [t["verifiers"]["data"]["idx"] for t in val] == list(range(10))
    with pytest.raises(ConfigError, match="gave 20 train tasks of the 21 asked"):
        verifiers_tasks(
            _config({"id": "vf_addition", "num_tasks": 30}, train_size=21, val_size=10), "train"
        )


def test_a_held_out_taskset_of_its_own() -> None:
    config = _config(
        {"id": "vf_addition", "num_tasks": 8},
        train_size=8,
        val_size=4,
        val_taskset={"split": "test"},
    )
    val = verifiers_tasks(config, "val")
    assert all(t["verifiers"]["env"]["taskset"]["split"] == "test" for t in val)
    assert not {t["verifiers"]["key"] for t in val} & {
        t["verifiers"]["key"] for t in verifiers_tasks(config, "train")
    }


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ({"harness": {"id": "null"}, "runtime": {"type": "docker"}}, "needs a container runtime"),
        ({"harness": {"id": "bash"}}, "runs the model's commands unsandboxed"),
        ({"harness": {"id": "null"}, "model": "gpt-x"}, "pins its own model or client"),
    ],
)
def test_what_cannot_be_honoured_is_refused_with_the_reason(agent: dict, message: str) -> None:
    raw = {"library": "verifiers", "env": {"taskset": {"id": "vf_addition"}, "agent": agent}}
    with pytest.raises(ConfigError, match=message):
        verifiers_tasks(EnvironmentAdapter.validate_python(raw), "train")


def _episode(task: dict[str, Any], script: Script, key: str = "fulmen-no-key") -> dict[str, float]:
    async def run() -> dict[str, float]:
        async with serve_app(create_upstream_app(script)) as url:
            llm = LLM(name="llm", base_url=f"{url}/v1", model="tiny-model", api_key=key)
            return await VerifiersAgent().training_rollout(task, llm)

    return asyncio.run(run())


def test_rubric_functions_are_named_rewards_and_their_weighted_sum_the_primary() -> None:
    (task,) = verifiers_tasks(_config({"id": "vf_addition"}, train_size=1, val_size=0), "train")
    answer = str(task["verifiers"]["data"]["answer"])
    script = Script(default_content=f"It is {answer}, clearly.")
    rewards = _episode(task, script)
    assert rewards == {"correct": 1.0, "brief": 0.0, "reward": 0.75}
    assert len(script.requests) == 1 and script.requests[0]["stream"] is True
    # The rollout's key reaches the endpoint (verifiers' own bearer is its unset variable's).
    assert script.headers[0]["x-api-key"] == "fulmen-no-key"


@pytest.mark.slow
def test_grpo_on_the_tiny_model_with_the_envs_own_multi_turn_loop(tmp_path: Path) -> None:
    from vf_turns import brief_score, repeated_score

    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.trainer import Trainer
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import RolloutQuery, RolloutStatus

    overrides = [
        f"run_dir={tmp_path}",
        "model=tiny",
        "environment.train_size=8",
        "environment.val_size=0",
        "validation=null",
        "algorithm.steps=1",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
        "rollouts.concurrency=8",
        "engine.max_batch=8",
    ]
    config = load_config(ROOT / "examples" / "verifiers" / "config.yaml", overrides=overrides)
    Trainer(config).fit()
    (step,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "time/step_s" in r]
    assert step["rollouts/finished"] == 8 and step["updated"] == 1.0

    async def check() -> Counter[int]:
        turns: Counter[int] = Counter()
        async with open_store(f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None) as s:
            async for rollout in iter_rollouts(s, RolloutQuery(limit=100)):
                assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
                records = await load_attempt(s, rollout.rollout_id)
                turns[len(records.calls)] += 1
                assert all(c.is_token_level and c.choices[0].token_ids for c in records.calls)
                replies = [c.choices[0].text or "" for c in records.calls]
                words = rollout.input["verifiers"]["data"]["words"]
                expected = repeated_score(words, replies) + 0.5 * brief_score(replies)
                assert records.final_reward == pytest.approx(expected)
        return turns

    assert asyncio.run(check()) == {2: 8}  # both user turns of every episode
