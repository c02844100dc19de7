"""``algorithm: dpo`` parses through the training config, with the run's seed and sources."""

from __future__ import annotations

import pytest

from fulmen.algorithms.dpo import DPOAlgorithmConfig, DPOConfig
from fulmen.trainer.config import TrainConfig


def _train(**fields: object) -> TrainConfig:
    data: dict[str, object] = {"model": "tiny", "agent": "a:b", "data": {"train": "a:b"}}
    data.update(fields)
    return TrainConfig.model_validate(data)


def test_the_name_alone_selects_dpo_with_its_defaults() -> None:
    config = _train(algorithm="dpo", seed=7)
    assert isinstance(config.algorithm, DPOAlgorithmConfig)
    assert config.algorithm.min_margin == 0.5
    settings = config.algorithm.update_config(seed=config.seed)
    assert (settings.beta, settings.label_smoothing, settings.seed) == (0.1, 0.0, 7)
    assert settings.finetune == "lora"
    pinned = DPOAlgorithmConfig(dpo=DPOConfig(seed=3)).update_config(seed=7)
    assert pinned.seed == 3


def test_data_from_store_becomes_the_source() -> None:
    config = TrainConfig.model_validate(
        {"model": "tiny", "data": {"from_store": "sqlite:///x.db"}, "algorithm": "dpo"}
    )
    assert isinstance(config.algorithm, DPOAlgorithmConfig)
    assert config.algorithm.source is not None
    assert config.algorithm.source.store == "sqlite:///x.db"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"name": "dpo", "dpo": {"beta": 0}}, "beta"),
        ({"name": "dpo", "dpo": {"label_smoothing": 0.5}}, "label_smoothing"),
        ({"name": "dpo", "dpo": {"finetune": "full"}}, "finetune"),
        ({"name": "dpo", "group_size": 1}, "group_size"),
        ({"name": "dpo", "min_margin": -1}, "min_margin"),
        ({"name": "dpo", "transitions": {"gamma": 0.9}}, "gamma"),
    ],
)
def test_bad_options_are_refused(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _train(algorithm=section)


def test_a_source_has_no_groups_to_size() -> None:
    with pytest.raises(ValueError, match="group_size has no effect with a source store"):
        TrainConfig.model_validate(
            {
                "model": "tiny",
                "data": {"from_store": "sqlite:///x.db"},
                "algorithm": {"name": "dpo", "group_size": 4},
            }
        )
