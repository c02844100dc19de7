"""``algorithm: apo`` settings: the calc example loads, and bad endpoints are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fulmen.algorithms.apo import APOConfig
from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config

CALC = Path(__file__).resolve().parents[3] / "examples" / "calc"


def test_the_calc_example_config_loads() -> None:
    (stage,) = load_config(CALC / "apo.yaml").plan()
    assert isinstance(stage, APOConfig)
    assert (stage.rounds, stage.selection, stage.score_tasks) == (2, "beam", 12)
    assert stage.critic.base_url is None and stage.editor_endpoint().sampling["max_tokens"] == 96


def test_a_hosted_critic_needs_a_model_and_a_key_variable_name() -> None:
    with pytest.raises(ValidationError, match=r"critic\.model is needed"):
        APOConfig(critic={"base_url": "https://api.example/v1"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="api_key_env"):
        APOConfig(critic={"base_url": "https://x/v1", "model": "m", "api_key_env": "sk-123"})  # type: ignore[arg-type]


def test_initial_must_name_a_prompt_template() -> None:
    with pytest.raises(ConfigError, match="is a str, not a fulmen PromptTemplate"):
        APOConfig(initial="fulmen.types.prompt:PROMPT_SCORES_KEY").initial_prompt()
    with pytest.raises(ConfigError, match="carries no prompt named 'prompt'"):
        APOConfig().initial_prompt()
