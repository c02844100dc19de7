"""Prompt versions in a store: publish a prompt with its lineage, score it, read the history.

=======================  ==============================================================
``publish_prompt``       store a prompt (with ``PromptTemplate.lineage``) as a new version
``record_scores``        store validation scores of versions (``PromptScore``)
``score_prompt``         run a version on validation tasks through the runners; its score
``run_tasks``            run a version on tasks; each rollout and its reward
``load_prompt_versions`` every distinct prompt version with its lineage and scores
``find_prompt_version``  one version by ``NAME``, ``VERSION`` or ``NAME@VERSION``
``import_prompt``        the ``PromptTemplate`` an agent ships, from ``module:attribute``
=======================  ==============================================================
"""

from __future__ import annotations

from fulmen.prompts.evaluation import RolloutOutcome, run_tasks, score_prompt
from fulmen.prompts.loading import import_prompt
from fulmen.prompts.publishing import publish_prompt, record_scores
from fulmen.prompts.versions import (
    PromptVersion,
    find_prompt_version,
    load_prompt_versions,
    prompt_versions_of,
    scores_in,
)

__all__ = [
    "PromptVersion",
    "RolloutOutcome",
    "find_prompt_version",
    "import_prompt",
    "load_prompt_versions",
    "prompt_versions_of",
    "publish_prompt",
    "record_scores",
    "run_tasks",
    "score_prompt",
    "scores_in",
]
