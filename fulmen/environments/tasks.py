"""The tasks of an ``environment:`` section's split, from the library that section names.

``TrainConfig`` sets ``data.train`` (and ``data.val``) to ``environment`` for such a section
(``fulmen.environments.config.apply_environment``); the trainer asks this module for them.
"""

from __future__ import annotations

from typing import Any, Literal

from fulmen.environments.config import (
    EnvironmentConfig,
    OpenEnvConfig,
    ReasoningGymConfig,
    TextArenaConfig,
)

__all__ = ["environment_tasks"]


def environment_tasks(config: EnvironmentConfig, split: Literal["train", "val"]) -> list[Any]:
    """Return the tasks of ``split`` (``train`` or ``val``, disjoint) of ``config``'s library."""
    if isinstance(config, ReasoningGymConfig):
        from fulmen.environments.reasoning_gym import reasoning_gym_tasks

        return reasoning_gym_tasks(config, split)
    if isinstance(config, TextArenaConfig):
        from fulmen.environments.textarena import textarena_tasks

        return textarena_tasks(config, split)
    if isinstance(config, OpenEnvConfig):
        from fulmen.environments.openenv import openenv_tasks

        return openenv_tasks(config, split)
    from fulmen.environments.verifiers import verifiers_tasks

    return verifiers_tasks(config, split)
