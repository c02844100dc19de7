"""The Azure capital agent of 0.x v0.3.0 (``examples/azure``): a custom ``Algorithm``.

``capital_agent`` is a ``@rollout`` function calling ``llm.endpoint`` with a lookup tool over
two calls. ``AzureOpenAIFinetune`` is the example's algorithm: each iteration it publishes its
deployment as ``main_llm``, runs a batch of tasks through the store, turns each rollout's spans
into chat messages with the ``TraceToMessages`` adapter, keeps the best-rewarded examples and
fine-tunes on them, then validates. Azure's fine-tuning and deployment are the world's edge:
here ``finetune`` keeps the examples it would upload and ``deploy`` names the next deployment
at the same endpoint. ``main`` is ``train_capital_agent.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from typing import Any

import openai
from fulmen.compat.agentlightning.adapter.messages import OpenAIMessages
from fulmen.compat.agentlightning.algorithm import Algorithm
from fulmen.compat.agentlightning.algorithm.utils import batch_iter_over_dataset
from fulmen.compat.agentlightning.reward import find_final_reward
from fulmen.compat.agentlightning.types import RolloutMode, TaskInput

from fulmen.compat.agentlightning import LLM, TraceToMessages, Trainer, rollout, setup_logging

logger = logging.getLogger("agentlightning.aoai")

CAPITALS = {"japan": "Tokyo", "france": "Paris", "canada": "Ottawa", "kenya": "Nairobi"}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "country_capital_lookup",
            "description": "Get the capital city of a given country.",
            "parameters": {
                "type": "object",
                "properties": {"country": {"type": "string"}},
                "required": ["country"],
            },
        },
    }
]
SYSTEM = "If asked for a country's capital, call country_capital_lookup."


@rollout
def capital_agent(task: dict[str, str], llm: LLM) -> float:
    client = openai.OpenAI(
        base_url=llm.endpoint, api_key=os.environ.get("OPENAI_API_KEY", "token-abc123")
    )
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task["input"]},
    ]
    try:
        first = client.chat.completions.create(
            model=llm.model, messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=8
        )
        msg = first.choices[0].message
        messages.append({"role": "assistant", "content": msg.content or ""})
        lookup = CAPITALS.get(task["input"].split()[-1].strip("?").lower(), "Unknown")
        messages.append({"role": "user", "content": f"The lookup says: {lookup}."})
        second = client.chat.completions.create(model=llm.model, messages=messages, max_tokens=8)
    finally:
        client.close()
    final_text = (second.choices[0].message.content or "").strip()
    return 1.0 if task["output"].lower() in final_text.lower() else 0.0


class AzureOpenAIFinetune(Algorithm):
    def __init__(
        self,
        base_deployment_name: str,
        *,
        azure_openai_endpoint: str,
        finetune_every_n_rollouts: int = 4,
        n_iterations: int = 2,
        data_filter_ratio: float = 0.5,
    ) -> None:
        super().__init__()
        self.azure_openai_endpoint = azure_openai_endpoint
        self.base_deployment_name = base_deployment_name
        self.finetune_every_n_rollouts = finetune_every_n_rollouts
        self.n_iterations = n_iterations
        self.data_filter_ratio = data_filter_ratio
        self.uploaded: list[list[dict[str, Any]]] = []
        self.val_rewards: list[list[float]] = []

    async def run(
        self,
        train_dataset: list[TaskInput] | None = None,
        val_dataset: list[TaskInput] | None = None,
    ) -> None:
        if train_dataset is None or val_dataset is None:
            raise ValueError("Both train_dataset and val_dataset must be provided")
        resources = LLM(endpoint=self.azure_openai_endpoint, model=self.base_deployment_name)
        store = self.get_store()
        data_iterator = batch_iter_over_dataset(train_dataset, self.finetune_every_n_rollouts)
        for i_iteration in range(self.n_iterations):
            tasks = next(data_iterator)
            await store.add_resources({"main_llm": resources})
            messages_group, reward_group = await self.batch_rollout_and_collect_data(tasks, "train")
            training_data = self.prepare_data_for_training(messages_group, reward_group)
            self.finetune(training_data)
            resources = self.deploy_finetuned_model(i_iteration + 1)
            _, val_reward_group = await self.batch_rollout_and_collect_data(val_dataset, "val")
            self.val_rewards.append(val_reward_group)

    async def batch_rollout_and_collect_data(
        self, tasks: Any, rollout_mode: RolloutMode = "train"
    ) -> tuple[list[OpenAIMessages], list[float]]:
        results = await asyncio.gather(
            *(self.rollout_and_collect_data(task, mode=rollout_mode) for task in tasks)
        )
        messages_group: list[OpenAIMessages] = []
        reward_group: list[float] = []
        for messages_list, reward_value in results:
            messages_group.extend(messages_list)
            reward_group.extend([reward_value] * len(messages_list))
        return messages_group, reward_group

    async def rollout_and_collect_data(
        self, task: TaskInput, mode: RolloutMode
    ) -> tuple[list[OpenAIMessages], float]:
        store = self.get_store()
        rollout = await store.enqueue_rollout(input=task, mode=mode)
        while True:
            completed = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0.0)
            if completed:
                if completed[0].status != "succeeded":
                    logger.error(
                        "Rollout %s finished with status %s",
                        rollout.rollout_id,
                        completed[0].status,
                    )
                break
            await asyncio.sleep(0.05)
        spans = await store.query_spans(rollout_id=rollout.rollout_id, attempt_id="latest")
        try:
            adapter = self.get_adapter()
        except ValueError:
            adapter = TraceToMessages()
            self.set_adapter(adapter)
        if not isinstance(adapter, TraceToMessages):
            raise RuntimeError("AzureOpenAIFinetune requires a TraceToMessages adapter.")
        messages_list = adapter.adapt(spans)
        for messages in messages_list:
            for message in messages["messages"]:
                if "content" in message and message["content"] is None:
                    message.pop("content")
        reward_value = find_final_reward(spans)
        return messages_list, 0.0 if reward_value is None else reward_value

    def prepare_data_for_training(
        self, messages_group: list[OpenAIMessages], reward_group: list[float]
    ) -> list[dict[str, Any]]:
        examples = [
            {"messages": m["messages"], "reward": r, "reward_jitter": random.uniform(0, 1)}
            for m, r in zip(messages_group, reward_group, strict=True)
        ]
        examples.sort(key=lambda e: (e["reward"], e["reward_jitter"]), reverse=True)
        return examples[: max(1, int(len(examples) * self.data_filter_ratio))]

    def finetune(self, training_data: list[dict[str, Any]]) -> None:
        # Azure's upload and fine-tuning job: the JSONL lines it would receive.
        self.uploaded.append([json.loads(json.dumps(e)) for e in training_data])

    def deploy_finetuned_model(self, version: int) -> LLM:
        # Azure's new deployment: the same endpoint, serving the same model here.
        return LLM(endpoint=self.azure_openai_endpoint, model=self.base_deployment_name)


def main(endpoint: str, train: list[dict[str, str]], val: list[dict[str, str]], **kw: Any) -> Any:
    setup_logging()
    finetune_algo = AzureOpenAIFinetune("tiny", azure_openai_endpoint=endpoint)
    trainer = Trainer(n_runners=2, algorithm=finetune_algo, adapter=TraceToMessages(), **kw)
    trainer.fit(capital_agent, train_dataset=train, val_dataset=val)
    return finetune_algo
