"""The coding agents' tasks: write one word into a file, then reply with it.

Small on purpose: what these examples show is the path (an agent's real 7k-12k-token prompts
served, recorded and trained on Gemma 3 270M), not what a 270M model can learn in two steps.
"""

from __future__ import annotations

from typing import Any

_WORDS = [
    "amber", "basil", "cedar", "delta", "ember", "fable", "glade", "harbor", "iris", "jasper",
    "kelp", "lumen", "maple", "nectar", "onyx", "pebble", "quartz", "raven", "sorrel", "thistle",
    "umber", "velvet", "willow", "xenon", "yarrow", "zephyr", "acorn", "birch", "clover", "dune",
    "fern", "garnet",
]  # fmt: skip


def _task(index: int, word: str) -> dict[str, Any]:
    return {
        "id": f"word-{index}",
        "prompt": f"Write the word {word} into answer.txt, then reply with just that word.",
        "file": "answer.txt",
        "expect": word,
    }


def train_tasks() -> list[dict[str, Any]]:
    """24 tasks, one word each."""
    return [_task(i, word) for i, word in enumerate(_WORDS[:24])]


def val_tasks() -> list[dict[str, Any]]:
    """8 held-out tasks (words not in the training tasks)."""
    return [_task(i, word) for i, word in enumerate(_WORDS[24:], start=24)]
