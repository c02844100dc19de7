"""The Search-R1 recipe (0.x v0.3.0 ``contrib/recipes/search_r1``): a class agent and VERL.

``SearchR1Agent.rollout`` is sync, reads ``resources["main_llm"]``, routes its client with
``get_base_url(rollout_id, attempt_id)``, samples at ``llm.sampling_parameters``' temperature
in training and at ``val_temperature`` in validation, searches over several turns and scores
the answer by exact match. ``train`` is the recipe's: ``agl.VERL(config)`` in
``agl.Trainer(n_runners=32, ...)`` and ``fit`` on records read from parquet (whose list
columns are numpy arrays).
"""

from __future__ import annotations

import os
import re
from copy import deepcopy
from typing import Any, cast

import pandas as pd
from openai import OpenAI

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning import (
    LLM,
    LitAgent,
    NamedResources,
    Rollout,
    configure_logger,
    setup_logging,
)

setup_logging()
logger = configure_logger(name=__name__)

INSTRUCTION = (
    "Answer the question. Search with <search> query </search> if you need to; give the "
    "answer inside <answer> and </answer>. Question: "
)
# The retrieval server the recipe queried over HTTP, as a table.
PASSAGES = {"capital": "Paris is the capital of France.", "river": "The Nile is long."}

RL_TRAINING_CONFIG: dict[str, Any] = {
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "data": {
        "train_files": "data/train.parquet",
        "val_files": "data/test.parquet",
        "train_batch_size": 2,
        "max_prompt_length": 1024,
        "max_response_length": 8,
        "truncation": "error",
    },
    "actor_rollout_ref": {
        "rollout": {
            "tensor_model_parallel_size": 1,
            "n": 2,
            "log_prob_micro_batch_size_per_gpu": 4,
            "multi_turn": {"format": "hermes"},
            "name": "vllm",
            "gpu_memory_utilization": 0.5,
            "engine_kwargs": {"vllm": {"enable_auto_tool_choice": True}},
        },
        "actor": {
            "ppo_mini_batch_size": 2,
            "ppo_micro_batch_size_per_gpu": 4,
            "optim": {"lr": 1e-3, "lr_warmup_steps_ratio": 0.95},
            "use_kl_loss": True,
            "kl_loss_type": "low_var_kl",
            "kl_loss_coef": 0.001,
            "entropy_coeff": 0,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.3,
            "fsdp_config": {"param_offload": True, "optimizer_offload": True},
        },
        "ref": {"log_prob_micro_batch_size_per_gpu": 4, "fsdp_config": {"param_offload": True}},
        "model": {
            "path": "tiny",
            "use_remove_padding": True,
            "enable_gradient_checkpointing": False,
            "lora_rank": 8,
            "lora_alpha": 16,
        },
    },
    "trainer": {
        "n_gpus_per_node": 8,
        "val_before_train": True,
        "critic_warmup": 0,
        "logger": ["console", "wandb"],
        "project_name": "AgentLightning",
        "experiment_name": "searchr1",
        "nnodes": 1,
        "test_freq": 10,
        "save_freq": 10,
        "total_epochs": 1,
        "total_training_steps": 1,
        "default_local_dir": "checkpoints/searchr1_checkpoints/",
    },
}


def retrieve_doc(query: str) -> str:
    return " ".join(text for key, text in PASSAGES.items() if key in query.lower())


def extract_action(response: str) -> tuple[str | None, str]:
    match = re.search(r"<(search|answer)>(.*?)</\1>", response, re.DOTALL)
    return (match.group(1), match.group(2).strip()) if match else (None, "")


def compute_score_em(prediction: str, golden_answers: list[str]) -> float:
    action, content = extract_action(prediction)
    if action != "answer":
        return 0.0
    return float(content.lower() in [a.lower() for a in golden_answers])


def call_llm(
    client: OpenAI, model: str, content: str, temperature: float = 1.0, max_tokens: int = 500
) -> str:
    response = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=temperature,
        max_tokens=max_tokens,
    )
    return response.choices[0].message.content or ""


class SearchR1Agent(LitAgent[dict[str, Any]]):
    def __init__(self, val_temperature: float | None = 0.0, max_turns: int = 2) -> None:
        super().__init__()
        self.val_temperature = val_temperature
        self.max_turns = max_turns
        self.seen: list[tuple[str | None, list[str]]] = []

    def rollout(
        self, task: dict[str, Any], resources: NamedResources, rollout: Rollout
    ) -> float | None:
        prompt = INSTRUCTION + task["question"]
        answer_list = cast(list[str], task["golden_answers"])
        self.seen.append((rollout.mode, answer_list))
        llm: LLM = cast(LLM, resources["main_llm"])
        client = OpenAI(
            base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),  # type: ignore[attr-defined]
            api_key=os.environ.get("OPENAI_API_KEY", "token-abc123"),
        )
        if rollout.mode == "train":
            temperature = llm.sampling_parameters.get("temperature", 1.0)
        else:
            temperature = self.val_temperature if self.val_temperature is not None else 0.0
        content = ""
        try:
            for _turn in range(self.max_turns):
                response = call_llm(client, llm.model, prompt + content, temperature=temperature)
                content += response
                action, query = extract_action(response)
                if action == "answer":
                    break
                content += f"\n<information>{retrieve_doc(query)}</information>\n"
        finally:
            client.close()
        reward = compute_score_em(content, answer_list)
        logger.info("[Rollout %s] reward %s", rollout.rollout_id, reward)
        return reward


def config_train_fast() -> dict[str, Any]:
    return deepcopy(RL_TRAINING_CONFIG)


def train(config: dict[str, Any]) -> SearchR1Agent:
    agent = SearchR1Agent()
    algorithm = agl.VERL(config)
    trainer = agl.Trainer(n_runners=32, algorithm=algorithm)
    train_data = pd.read_parquet(config["data"]["train_files"]).to_dict(orient="records")
    val_data = pd.read_parquet(config["data"]["val_files"]).to_dict(orient="records")
    trainer.fit(agent, train_dataset=train_data, val_dataset=val_data)
    return agent
