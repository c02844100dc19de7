"""Environments from the ecosystem as a source of tasks, rollouts and rewards.

One config section (``environment:``, ``fulmen.environments.config``) names a library and
its settings; the trainer draws the section's disjoint train and held-out splits
(``fulmen.environments.tasks``) and runs them with the library's own interaction loop: one
small module per library (``reasoning_gym``, ``verifiers``, ``openenv``, ``textarena``), each
importing its library only when used (``docs/environments.md``).
"""

from __future__ import annotations

__all__: list[str] = []
