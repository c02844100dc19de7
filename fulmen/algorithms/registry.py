"""The algorithms fulmen runs, one row each: everything else that lists them derives from here.

A row names the algorithm's config model (``name: Literal["..."]``), its run function (imported
only when that algorithm runs, so the torch-heavy modules load only for it), a one-line summary
for ``fulmen train --help`` and what it can do: whether it trains weights (else it only
publishes prompts and may run against any endpoint) and whether it learns from a store's
recorded rollouts (``data.from_store``). The config's ``algorithm:``/``stages:`` union, the
stage runner's dispatch, the "available: ..." messages, the CLI help and the deployment planner
all read this table. Adding an algorithm is a package under ``fulmen/algorithms/`` with its
config and run function, one row here, and its config in the ``AlgorithmConfig`` union of
``fulmen.trainer.config`` (pydantic needs the union spelled out; a test checks the two agree).

>>> [a.name for a in ALGORITHMS]
['grpo', 'sft', 'dpo', 'ppo', 'apo', 'demos']
>>> sorted(PROMPT_ONLY)
['apo', 'demos']
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from fulmen.algorithms.context import AlgorithmContext

__all__ = [
    "ALGORITHMS",
    "BEHAVIOUR",
    "OFFLINE",
    "PROMPT_ONLY",
    "Algorithm",
    "RunFunction",
    "algorithm",
    "available",
    "names",
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
        samples_behaviour: its training rollouts sample the behaviour policy of its importance
            ratios, so the gateway holds their sampling neutral (``docs/behaviour-policy.md``).
    """

    name: str
    config: str
    run: str
    summary: str
    trains_weights: bool
    learns_offline: bool
    samples_behaviour: bool = False

    def config_model(self) -> type[BaseModel]:
        """Import and return its config model."""
        return cast("type[BaseModel]", _load(self.config))

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
        samples_behaviour=True,
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
        samples_behaviour=True,
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

#: Algorithms that publish prompts and never weights.
PROMPT_ONLY = frozenset(a.name for a in ALGORITHMS if not a.trains_weights)
#: Algorithms whose training rollouts sample the behaviour policy of their importance ratios.
BEHAVIOUR = frozenset(a.name for a in ALGORITHMS if a.samples_behaviour)
#: Algorithms that can learn from a store's recorded rollouts.
OFFLINE = tuple(a.name for a in ALGORITHMS if a.learns_offline)


def names() -> tuple[str, ...]:
    """Return the algorithms' names, in the table's order."""
    return tuple(a.name for a in ALGORITHMS)


def available() -> str:
    """Return the algorithms' names, comma-separated, for messages."""
    return ", ".join(names())


def algorithm(name: str) -> Algorithm:
    """Return the algorithm called ``name``.

    Raises:
        ConfigError: no algorithm has that name.
    """
    for entry in ALGORITHMS:
        if entry.name == name:
            return entry
    raise ConfigError(f"no algorithm named {name!r} (available: {available()})")
