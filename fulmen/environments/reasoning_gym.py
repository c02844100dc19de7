"""Reasoning Gym: its procedural datasets as tasks, its ``score_answer`` as the reward.

Tasks are drawn from a Reasoning Gym ``CompositeDataset`` (one dataset or several, weighted,
each configured directly or through its curriculum's difficulty levels), the held-out split
first and the training split after it, with every question of the held-out split (and every
repeat) skipped: the two splits cannot share a problem. A task carries the dataset's entry
(``question``, ``answer``, ``metadata``), the name and config of the dataset that made it, and
the built-in agent's settings, so any process can run and score it.

``ReasoningGymAgent`` is the built-in single-turn agent: the system prompt, then the question;
the answer is extracted from the reply (``answer_format``) and scored by the source dataset's
own ``score_answer``. An agent of your own scores with ``score_reply(task, text)``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, cast

from fulmen.agent.api import Agent
from fulmen.environments.chat import chat_client, send_chat
from fulmen.environments.libraries import require
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.agent.context import LLM
    from fulmen.environments.config import ReasoningGymConfig, ReasoningGymDataset

__all__ = [
    "RAW_PROMPT",
    "ReasoningGymAgent",
    "extract_answer",
    "prompt_messages",
    "reasoning_gym_tasks",
    "score_reply",
    "system_prompt_of",
]

#: The system prompt of ``answer_format: raw`` when the config gives none.
RAW_PROMPT = "Answer the question. Reply with the final answer only."

#: How many draws per wanted task before a split is declared too small for its config.
_DRAWS_PER_TASK = 8


def system_prompt_of(config: ReasoningGymConfig) -> str:
    """Return the system prompt the built-in agent sends (the config's, or the default)."""
    if config.system_prompt is not None:
        return config.system_prompt
    if config.answer_format == "raw":
        return RAW_PROMPT
    utils = require("reasoning_gym.utils", extra="reasoning-gym")
    return str(utils.SYSTEM_PROMPTS["default"])


def _dataset_config(name: str, spec: ReasoningGymDataset) -> dict[str, Any]:
    """Return the keyword config of dataset ``name``, its curriculum levels applied."""
    factory = require("reasoning_gym.factory", extra="reasoning-gym")
    if name not in factory.DATASETS:
        known = ", ".join(sorted(factory.DATASETS))
        raise ConfigError(f"reasoning_gym has no dataset {name!r} (it has: {known})")
    config: dict[str, Any] = dict(spec.config)
    if spec.curriculum is not None:
        if not factory.has_curriculum(name):
            raise ConfigError(f"reasoning_gym dataset {name!r} has no curriculum")
        curriculum = factory.create_curriculum(name)
        try:
            if "*" in spec.curriculum:
                for attribute in curriculum.attributes:
                    curriculum.set_attr_level(attribute, spec.curriculum["*"])
            for attribute, level in spec.curriculum.items():
                if attribute != "*":
                    curriculum.set_attr_level(attribute, level)
            generated = curriculum.generate_configuration(defaults=config)
        except (KeyError, ValueError, TypeError) as exc:
            attributes = ", ".join(sorted(curriculum.attributes))
            raise ConfigError(
                f"reasoning_gym {name} curriculum {spec.curriculum}: {exc} (its attributes: "
                f"{attributes})"
            ) from exc
        config = {
            k: v for k, v in dataclasses.asdict(generated).items() if k not in ("seed", "size")
        }
    try:
        json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"reasoning_gym {name} config is not JSON: {exc}") from exc
    return config


def _composite(specs: dict[str, tuple[float, dict[str, Any]]], *, seed: int, size: int) -> Any:
    """Build a Reasoning Gym ``CompositeDataset`` of ``specs`` (name → weight, config)."""
    composite = require("reasoning_gym.composite", extra="reasoning-gym")
    entries = [
        composite.DatasetSpec(name=name, weight=weight, config=dict(config))
        for name, (weight, config) in specs.items()
    ]
    try:
        return composite.CompositeDataset(
            composite.CompositeConfig(size=size, seed=seed, datasets=entries)
        )
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(f"reasoning_gym cannot build its datasets: {exc}") from exc


def _draw(dataset: Any, want: int, skip: set[str], split: str) -> list[dict[str, Any]]:
    """Return the first ``want`` entries whose question is not in ``skip`` (updated)."""
    entries: list[dict[str, Any]] = []
    for index in range(len(dataset)):
        if len(entries) == want:
            break
        entry = dataset[index]
        question = str(entry["question"])
        if question in skip:
            continue
        skip.add(question)
        entries.append(json.loads(json.dumps(entry, default=str)))
    if len(entries) < want:
        raise ConfigError(
            f"reasoning_gym gave only {len(entries)} distinct {split} problems of the "
            f"{want} asked in {len(dataset)} draws (its config makes too few different "
            "questions): lower train_size/val_size or widen the dataset's config"
        )
    return entries


