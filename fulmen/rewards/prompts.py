"""The judge's prompts and the strict parsing of its answers (pure: no network, no store).

A rubric call asks for ``{"scores": {"<criterion>": <number>, ...}}``: every ``question``
criterion exactly once, each a number from 0 to the scale. A ranking call labels the group's
rollouts ``R1``..``Rn`` and asks for ``{"ranking": ["R3", "R1", ...]}``, best first: each
label exactly once, and (when ties are allowed) equally good ones together in an inner list,
``["R3", ["R1", "R4"], "R2"]``. Either answer may add ``"reasoning": "<text>"`` and may be
wrapped in one Markdown code fence; anything else is a ``FormatError`` saying what was wrong.

A ranking's scores: rank ``r`` (1 = best) of ``n`` scores ``(n - r) / (n - 1)``, and rollouts
that tie share the mean of the ranks they span (fractional ranking), so a tie of all ``n``
scores 0.5 each. ``copies`` counts a label once per rollout it stands for (identical
rollouts are shown to the judge once, and tie).

>>> parse_scores('{"scores": {"goal": 8}}', names=["goal"], scale=10)
{'goal': 0.8}
>>> parse_ranking('{"ranking": ["R2", "R1", "R3"]}', size=3)
[0.5, 1.0, 0.0]
>>> parse_ranking('{"ranking": [["R1", "R3"], "R2"]}', size=3)
[0.75, 0.0, 0.75]
>>> ranking_scores([[1], [0]], copies=[3, 1])  # R1 stands for three identical rollouts
[0.3333333333333333, 1.0]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, cast

from fulmen.rewards.config import Criterion, JudgeConfig

__all__ = [
    "FormatError",
    "labels",
    "parse_ranking",
    "parse_scores",
    "ranking_messages",
    "ranking_scores",
    "read_ranking",
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
    """Build the group call: rank the rollouts (``R1``..``Rn``) on ``criterion``.

    With ``criterion.ties`` ``equal`` the judge may put equally good runs in one place.
    """
    names = labels(len(contents))
    if criterion.ties == "equal":
        answer = (
            'Answer with only a JSON object: {"reasoning": "<one short paragraph>", '
            f'"ranking": [<labels, best first>]}}, listing each of {", ".join(names)} exactly '
            "once. Runs that are equally good share a place: write them together in an inner "
            'list, as in ["R2", ["R1", "R3"]] (R2 best, R1 and R3 tied after it).'
        )
    else:
        answer = (
            'Answer with only a JSON object: {"reasoning": "<one short paragraph>", '
            f'"ranking": [<labels, best first>]}}, listing each of {", ".join(names)} exactly '
            "once (no ties)."
        )
    system = _system(
        judge,
        [
            f"You are a strict evaluator. You compare {len(contents)} finished runs of an AI "
            "agent on the same task and rank them from best to worst.",
            f"Criterion: {criterion.rank}",
            answer,
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


def read_ranking(answer: str, *, size: int, ties: bool = True) -> list[list[int]]:
    """Read a ranking answer into its places, best first, each the indices of its labels.

    ``ties`` lets a place be an inner list of labels; without it every place is one label.
    """
    if size < 2:
        raise ValueError(f"a ranking needs at least 2 rollouts, not {size}")
    ranking = _object(answer, "ranking")
    expected = labels(size)
    what = "labels and lists of tied labels" if ties else "labels"
    if not isinstance(ranking, list):
        raise FormatError(f'"ranking" is not a list of {what}')
    places: list[list[str]] = []
    for item in cast("list[Any]", ranking):
        if isinstance(item, str):
            places.append([item.strip()])
        elif ties and isinstance(item, list) and item and all(isinstance(x, str) for x in item):
            places.append([x.strip() for x in cast("list[str]", item)])
        else:
            raise FormatError(f'"ranking" is not a list of {what}')
    given = [label for place in places for label in place]
    if sorted(given) != sorted(expected):
        raise FormatError(f"the ranking {given} is not an ordering of {expected}, each once")
    return [[expected.index(label) for label in place] for place in places]


def ranking_scores(places: Sequence[Sequence[int]], *, copies: Sequence[int]) -> list[float]:
    """Score each label of a ranking's ``places`` (see the module docstring), in label order.

    ``copies[i]`` is how many rollouts label ``i`` stands for; they count as tied rollouts.
    """
    total = sum(copies)
    if total < 2:
        raise ValueError(f"a ranking needs at least 2 rollouts, not {total}")
    scores = [0.0] * len(copies)
    before = 0
    for place in places:
        size = sum(copies[i] for i in place)
        mean_rank = before + (size + 1) / 2
        for i in place:
            scores[i] = (total - mean_rank) / (total - 1)
        before += size
    return scores


def parse_ranking(answer: str, *, size: int, ties: bool = True) -> list[float]:
    """Read a ranking answer: each rollout's score, in group order (``ranking_scores``)."""
    return ranking_scores(read_ranking(answer, size=size, ties=ties), copies=[1] * size)
