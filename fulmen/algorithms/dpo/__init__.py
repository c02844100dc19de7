"""DPO: direct preference optimization on pairs of the agent's own better and worse runs.

Importing this package is light (the config only); the torch-based parts live in ``loss``,
``updater`` and ``loop`` (the steps); ``pairs`` builds the preference pairs from transitions.
"""

from __future__ import annotations

from fulmen.algorithms.dpo.config import DPOAlgorithmConfig, DPOConfig

__all__ = ["DPOAlgorithmConfig", "DPOConfig"]
