"""Training algorithms: the GRPO policy-gradient trainer (and later APO, SFT, baselines)."""

from __future__ import annotations

__all__: list[str] = []
