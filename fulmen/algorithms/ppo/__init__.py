"""PPO: proximal policy optimization with a learned value function, per call, without groups.

Importing this package is light (the config only); the torch-based parts live in
``value_head``, ``updater`` and ``loop``; ``gae`` holds the pure formulas (GAE, the clipped
value loss, explained variance) and ``rewards`` each call's step reward.
"""

from __future__ import annotations

from fulmen.algorithms.ppo.config import PPOAlgorithmConfig, PPOConfig

__all__ = ["PPOAlgorithmConfig", "PPOConfig"]
