"""The ``transitions:`` rules shared by PPO and DPO's ``untrained_agents: base``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fulmen.algorithms.dpo import DPOAlgorithmConfig
from fulmen.algorithms.ppo import PPOAlgorithmConfig

CONFIGS: list[type[Any]] = [PPOAlgorithmConfig, DPOAlgorithmConfig]


@pytest.mark.parametrize("config", CONFIGS)
def test_by_default_the_policy_serves_every_agent(config: type[Any]) -> None:
    chosen = config(transitions={"agents": ["writer"]})
    assert chosen.policy_agents() is None
    assert chosen.transition_options().names == "call_or_spans"


@pytest.mark.parametrize("config", CONFIGS)
def test_base_serves_the_untrained_agents_by_their_header(config: type[Any]) -> None:
    chosen = config(untrained_agents="base", transitions={"agents": ["write*", "rewrite"]})
    assert chosen.policy_agents() == ("write*", "rewrite")
    # the gateway routed each call by its header: a call is trained only if the policy served it
    assert chosen.transition_options().names == "call"
    assert chosen.transition_options().agents == ("write*", "rewrite")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize(
    ("transitions", "message"),
    [
        ({}, "give those agents"),
        ({"agents": ["*"]}, r"also matches calls without an agent name"),
        ({"agents": ["writer", ""]}, r"also matches calls without an agent name"),
        ({"agents": ["writer"], "names": "call_or_spans"}, r"names must be 'call'"),
    ],
)
def test_base_without_named_agents_is_refused(
    config: type[Any], transitions: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        config(untrained_agents="base", transitions=transitions)


@pytest.mark.parametrize("config", CONFIGS)
def test_an_unknown_choice_is_refused(config: type[Any]) -> None:
    with pytest.raises(ValidationError, match="untrained_agents"):
        config(untrained_agents="none", transitions={"agents": ["writer"]})
