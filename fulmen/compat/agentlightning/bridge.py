"""The fulmen ``Agent`` that runs a 0.x ``LitAgent``: 0.x arguments in, fulmen's result out.

For each attempt it builds what a 0.x rollout method takes from fulmen's ``RolloutContext``:
the task, the named resources (``fulmen.compat.agentlightning.resources.named_resources``) and
an ``AttemptedRollout`` with 0.x's field names, and calls ``training_rollout`` or
``validation_rollout`` (their ``*_async`` forms for async agents) by the rollout's mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from fulmen.agent.api import Agent
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.resources import named_resources
from fulmen.compat.agentlightning.rollouts import AttemptedRollout, rollout_from_fulmen

if TYPE_CHECKING:
    from fulmen.agent.context import RolloutContext

__all__ = ["AsyncLitAgentBridge", "SyncLitAgentBridge", "bridge_for", "rollout_arguments"]


def rollout_arguments(
    agent: Any, context: RolloutContext
) -> tuple[Any, dict[str, Any], AttemptedRollout]:
    """Return the ``(task, resources, rollout)`` a 0.x rollout method gets for this attempt."""
    strip_proxy = bool(getattr(agent, "strip_proxy", False))
    resources = named_resources(context, proxy=not strip_proxy)
    # Given its attempt, rollout_from_fulmen always builds an AttemptedRollout.
    rollout = cast("AttemptedRollout", rollout_from_fulmen(context.rollout, context.attempt))
    return context.task, resources, rollout


def _result(agent: Any, value: Any) -> Any:
    """Pass a reward (or ``None``) on; refuse the 0.x span-list return."""
    if isinstance(value, list | tuple):
        raise NotSupported(
            f"{type(agent).__name__} returning a list of spans",
            why="fulmen records spans itself and reads the reward from emit_reward or a "
            "returned number",
            instead="return the final reward as a float, or call agl.emit_reward(...) and "
            "return None",
        )
    return value


class SyncLitAgentBridge(Agent):
    """Runs a synchronous 0.x agent (fulmen runs it in a worker thread)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def training_rollout(self, context: RolloutContext) -> Any:  # type: ignore[override]
        """Run a training attempt through ``LitAgent.training_rollout``."""
        task, resources, rollout = rollout_arguments(self.agent, context)
        return _result(self.agent, self.agent.training_rollout(task, resources, rollout))

    def validation_rollout(self, context: RolloutContext) -> Any:  # type: ignore[override]
        """Run a validation or test attempt through ``LitAgent.validation_rollout``."""
        task, resources, rollout = rollout_arguments(self.agent, context)
        return _result(self.agent, self.agent.validation_rollout(task, resources, rollout))


class AsyncLitAgentBridge(Agent):
    """Runs an async 0.x agent (fulmen runs it on an event loop)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    async def training_rollout(self, context: RolloutContext) -> Any:  # type: ignore[override]
        """Run a training attempt through ``LitAgent.training_rollout_async``."""
        task, resources, rollout = rollout_arguments(self.agent, context)
        value = await self.agent.training_rollout_async(task, resources, rollout)
        return _result(self.agent, value)

    async def validation_rollout(self, context: RolloutContext) -> Any:  # type: ignore[override]
        """Run a validation or test attempt through ``LitAgent.validation_rollout_async``."""
        task, resources, rollout = rollout_arguments(self.agent, context)
        value = await self.agent.validation_rollout_async(task, resources, rollout)
        return _result(self.agent, value)


def bridge_for(agent: Any) -> Agent:
    """Return the fulmen ``Agent`` that runs ``agent``, async when the agent is."""
    return AsyncLitAgentBridge(agent) if agent.is_async() else SyncLitAgentBridge(agent)
