"""GRPO: group-relative policy optimization over multi-call agent rollouts.

Importing this package is light (the config only); the torch-based parts live in
``advantages``, ``samples`` and ``updater`` (and the shared ``fulmen.algorithms.policy``,
``fulmen.algorithms.losses`` and ``fulmen.algorithms.batching``) and are imported where they are
used.
"""

from __future__ import annotations

from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig, GRPOConfig, LoraSettings

__all__ = ["GRPOAlgorithmConfig", "GRPOConfig", "LoraSettings"]