def reasoning_gym_tasks(config: ReasoningGymConfig, split: str) -> list[dict[str, Any]]:
    """Return the tasks of ``split`` (``train`` or ``val``); never a held-out question in train.

    Both splits are drawn each time (the training split skips the held-out questions and the
    worked examples), so the same config gives the same tasks in any process.
    """
    specs = {
        name: (spec.weight, _dataset_config(name, spec))
        for name, spec in config.dataset_specs().items()
    }
    seen: set[str] = set()
    val_seed, examples_seed, train_seed = _split_seeds(config.seed)
    val: list[dict[str, Any]] = []
    if config.val_size:
        size = config.val_size * _DRAWS_PER_TASK + 64
        val = _draw(_composite(specs, seed=val_seed, size=size), config.val_size, seen, "val")
    examples: list[dict[str, str]] = []
    if config.examples:
        size = config.examples * _DRAWS_PER_TASK + 64
        drawn = _draw(
            _composite(specs, seed=examples_seed, size=size), config.examples, seen, "examples"
        )
        examples = [
            {"question": str(e["question"]), "answer": _formatted(str(e["answer"]), config)}
            for e in drawn
        ]
    if split == "val":
        return [_task(config, specs, entry, f"val-{i}", examples) for i, entry in enumerate(val)]
    size = config.train_size * _DRAWS_PER_TASK + 64
    dataset = _composite(specs, seed=train_seed, size=size)
    train = _draw(dataset, config.train_size, seen, "train")
    return [_task(config, specs, entry, f"train-{i}", examples) for i, entry in enumerate(train)]


def _split_seeds(seed: int) -> tuple[int, int, int]:
    """Return the composite seeds of the held-out split, the worked examples, the training split.

    31-bit; Reasoning Gym builds item ``i`` from ``seed + i``, so they lie far apart.
    """
    base = (seed * 1_000_003) % (2**31 - 4_000_000)
    return base + 1_000_000, base + 2_000_000, base + 3_000_000


def _formatted(answer: str, config: ReasoningGymConfig) -> str:
    """Return a worked example's answer as the model should reply it."""
    return answer if config.answer_format == "raw" else f"<answer>{answer}</answer>"


def prompt_messages(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the chat the built-in agent sends for ``task`` (any other trainer sends it too).

    The system prompt, the worked examples as earlier user and assistant turns, the question.
    """
    settings = cast("dict[str, Any]", task.get("agent") or {})
    messages: list[dict[str, Any]] = []
    if settings.get("system_prompt"):
        messages.append({"role": "system", "content": str(settings["system_prompt"])})
    for example in cast("list[dict[str, str]]", settings.get("examples") or []):
        messages.append({"role": "user", "content": example["question"]})
        messages.append({"role": "assistant", "content": example["answer"]})
    messages.append({"role": "user", "content": str(task["question"])})
    return messages


def _task(
    config: ReasoningGymConfig,
    specs: dict[str, tuple[float, dict[str, Any]]],
    entry: dict[str, Any],
    task_id: str,
    examples: list[dict[str, str]],
) -> dict[str, Any]:
    metadata = cast("dict[str, Any]", entry.get("metadata") or {})
    source = str(metadata.get("source_dataset") or next(iter(specs)))
    return {
        "id": task_id,
        "question": entry["question"],
        "answer": entry["answer"],
        "metadata": metadata,
        "reasoning_gym": {"dataset": source, "config": specs[source][1]},
        "agent": {
            "system_prompt": system_prompt_of(config),
            "answer_format": config.answer_format,
            **({"examples": examples} if examples else {}),
        },
    }


def extract_answer(text: str, answer_format: str) -> str | None:
    """Return the answer in a reply: the last ``<answer>`` tag's text, or the whole reply.

    >>> extract_answer("so <answer> 42 </answer>", "tag")
    '42'
    >>> extract_answer("no tag here", "tag") is None
    True
    """
    if answer_format == "raw":
        return text.strip()
    utils = require("reasoning_gym.utils", extra="reasoning-gym")
    found = utils.extract_answer(text, tag_name="answer")
    return None if found is None else str(found)


def _dataset_for(task: dict[str, Any], cache: dict[str, Any] | None = None) -> Any:
    """Return the dataset that scores ``task`` (built once per config with ``cache``)."""
    source = task.get("reasoning_gym")
    if not isinstance(source, dict):
        raise ConfigError("this task has no reasoning_gym source: it is not a Reasoning Gym task")
    source = cast("dict[str, Any]", source)
    key = json.dumps(source, sort_keys=True)
    if cache is not None and key in cache:
        return cache[key]
    factory = require("reasoning_gym.factory", extra="reasoning-gym")
    dataset = factory.create_dataset(str(source["dataset"]), **dict(source["config"]), size=1)
    if cache is not None:
        cache[key] = dataset
    return dataset


def score_reply(task: dict[str, Any], text: str, *, cache: dict[str, Any] | None = None) -> float:
    """Score a reply to ``task`` with its dataset's own ``score_answer`` (after extraction)."""
    settings = cast("dict[str, Any]", task.get("agent") or {})
    answer = extract_answer(text, str(settings.get("answer_format", "tag")))
    entry = {"question": task["question"], "answer": task["answer"], "metadata": task["metadata"]}
    return float(_dataset_for(task, cache).score_answer(answer, entry))


class ReasoningGymAgent(Agent):
    """The built-in Reasoning Gym agent: one call, the system prompt then the question."""

    def __init__(self) -> None:
        self._datasets: dict[str, Any] = {}  # scoring datasets, built once per config

    async def training_rollout(self, task: dict[str, Any], llm: LLM) -> float:  # type: ignore[override]  # by name
        """Ask the question once; the reward is the dataset's score of the extracted answer."""
        async with chat_client(llm) as http:
            reply = await send_chat(http, llm, prompt_messages(task))
        return score_reply(task, reply.text, cache=self._datasets)
