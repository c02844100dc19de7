"""Two model versions of a run compared on the same tasks through the runner.

``compare_models`` starts the config's agent on a private stack, loads both versions into its
engine (a LoRA adapter under a name of its own; ``base``: the model before training), runs
every task once with each as a validation rollout and compares the rewards task by task, as
``fulmen ab`` does for prompts (``fulmen.debugging.ab.run_sides``). The engine holds one set of
base weights at a time, so a full-weight version cannot be served beside another: adapters
(and ``base``) only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.debugging.ab import ABResult, config_stack, llm_resource, run_sides
from fulmen.errors import ConfigError, NotFound
from fulmen.types import ModelKind, ModelVersion

if TYPE_CHECKING:
    from fulmen.store.roles import RunLog
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.stack import TrainingStack

__all__ = ["BASE", "compare_models", "find_versions"]

#: The name that stands for the model before training (no adapter, the original weights).
BASE = "base"


async def find_versions(
    store: RunLog, run_id: str, refs: tuple[str, str]
) -> tuple[ModelVersion | None, ModelVersion | None]:
    """Return the run's model versions ``refs`` name (``None`` for ``base``), checked."""
    await store.get_run(run_id)  # NotFound names an unknown run
    versions = await store.list_model_versions(run_id)
    out: list[ModelVersion | None] = []
    for ref in refs:
        if ref == BASE:
            out.append(None)
            continue
        if not ref.isdigit():
            raise ConfigError(f"a model version is a number or {BASE!r}, got {ref!r}")
        found = next((v for v in versions if v.version == int(ref)), None)
        if found is None:
            known = ", ".join(str(v.version) for v in versions) or "none"
            raise NotFound(f"run {run_id!r} has no model version {ref} (its versions: {known})")
        if not Path(found.path).exists():
            raise ConfigError(f"model version {ref} is at {found.path}, not on this machine")
        out.append(found)
    if any(v is not None and v.kind is ModelKind.FULL for v in out):
        raise ConfigError(
            "a full-weight version replaces the engine's base weights, so it cannot be served "
            "beside another version in one engine: compare LoRA adapters, or an adapter and base"
        )
    return out[0], out[1]


async def compare_models(
    config: TrainConfig,
    versions: tuple[ModelVersion | None, ModelVersion | None],
    *,
    labels: tuple[str, str],
    n: int,
    split: str = "val",
) -> ABResult:
    """Run the first ``n`` tasks of ``split`` with each version and compare them (``B - A``)."""
    stack, tasks = config_stack(config, n=n, split=split, log_dir="models-compare")
    async with stack:
        names = [await _serve(stack, config.model, v) for v in versions]
        sides = tuple({"llm": llm_resource(stack, name, config.rollouts)} for name in names)
        return await run_sides(
            stack,
            (sides[0], sides[1]),
            tasks,
            labels=labels,
            rollouts=config.rollouts,
            id_prefix="models",
        )


async def _serve(stack: TrainingStack, base_model: str, version: ModelVersion | None) -> str:
    """Load ``version`` into the stack's engine; return the model name that asks for it."""
    from fulmen.engines.link import EngineLink

    if version is None:
        return base_model
    name = f"{version.run_id}-v{version.version}"
    await EngineLink(stack.engine_url, token=stack.engine_token).serve(version, name)
    return name
