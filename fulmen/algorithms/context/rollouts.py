"""``Rollouts`` (``context.rollouts``): publish resources, run tasks, read what they recorded.

A stage publishes a resources version (the served policy as ``llm`` plus the prompt templates
it carries), runs tasks with it through the store -> runner -> gateway path, and reads back the
rollouts' rewards, records (calls and spans) and transitions. Offline algorithms read another
store's rollouts instead, and may keep only the calls sampled from the behaviour policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections import Counter

    from fulmen.algorithms.source import StoreSource
    from fulmen.transitions.credit import CreditFn
    from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
    from fulmen.types import LLMCallCreate, Mode, Resource, Rollout, Trajectory
    from fulmen.types.limits import JsonData

__all__ = ["Rollouts"]


class Rollouts(Protocol):
    """The rollouts of a stage (see the module docstring)."""

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The resources other than ``llm`` that the latest ``publish`` carried (prompts)."""
        ...

    async def publish(
        self,
        resources: Mapping[str, Resource] | None = None,
        *,
        metadata: Mapping[str, JsonData] | None = None,
    ) -> int:
        """Store a new resources version and return its number.

        It holds ``llm`` (the served policy) plus the carried resources updated with
        ``resources``; later stages start from it.
        """
        ...

    async def run(
        self,
        batch: Sequence[tuple[int, Any]],
        *,
        mode: Mode,
        version: int,
        tag: str,
        group_size: int = 1,
    ) -> list[Rollout]:
        """Run ``group_size`` rollouts of each ``(index, task)`` and wait for them.

        They get resources ``version``; ``tag`` names them (unique within the stage: ``s3``,
        ``round2``).
        """
        ...

    async def trajectories(
        self,
        rollouts: Sequence[Rollout],
        options: TransitionOptions,
        *,
        credit: CreditFn | None = None,
    ) -> list[Trajectory]:
        """Build the transitions of each succeeded rollout (failed ones are left out).

        ``credit`` replaces the options' credit strategy (PPO's step rewards).
        """
        ...

    async def attempts(self, rollouts: Sequence[Rollout]) -> list[AttemptRecords]:
        """Read the records (calls and spans) of each succeeded rollout's latest attempt."""
        ...

    async def rewards(self, rollouts: Sequence[Rollout]) -> list[float]:
        """Read the final reward of each rollout (0.0 for a failed one or one without reward)."""
        ...

    async def succeeded(self, mode: Mode) -> list[Rollout]:
        """Read every succeeded rollout of ``mode`` in the run's store (enqueue order).

        Earlier runs and stages are included: an algorithm may learn from them without running
        new ones.
        """
        ...

    async def read_source(self, source: StoreSource) -> list[AttemptRecords]:
        """Read the latest attempt of each rollout of another store that ``source`` keeps.

        The store (kept production traffic, an earlier run, a teacher's) is only read; its
        filter picks succeeded rollouts by mode, task, version, end time, agent and reward,
        at most ``max_rollouts`` of them, in enqueue order.
        """
        ...

    async def behaviour_calls(
        self, source: StoreSource, attempts: Sequence[AttemptRecords], *, temperature: float
    ) -> tuple[list[AttemptRecords], Counter[str]]:
        """Drop the token-level calls of ``attempts`` not sampled from the behaviour policy.

        Each call (of ``source``'s store) is judged on the request its engine got: the
        recorded request with its rollout's sampling fields applied, sampled at
        ``temperature`` with nothing that reshapes the distribution
        (``fulmen.types.behaviour``). Returns the attempts with only the other calls, and how
        many calls were dropped for each reason.
        """
        ...

    async def record_calls(self, calls: Sequence[LLMCallCreate]) -> None:
        """Store LLM call records that belong to no rollout (an optimizer's own model calls)."""
        ...
