"""A GRPO stage's training rollouts sample the behaviour policy: the config and the resource.

``fulmen train`` refuses a ``train_sampling`` that constrains decoding (the same rule the
gateway applies to the agent's calls), and a ``grpo`` stage publishes an ``llm`` resource whose
``behaviour_modes`` holds ``train``, which is what makes the gateway force and refuse fields.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fulmen.agent.rollouts import RolloutSettings
from fulmen.algorithms.registry import algorithm as registered
from fulmen.errors import ConfigError
from fulmen.store import open_store
from fulmen.trainer.config import load_config
from fulmen.trainer.stage_rollouts import StageRollouts
from fulmen.types import LLMResource, Mode
from tests.trainer.test_config import BASE, write


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ("{response_format: {type: json_object}}", "train_sampling.response_format constrains"),
        ("{guided_choice: [a, b]}", "train_sampling.guided_choice constrains"),
        ("{tool_choice: required}", "train_sampling.tool_choice constrains"),
        ("{repetition_penalty: 1.2}", "train_sampling.repetition_penalty=1.2 changes"),
        ("{logit_bias: {'5': 1.0}}", "train_sampling.logit_bias=.* changes"),
    ],
)
def test_train_sampling_that_constrains_or_reshapes_is_a_config_error(
    tmp_path: Path, sampling: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, BASE + f"rollouts: {{train_sampling: {sampling}}}\n"))


def test_neutral_and_constraint_free_train_sampling_loads(tmp_path: Path) -> None:
    text = "rollouts: {train_sampling: {top_k: -1, logit_bias: {}, response_format: {type: text}}}"
    config = load_config(write(tmp_path, BASE + text + "\n"))
    assert config.rollouts.train_sampling["top_k"] == -1
    # a stage that is not grpo computes no ratio: its train_sampling is its own business
    sft = load_config(
        write(tmp_path, BASE + "algorithm: {name: sft}\nrollouts: {train_sampling: {top_k: 5}}\n")
    )
    assert sft.rollouts.train_sampling == {"top_k": 5}


async def published_llm(
    tmp_path: Path, algorithm: str, *, stage: Any = None, served: str = "policy"
) -> LLMResource:
    """What ``StageRollouts.publish`` stores as ``llm`` for a stage running ``algorithm``.

    ``stage`` is the stage's config (default: the algorithm's defaults); ``served`` the
    model name the engine serves the policy under.
    """
    if stage is None:
        stage = registered(algorithm).config_model().model_validate({})
    async with open_store("memory://", watchdog_interval=None) as store:
        session: Any = SimpleNamespace(
            config=SimpleNamespace(
                run_dir=tmp_path,
                model="tiny",
                plan=lambda: [stage],
                rollouts=RolloutSettings(
                    train_sampling={"temperature": 0.8, "top_p": 1.0},
                    val_sampling={"temperature": 0.0, "top_k": 5},
                ),
            ),
            state=SimpleNamespace(resources={}),
            stack=SimpleNamespace(engine_url="http://engine/v1", store=store),
            policy=SimpleNamespace(models=SimpleNamespace(model_name=served, routes=dict)),
            recorder=None,
        )
        rollouts = StageRollouts(session, index=0, name=algorithm, prefix="run-g0")
        version = await rollouts.publish()
        llm = (await store.get_resources(version)).resources["llm"]
    assert isinstance(llm, LLMResource)
    return llm


async def test_a_grpo_stage_says_its_training_rollouts_sample_the_behaviour_policy(
    tmp_path: Path,
) -> None:
    llm = await published_llm(tmp_path, "grpo")
    assert llm.behaviour_modes == (Mode.TRAIN,)
    assert llm.request_fields("train")["top_k"] == -1
    assert llm.request_fields("val") == {"temperature": 0.0, "top_k": 5}  # validation: as set


@pytest.mark.parametrize("algorithm", ["sft", "apo", "demos"])
async def test_other_stages_publish_no_behaviour_mode(tmp_path: Path, algorithm: str) -> None:
    llm = await published_llm(tmp_path, algorithm)
    assert llm.behaviour_modes == ()
    assert llm.request_fields("train") == {"temperature": 0.8, "top_p": 1.0}


@pytest.mark.parametrize("algorithm", ["ppo", "dpo"])
async def test_untrained_agents_base_routes_only_the_trained_agents_to_the_policy(
    tmp_path: Path, algorithm: str
) -> None:
    config = (
        registered(algorithm)
        .config_model()
        .model_validate({"untrained_agents": "base", "transitions": {"agents": ["writer", "re*"]}})
    )
    llm = await published_llm(tmp_path, algorithm, stage=config, served="policy-3")
    assert llm.model == "tiny"
    assert llm.agent_models == {"writer": "policy-3", "re*": "policy-3"}
    assert [llm.model_for(a) for a in ("writer", "rewriter", "checker", None)] == [
        "policy-3",
        "policy-3",
        "tiny",
        "tiny",
    ]
    # before the first update the engine serves the base model: nothing to route
    before = await published_llm(tmp_path, algorithm, stage=config, served="tiny")
    assert (before.model, before.agent_models) == ("tiny", {})
    default = (
        registered(algorithm).config_model().model_validate({"transitions": {"agents": ["writer"]}})
    )
    llm = await published_llm(tmp_path, algorithm, stage=default, served="policy-3")
    assert (llm.model, llm.agent_models) == ("policy-3", {})
