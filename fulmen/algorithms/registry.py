"""The algorithms fulmen runs, one row each: everything else that lists them derives from here.

A row names the algorithm's config model (an ``AlgorithmSection`` with ``name:
Literal["..."]``), its run function (imported only when that algorithm runs, so the
torch-heavy modules load only for it), a one-line summary for ``fulmen train --help`` and what
it can do without importing anything: whether it trains weights (else it only publishes prompts
and may run against any endpoint) and whether it learns from a store's recorded rollouts
(``data.from_store``). What the trainer asks of a configured stage is declared by its config
model (``fulmen.algorithms.section``). The config's ``algorithm:``/``stages:`` union, the stage
runner's dispatch, the "available: ..." messages, the CLI help and the deployment planner all
read :func:`registered`.

The built-in rows are :data:`ALGORITHMS`; an installed distribution adds its own under the
``fulmen.algorithms`` entry-point group, each entry naming an :class:`Algorithm` row
(``toy = "my_package.toy:ALGORITHM"``): adding an algorithm is a package with its config and
run function and one row, here or there (``docs/architecture.md``, "Extending fulmen").

>>> [a.name for a in ALGORITHMS]
['grpo', 'sft', 'dpo', 'ppo', 'apo', 'demos']
>>> sorted(prompt_only())
['apo', 'demos']
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from fulmen.errors import ConfigError
from fulmen.importing import installed_entries

if TYPE_CHECKING:
    from fulmen.algorithms.context import AlgorithmContext
    from fulmen.algorithms.section import AlgorithmSection

__all__ = [
    "ALGORITHMS",
    "DEFAULT",
    "ENTRY_POINT_GROUP",
    "Algorithm",
    "RunFunction",
    "algorithm",
    "available",
    "names",
    "no_update_reason",
    "offline",
    "recorded_algorithm",
    "prompt_only",
    "registered",
]

#: ``run(config, context) -> metrics of each step run now`` (``fulmen.algorithms.context``).
RunFunction = Callable[[Any, "AlgorithmContext"], Awaitable[list[dict[str, float]]]]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: its name, config model, run function and capabilities.

    The config model and the run function are named as ``"module:object"`` and imported when
    asked for, so reading the table (``fulmen --help``) costs no import.

    Attributes:
        name: what ``algorithm.name`` selects it by (its config's ``name`` literal).
        config: ``"module:Class"`` of the pydantic model of its ``algorithm:`` section.
        run: ``"module:function"`` of its run function.
        summary: what it does, in a few words (``fulmen train --help``).
        trains_weights: it updates model weights; ``False``: it only publishes prompts.
        learns_offline: it can learn from a store's recorded rollouts (``data.from_store``).
        explains_no_update: ``"module:function"`` of ``(step metrics, *, store_url) -> str``,
            why a step it logged with ``updated: 0`` took no optimizer step (``fulmen runs
            diagnose``, the dashboard's run page); ``None``: it gives no reason.
    """

    name: str
    config: str
    run: str
    summary: str
    trains_weights: bool
    learns_offline: bool
    explains_no_update: str | None = None

    def config_model(self) -> type[AlgorithmSection]:
        """Import and return its config model."""
        return cast("type[AlgorithmSection]", _load(self.config))

    def run_function(self) -> RunFunction:
        """Import and return its run function."""
        return cast("RunFunction", _load(self.run))


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm(
        "grpo",
        "fulmen.algorithms.grpo.config:GRPOAlgorithmConfig",
        "fulmen.algorithms.grpo.run:run_grpo",
        "reinforcement learning from the agent's own rollouts (LoRA or full weights)",
        trains_weights=True,
        learns_offline=True,
        explains_no_update="fulmen.algorithms.grpo.diagnose:no_update_reason",
    ),
    Algorithm(
        "sft",
        "fulmen.algorithms.sft.config:SFTAlgorithmConfig",
        "fulmen.algorithms.sft.algorithm:run_sft",
        "fine-tuning on the agent's best rollouts (rejection sampling)",
        trains_weights=True,
        learns_offline=True,
    ),
    Algorithm(
        "dpo",
        "fulmen.algorithms.dpo.config:DPOAlgorithmConfig",
        "fulmen.algorithms.dpo.loop:run_dpo",
        "preference optimization: each group's best rollout against its worst (LoRA)",
        trains_weights=True,
        learns_offline=True,
    ),
    Algorithm(
        "ppo",
        "fulmen.algorithms.ppo.config:PPOAlgorithmConfig",
        "fulmen.algorithms.ppo.loop:run_ppo",
        "policy optimization with a learned value function: GAE over each rollout's calls (LoRA)",
        trains_weights=True,
        learns_offline=False,
    ),
    Algorithm(
        "apo",
        "fulmen.algorithms.apo.config:APOConfig",
        "fulmen.algorithms.apo.algorithm:run_apo",
        "automatic prompt optimization (textual gradients, beam search)",
        trains_weights=False,
        learns_offline=False,
    ),
    Algorithm(
        "demos",
        "fulmen.algorithms.demos.config:DemosConfig",
        "fulmen.algorithms.demos.optimizer:run_demos",
        "few-shot demonstrations bootstrapped from the agent's own successful runs",
        trains_weights=False,
        learns_offline=False,
    ),
)

