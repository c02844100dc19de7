"""SFT: supervised fine-tuning on the recorded completion tokens of the agent's best runs.

Importing this package is light (the config only); the torch-based parts live in ``engine``
(the update), ``examples`` (records to token samples) and ``algorithm`` (the rounds).
"""

from __future__ import annotations

from fulmen.algorithms.sft.config import SFTAlgorithmConfig, SFTConfig, StoreFilter, StoreSource

__all__ = ["SFTAlgorithmConfig", "SFTConfig", "StoreFilter", "StoreSource"]
