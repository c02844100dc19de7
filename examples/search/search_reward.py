"""The search example's reward: token F1 of the agent's answer against the gold answer.

Normalised as in SQuAD's evaluation script: lowercase, punctuation and the articles
*a*, *an*, *the* removed, whitespace collapsed. The agent's final message is read by
``final_answer``: the text after the last ``Answer:`` up to the end of that line, or the
first line when there is no ``Answer:``.
"""

from __future__ import annotations

import re
import string
from collections import Counter

__all__ = ["answer_f1", "final_answer", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (SQuAD's normalisation).

    >>> normalize_answer("The  Velora-Labs!")
    'veloralabs'
    """
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    """Token F1 between ``prediction`` and ``gold`` after normalisation (1.0 when both empty).

    >>> answer_f1("Tamin Keshu", "Tamin Kesh")
    0.5
    """
    pred = normalize_answer(prediction).split()
    truth = normalize_answer(gold).split()
    if not pred or not truth:
        return float(pred == truth)
    common = sum((Counter(pred) & Counter(truth)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def final_answer(output: str) -> str:
    """The answer in the agent's final message: after the last ``Answer:``, one line."""
    matches = list(_ANSWER.finditer(output))
    rest = output[matches[-1].end() :] if matches else output
    lines = [line.strip() for line in rest.strip().splitlines()]
    return lines[0] if lines else ""
