"""Training algorithms (GRPO, SFT, demonstrations, ...) and what they share.

Shared: the policy model, micro-batching, checkpoints, LoRA settings and the
``AlgorithmContext`` they run in.
"""

from __future__ import annotations

__all__: list[str] = []
