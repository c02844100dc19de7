"""The whole path learns: sample with the model, record calls, build transitions, train.

A bandit-like task on a tiny random model: the reward of a completion is the fraction of its
tokens equal to a target token id. The model samples its own completions (HF ``generate`` with
the logits recorded, as the gateway records logprobs), fulmen.transitions turns the call records and
reward spans into transitions, and the engine trains a LoRA adapter. A wrong sign or a
misaligned logprob would make the reward fall or stay flat; here it must rise from its starting
level (about 1/vocab) to most of its maximum within a few steps.
"""

from __future__ import annotations

import torch

from fulmen.algorithms.grpo import GRPOConfig, LoraSettings
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.transitions import TransitionOptions, build_trajectory
from fulmen.types import LLMCall, LLMChoice
from tests.transitions.factories import reward_span

from .models import tiny_llama

TARGET = 7
PROMPTS = {"task-a": [1, 10, 11, 12], "task-b": [1, 20, 21, 22]}
SAMPLES_PER_TASK = 8
LENGTH = 8


def _rollouts(engine: GRPOUpdater, step: int) -> tuple[list, float]:
    """Sample every task's group with the policy and return its transitions and mean reward."""
    tasks = [task for task in PROMPTS for _ in range(SAMPLES_PER_TASK)]
    ids = torch.tensor([PROMPTS[task] for task in tasks])
    with torch.no_grad():
        out = engine.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=1.0,
            max_new_tokens=LENGTH,
            min_new_tokens=LENGTH,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    completions = out.sequences[:, ids.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float()
    logprobs = torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    transitions, rewards = [], []
    for k, task in enumerate(tasks):
        rid = f"s{step}-{k}"
        tokens = completions[k].tolist()
        reward = sum(t == TARGET for t in tokens) / LENGTH
        rewards.append(reward)
        record = LLMCall(
            call_id=f"{rid}-c1",
            rollout_id=rid,
            attempt_id=f"{rid}-a",
            prompt_token_ids=PROMPTS[task],
            choices=[LLMChoice(token_ids=tokens, logprobs=logprobs[k].tolist())],
            is_token_level=True,
            response_id=f"{rid}-resp",
            started_at=0.0,
            sequence=1,
        )
        trajectory = build_trajectory(
            rollout_id=rid,
            task_id=task,
            calls=[record],
            spans=[reward_span(2, reward, source="return", rollout_id=rid)],
            options=TransitionOptions(),
        )
        transitions += trajectory.transitions
    return transitions, sum(rewards) / len(rewards)


def test_reward_rises_on_a_tiny_model_with_lora() -> None:
    torch.manual_seed(0)
    config = GRPOConfig(learning_rate=3e-2, lora=LoraSettings(r=8, alpha=16), seed=0)
    engine = GRPOUpdater(tiny_llama(seed=0, vocab=32, init=0.1, hidden=64), config=config)
    curve, gaps = [], []
    for step in range(14):
        transitions, mean_reward = _rollouts(engine, step)
        curve.append(mean_reward)
        metrics = engine.train_step(transitions)
        if metrics["updated"]:
            gaps.append(metrics["logprob_gap"])
    # the trainer recomputes the logprobs the sampler recorded (same weights, on-policy)
    assert gaps and max(gaps) < 1e-4
    start, end = curve[0], sum(curve[-3:]) / 3
    assert start < 0.15, curve
    assert end > 0.6, curve
