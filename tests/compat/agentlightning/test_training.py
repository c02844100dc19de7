"""0.x-style agents trained end to end on the toy task through ``agl.Trainer`` (CPU, tiny model).

Each run is the real stack: SQLite store, built-in engine, gateway, runner, GRPO. The checks
are what 0.x documents: the agent's calls are recorded for its attempt and trained on, the
emitted reward is the rollout's, emitted objects and messages are in the store, and the
VERL config's keys reach fulmen's GRPO.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import RolloutQuery, RolloutStatus
from tests.compat.agentlightning import toy_agents

pytest.importorskip("torch")

TOY = Path(__file__).resolve().parents[3] / "examples" / "toy"
TASKS = [{"id": f"t{i}", "prompt": f"Task {i}: write the letter a."} for i in range(4)]

# A small VERL config as 0.x scripts wrote them, sized for the tiny model.
VERL_CONFIG: dict[str, Any] = {
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "data": {"train_batch_size": 2, "max_prompt_length": 64, "max_response_length": 8},
    "actor_rollout_ref": {
        "rollout": {"n": 4, "name": "vllm", "gpu_memory_utilization": 0.6},
        "actor": {
            "ppo_mini_batch_size": 2,
            "optim": {"lr": 0.01},
            "use_kl_loss": False,
            "entropy_coeff": 0,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
        },
        "model": {"path": "tiny", "lora_rank": 8, "lora_alpha": 16},
    },
    "trainer": {"total_epochs": 1, "val_before_train": True, "logger": ["console"]},
}


def _trainer(tmp_path: Path, **kwargs: Any) -> agl.Trainer:
    return agl.Trainer(
        config=TOY / "config.yaml",
        overrides=[f"run_dir={tmp_path / 'run'}", "validation=null", "data.val=null"],
        **kwargs,
    )


def _spans_by_name(db: Path) -> tuple[list[Any], dict[str, list[Any]]]:
    async def read() -> tuple[list[Any], dict[str, list[Any]]]:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
            page = await store.query_rollouts(RolloutQuery(statuses=[RolloutStatus.SUCCEEDED]))
            names: dict[str, list[Any]] = {}
            for rollout in page.items:
                spans = (await store.query_spans(rollout.rollout_id)).items
                for span in spans:
                    names.setdefault(span.name, []).append(span)
            return page.items, names

    return asyncio.run(read())


@pytest.mark.slow
def test_class_form_async_agent_with_two_resources_trains_under_verl(tmp_path: Path) -> None:
    agent = toy_agents.ToyLitAgent()
    trainer = _trainer(
        tmp_path,
        algorithm=agl.VERL(VERL_CONFIG),
        n_runners=8,
        initial_resources={"prompt_template": toy_agents.TOY_PROMPT},
    )
    history = trainer.fit(agent, TASKS)
    assert agent.trainer is trainer
    # total_epochs 1 over 4 tasks at train_batch_size 2: two steps of 2 tasks x n=4 rollouts
    assert len(history) == 2
    for step in history:
        assert step["transitions"] == 8  # every rollout's one call, recorded for its attempt
        assert step["updated"] in (0.0, 1.0)
    config = trainer.train_config(agent, len(TASKS))
    assert config.algorithm.name == "grpo"
    grpo = config.grpo_config()
    assert (grpo.learning_rate, grpo.lora.r, grpo.clip_high) == (0.01, 8, 0.28)
    assert config.rollouts.concurrency == 8
    rollouts, spans = _spans_by_name(config.run_dir / "store.db")
    assert len(rollouts) == 16
    rewards = spans[semconv.SPAN_REWARD]
    assert len(rewards) == 16
    assert all(r.attributes[semconv.REWARD_SOURCE] == "emit" for r in rewards)
    observations = spans[semconv.SPAN_OBSERVATION]
    objects = [
        json.loads(s.attributes[semconv.OBSERVATION_CONTENT])
        for s in observations
        if s.attributes.get(semconv.OPERATION_NAME) == "object"
    ]
    assert len(objects) == 16 and all(o["mode"] == "train" for o in objects)
    messages = [s for s in observations if s.attributes.get(semconv.OPERATION_NAME) == "message"]
    assert len(messages) == 16


@pytest.mark.slow
def test_decorator_form_named_by_spec_trains_like_fulmen_train(tmp_path: Path) -> None:
    # As `fulmen train` does: the agent named "module:attribute", imported and bridged by the
    # runner; the sync function's returned number is the reward.
    trainer = _trainer(tmp_path)
    spec = "tests.compat.agentlightning.toy_agents:toy_sync_function"
    trainer.overrides += [
        f"agent={spec}",
        "algorithm.steps=1",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
    ]
    config = trainer.train_config()
    from fulmen.trainer.trainer import Trainer as FulmenTrainer

    history = FulmenTrainer(config).fit(None, TASKS)
    assert len(history) == 1 and history[0]["transitions"] == 8
    rollouts, spans = _spans_by_name(config.run_dir / "store.db")
    assert len(rollouts) == 8
    sources = {r.attributes[semconv.REWARD_SOURCE] for r in spans[semconv.SPAN_REWARD]}
    assert sources == {"return"}
