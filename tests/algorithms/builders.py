"""Transitions for engine tests, with behaviour logprobs taken from the model itself."""

from __future__ import annotations

import torch
from torch import nn

from fulmen.algorithms.policy import token_logprobs
from fulmen.transitions import Transition


def model_logprobs(model: nn.Module, prompt: list[int], completion: list[int]) -> list[float]:
    ids = torch.tensor([prompt + completion])
    positions = torch.arange(len(prompt), len(prompt) + len(completion))
    with torch.no_grad():
        lp, _ = token_logprobs(
            model,
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            rows=torch.zeros_like(positions),
            positions=positions,
        )
    return lp.tolist()


def transition(
    model: nn.Module | None,
    rollout: str,
    prompt: list[int],
    completion: list[int],
    reward: float,
    *,
    task: str | None = "t",
    call_index: int = 0,
    **fields: object,
) -> Transition:
    logprobs = (
        model_logprobs(model, prompt, completion) if model is not None else [-4.0] * len(completion)
    )
    values: dict[str, object] = {
        "rollout_id": rollout,
        "task_id": task,
        "call_index": call_index,
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "logprobs": logprobs,
        "loss_mask": [1] * len(completion),
        "credit_weights": [1.0] * len(completion),
        "reward": reward,
        "rollout_reward": reward,
    }
    values.update(fields)
    return Transition.model_validate(values)


def gradient(model: nn.Module) -> torch.Tensor:
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
            for p in model.parameters()
            if p.requires_grad
        ]
    )