#: The algorithm of a config that names none (``algorithm:`` left out or without ``name``).
DEFAULT = "grpo"
#: The entry-point group through which installed distributions add algorithms.
ENTRY_POINT_GROUP = "fulmen.algorithms"


@functools.cache
def registered() -> tuple[Algorithm, ...]:
    """Return every algorithm: the built-in rows, then those installed distributions add.

    Read once per process (the installed distributions do not change under it).

    Raises:
        ConfigError: an entry point does not load, is not an ``Algorithm``, or reuses a name.
    """
    rows = list(ALGORITHMS)
    for label, row in installed_entries(ENTRY_POINT_GROUP, Algorithm, what="algorithm"):
        if any(r.name == row.name for r in rows):
            raise ConfigError(f"{label} reuses the name {row.name!r}")
        rows.append(row)
    return tuple(rows)


def prompt_only() -> frozenset[str]:
    """Return the algorithms that publish prompts and never weights."""
    return frozenset(a.name for a in registered() if not a.trains_weights)


def offline() -> tuple[str, ...]:
    """Return the algorithms that can learn from a store's recorded rollouts."""
    return tuple(a.name for a in registered() if a.learns_offline)


def names() -> tuple[str, ...]:
    """Return the algorithms' names, in the table's order."""
    return tuple(a.name for a in registered())


def available() -> str:
    """Return the algorithms' names, comma-separated, for messages."""
    return ", ".join(names())


def algorithm(name: str) -> Algorithm:
    """Return the algorithm called ``name``.

    Raises:
        ConfigError: no algorithm has that name.
    """
    for entry in registered():
        if entry.name == name:
            return entry
    raise ConfigError(f"no algorithm named {name!r} (available: {available()})")


def no_update_reason(
    name: str | None, metrics: Mapping[str, float], *, store_url: str = "STORE_URL"
) -> str:
    """Say why a step algorithm ``name`` logged (``None``: the default) made no update.

    The algorithm's own explanation (``Algorithm.explains_no_update``) from the step's
    ``metrics``; an algorithm that gives none, or one no longer installed, is named instead.
    """
    name = name or DEFAULT
    row = next((a for a in registered() if a.name == name), None)
    if row is None or row.explains_no_update is None:
        return f"the {name} step took no optimizer step ({name} gives no reason for it)"
    explain = _load(row.explains_no_update)
    return str(explain(metrics, store_url=store_url))


def recorded_algorithm(config: Mapping[str, Any]) -> str | None:
    """Return the algorithm of a run's recorded config (its first stage's with ``stages``)."""
    stages = config.get("stages")
    section = stages[0] if isinstance(stages, list) and stages else config.get("algorithm")
    if isinstance(section, str):
        return section
    name = section.get("name") if isinstance(section, Mapping) else None
    return name if isinstance(name, str) else None
