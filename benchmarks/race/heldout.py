"""The held-out evaluation, the same for both trainers, and the screen of a dataset's base model."""

from __future__ import annotations

import argparse
import collections
import math
import statistics
from pathlib import Path
from typing import Any

from race.settings import SCREEN_RANGE, messages


def evaluate(
    args: argparse.Namespace, heldout: list[dict[str, Any]], adapter: Path | None
) -> dict[str, Any]:
    """Greedy held-out accuracy (score 1) and mean score of the base model with ``adapter``.

    ``correct`` holds each problem's verdict (1: scored 1) in held-out order, so two trainers
    scored on the same problems are compared problem by problem.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fulmen.engines.models import resolve_model
    from fulmen.environments.reasoning_gym import score_reply

    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    scores: list[float] = []
    for start in range(0, len(heldout), 16):
        batch = heldout[start : start + 16]
        prompts = [
            tokenizer.apply_chat_template(messages(t), tokenize=False, add_generation_prompt=True)
            for t in batch
        ]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **encoded,
                max_new_tokens=args.completion_length,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        for task, ids in zip(batch, out[:, encoded["input_ids"].shape[1] :], strict=True):
            scores.append(score_reply(task, tokenizer.decode(ids, skip_special_tokens=True)))
    correct = [int(s >= 1.0) for s in scores]
    return {
        "accuracy": sum(correct) / len(correct),
        "score": statistics.fmean(scores),
        "correct": correct,
    }


def at_mark(points: list[tuple[float, Path]], minute: float) -> Path | None:
    """The adapter after the last step that ended by ``minute`` (``None``: the base model)."""
    done = [path for seconds, path in points if seconds <= minute * 60]
    return done[-1] if done else None


def screen_row(base: dict[str, Any], heldout: list[dict[str, Any]]) -> dict[str, Any]:
    """The base model's accuracy (± SE), whether it suits the race, and the majority baseline.

    The majority baseline is the accuracy of answering every problem with the commonest answer.
    """
    from fulmen.environments.reasoning_gym import score_reply

    p, n = base["accuracy"], len(heldout)
    low, high = SCREEN_RANGE
    answers = collections.Counter(str(t["answer"]) for t in heldout)
    common = answers.most_common(1)[0][0]
    wrap = "{}" if heldout[0]["agent"]["answer_format"] == "raw" else "<answer>{}</answer>"
    majority = sum(score_reply(t, wrap.format(common)) >= 1.0 for t in heldout) / n
    return {
        "accuracy": p,
        "se": math.sqrt(p * (1 - p) / n),
        "score": base["score"],
        "problems": n,
        "majority": majority,
        "in_range": low <= p <= high,
    }
