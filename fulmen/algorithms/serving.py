"""Handing a weight-training algorithm's new policy to the engine (GRPO, SFT).

``serve_policy`` writes what the engine needs and asks ``context.policy`` to serve it: a LoRA
adapter (``RUN_DIR/adapters/NAME``), hot-loaded under a new name, or with ``finetune: full``
the whole model (``RUN_DIR/weights/NAME``), which the engine reloads in place of its base
weights. ``keep_newest`` bounds the disk when every step writes a full model or checkpoint.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Protocol

from fulmen.algorithms.context import AlgorithmContext

__all__ = ["PolicyWriter", "keep_newest", "serve_policy"]


class PolicyWriter(Protocol):
    """What ``serve_policy`` needs of an updater (``GRPOUpdater``, ``SFTUpdater``)."""

    @property
    def is_full(self) -> bool:
        """Whether every weight is trained (``finetune: full``) rather than a LoRA adapter."""
        ...

    def save_adapter(self, directory: str | Path) -> Path:
        """Write the LoRA adapter in peft's format."""
        ...

    def save_model(self, directory: str | Path) -> Path:
        """Write the whole policy as a Hugging Face model directory."""
        ...


async def serve_policy(
    updater: PolicyWriter,
    context: AlgorithmContext,
    *,
    name: str,
    step: int,
    keep_loaded: int = 1,
    role: str | None = None,
) -> str | None:
    """Save ``updater``'s policy as ``name`` and make the engine serve it from ``step``.

    The one way every loop hands a new policy to the engine. A LoRA adapter goes to
    ``RUN_DIR/adapters/NAME`` and is hot-loaded (the newest ``keep_loaded`` stay loaded);
    full weights go to ``RUN_DIR/weights/NAME`` and the engine reloads them as its base
    weights; with ``role`` (one adapter per role) the adapter goes to
    ``RUN_DIR/adapters/ROLE/NAME`` and is served for that role's calls. Returns the policy
    version the engine serves it under (``context.policy.version``, or the role's).
    """
    if role is not None:
        adapter_dir = context.run.run_dir / "adapters" / role / name
        await asyncio.to_thread(updater.save_adapter, adapter_dir)
        return await context.policy.serve_role_adapter(role, adapter_dir, step)
    if updater.is_full:
        model_dir = context.run.run_dir / "weights" / name
        await asyncio.to_thread(updater.save_model, model_dir)
        await context.policy.serve_weights(model_dir, step)
    else:
        adapter_dir = context.run.run_dir / "adapters" / name
        await asyncio.to_thread(updater.save_adapter, adapter_dir)
        await context.policy.serve_adapter(adapter_dir, step, keep_loaded=keep_loaded)
    return context.policy.version


def keep_newest(folder: Path, *, pattern: str, keep: int = 2) -> None:
    """Delete all but the last ``keep`` directories of ``folder`` matching ``pattern`` (by name).

    Names carry zero-padded step numbers, so the last by name are the newest. Call it after
    ``context.progress.save``, so the state never names a deleted one (it names the newest).
    """
    for old in sorted(folder.glob(pattern))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
