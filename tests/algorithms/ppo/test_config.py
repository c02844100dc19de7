"""``algorithm: ppo``'s options: defaults, refusals, and the run's temperature."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fulmen.algorithms.ppo import PPOAlgorithmConfig, PPOConfig
from fulmen.trainer.config import TrainConfig


def _train(algorithm: object, **extra: object) -> TrainConfig:
    data = {"model": "tiny", "agent": "a:b", "data": {"train": "a:b"}, "algorithm": algorithm}
    data.update(extra)
    return TrainConfig.model_validate(data)


def test_ppo_needs_no_groups_and_fills_the_runs_seed() -> None:
    config = _train("ppo", seed=7).algorithm
    assert isinstance(config, PPOAlgorithmConfig)
    assert config.group_size == 1
    assert config.update_config(seed=7).seed == 7
    assert config.update_config(seed=7).finetune == "lora"
    given = PPOAlgorithmConfig(ppo=PPOConfig(seed=3))
    assert given.update_config(seed=7).seed == 3


def test_the_temperature_is_the_rollouts_sampling_temperature() -> None:
    config = _train("ppo", rollouts={"train_sampling": {"temperature": 0.7}})
    assert isinstance(config.algorithm, PPOAlgorithmConfig)
    assert config.algorithm.ppo.temperature == 0.7
    config = _train({"name": "ppo", "ppo": {"temperature": 0.5}})
    assert config.rollouts.train_sampling["temperature"] == 0.5
    with pytest.raises(ValidationError, match=r"algorithm.ppo.temperature=0.5 differ"):
        _train(
            {"name": "ppo", "ppo": {"temperature": 0.5}},
            rollouts={"train_sampling": {"temperature": 0.7}},
        )


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"transitions": {"credit": "discounted"}}, "transitions.credit has no effect with ppo"),
        ({"transitions": {"merge": True}}, "merge does not work with ppo"),
        ({"data_parallel": {"world_size": 1}}, "greater than or equal to 2"),
        ({"ppo": {"kl_estimator": "k1"}}, "kl_estimator has no effect with kl_coef 0"),
        ({"ppo": {"policy_loss": "nope"}}, "unknown policy_loss 'nope'"),
        ({"ppo": {"gae_lambda": 1.5}}, "less than or equal to 1"),
        ({"source": {"store": "sqlite:///x.db"}}, "Extra inputs are not permitted"),
    ],
)
def test_dead_or_unsupported_options_are_refused(section: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        _train({"name": "ppo", **section})


def test_offline_training_is_refused_with_the_algorithms_that_can() -> None:
    data = {
        "model": "tiny",
        "data": {"from_store": "sqlite:///x.db"},
        "algorithm": "ppo",
    }
    with pytest.raises(ValidationError, match=r"'ppo' cannot learn from data.from_store"):
        TrainConfig.model_validate(data)


def test_data_parallel_updates_are_planned_per_rank() -> None:
    section = _train(
        {"name": "ppo", "data_parallel": {"world_size": 2, "strategy": "fsdp"}}
    ).algorithm
    assert isinstance(section, PPOAlgorithmConfig)
    assert section.data_parallel_settings() == section.data_parallel
    shape = section.update_shape()
    assert (shape.ranks, shape.sharded) == (2, True)
