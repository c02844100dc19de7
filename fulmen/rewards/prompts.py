"""The judge's prompts and the strict parsing of its answers (pure: no network, no store).

A rubric call asks for ``{"scores": {"<criterion>": <number>, ...}}``: every ``question``
criterion exactly once, each a number from 0 to the scale. A ranking call labels the group's
rollouts ``R1``..``Rn`` and asks for ``{"ranking": ["R3", "R1", ...]}``, best first: a
permutation of the labels. Either answer may add ``"reasoning": "<text>"`` and may be wrapped
in one Markdown code fence; anything else is a ``FormatError`` saying what was wrong.

>>> parse_scores('{"scores": {"goal": 8}}', names=["goal"], scale=10)
{'goal': 0.8}
>>> parse_ranking('{"ranking": ["R2", "R1", "R3"]}', size=3)
[0.5, 1.0, 0.0]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from fulmen.rewards.config import Criterion, JudgeConfig

__all__ = [
    "FormatError",
    "labels",
    "parse_ranking",
    "parse_scores",
    "ranking_messages",
    "retry_messages",
    "rubric_messages",
]

Messages = list[dict[str, str]]

_REASONING = "reasoning"


class FormatError(ValueError):
    """The judge's answer is not the JSON object its prompt asked for (the message says why)."""


def labels(size: int) -> list[str]:
    """Return the labels of a group of ``size`` rollouts in a ranking prompt: ``R1``..``Rn``."""
    return [f"R{i}" for i in range(1, size + 1)]


def _system(judge: JudgeConfig, lines: Sequence[str]) -> str:
    extra = [judge.instructions.strip()] if judge.instructions else []
    return "\n\n".join([*lines[:1], *extra, *lines[1:]])


def rubric_messages(
    judge: JudgeConfig, criteria: Sequence[Criterion], *, task: str, content: str
) -> Messages:
    """Build the pointwise call: score one rollout on every ``question`` criterion."""
    rubric = "\n".join(f"- {c.name}: {c.question}" for c in criteria)
    example = ", ".join(f'"{c.name}": <number>' for c in criteria)
    system = _system(
        judge,
        [
            "You are a strict evaluator. You score one finished run of an AI agent on a task "
            "against a rubric.",
            f"Score each criterion with a number from 0 (not met at all) to {judge.scale} "
            f"(fully met).\n\nCriteria:\n{rubric}",
            f'Answer with only a JSON object: {{"reasoning": "<one short paragraph>", '
            f'"scores": {{{example}}}}}, with every criterion above and no other.',
        ],
    )
    user = f"Task:\n{task}\n\nThe agent's run:\n{content}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def ranking_messages(
    judge: JudgeConfig, criterion: Criterion, *, task: str, contents: Sequence[str]
) -> Messages:
    """Build the group call: rank the rollouts (``R1``..``Rn``) on ``criterion``."""
    names = labels(len(contents))
    system = _system(
        judge,
        [
            f"You are a strict evaluator. You compare {len(contents)} finished runs of an AI "
            "agent on the same task and rank them from best to worst.",
            f"Criterion: {criterion.rank}",
            'Answer with only a JSON object: {"reasoning": "<one short paragraph>", '
            f'"ranking": [<labels, best first>]}}, listing each of {", ".join(names)} exactly '
            "once (no ties).",
        ],
    )
    runs = "\n\n".join(
        f"=== {name} ===\n{text}" for name, text in zip(names, contents, strict=True)
    )
    user = f"Task:\n{task}\n\nThe runs:\n\n{runs}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def retry_messages(messages: Messages, answer: str, problem: str) -> Messages:
    """Build the one retry after a format error: the bad answer and what was wrong with it."""
    return [
        *messages,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"That answer cannot be used: {problem}. Answer again with only the JSON "
            "object asked for.",
        },
    ]


def _object(answer: str, key: str) -> Any:
    text = answer.strip()
    if text.startswith("```"):
        first, _, rest = text.partition("\n")
        if not rest.rstrip().endswith("```") or " " in first.strip("`"):
            raise FormatError("an unclosed code fence")
        text = rest.rstrip()[:-3]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise FormatError(f"a JSON {type(value).__name__}, not an object")
    extra = sorted(set(value) - {key, _REASONING})
    if extra:
        raise FormatError(f"unexpected keys {extra} (only {key!r} and {_REASONING!r})")
    if key not in value:
        raise FormatError(f"no {key!r} key")
    return value[key]


def parse_scores(answer: str, *, names: Sequence[str], scale: int) -> dict[str, float]:
    """Read a rubric answer: each criterion's score divided by ``scale`` (in [0, 1])."""
    scores = _object(answer, "scores")
    if not isinstance(scores, dict):
        raise FormatError('"scores" is not an object')
    missing = [n for n in names if n not in scores]
    extra = sorted(set(scores) - set(names))
    if missing or extra:
        raise FormatError(
            f"scores must name exactly {list(names)}; missing {missing}, extra {extra}"
        )
    out: dict[str, float] = {}
    for name in names:
        value = scores[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise FormatError(f"the score of {name!r} is {value!r}, not a number")
        if not 0 <= value <= scale:
            raise FormatError(f"the score of {name!r} is {value}, outside 0..{scale}")
        out[name] = value / scale
    return out


def parse_ranking(answer: str, *, size: int) -> list[float]:
    """Read a ranking answer: each rollout's score, in group order, ``(n - r) / (n - 1)``."""
    if size < 2:
        raise ValueError(f"a ranking needs at least 2 rollouts, not {size}")
    ranking = _object(answer, "ranking")
    expected = labels(size)
    if not isinstance(ranking, list) or not all(isinstance(x, str) for x in ranking):
        raise FormatError('"ranking" is not a list of labels')
    given = [x.strip() for x in ranking]
    if sorted(given) != sorted(expected):
        raise FormatError(f"the ranking {given} is not an ordering of {expected}, each once")
    rank = {label: r for r, label in enumerate(given, 1)}
    return [(size - rank[label]) / (size - 1) for label in expected]
