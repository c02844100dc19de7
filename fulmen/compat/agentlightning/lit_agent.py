"""``LitAgent``: the 0.x agent base class, run by fulmen's runner through a small bridge.

Subclass it as in 0.x and override ``rollout`` (both modes), ``training_rollout`` /
``validation_rollout``, or their ``*_async`` forms; each takes ``(task, resources, rollout)``
and returns a reward, or ``None`` after ``emit_reward``. ``fulmen train`` with
``agent: module:MyAgent`` (the class, built without arguments, or an instance) runs it:
fulmen's runner asks the object for ``__fulmen_agent__()`` and gets a fulmen ``Agent`` that
builds the 0.x arguments from each attempt's context (``_bridge``).

Where 0.x and fulmen differ, the bridge refuses at the start of training instead of running
differently: the deprecated ``on_rollout_start`` / ``on_rollout_end`` hooks (fulmen's runner
has no place for them), returning spans instead of a reward, and the runner or tracer objects.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.errors import NotSupported

if TYPE_CHECKING:
    from fulmen.agent.api import Agent
    from fulmen.compat.agentlightning.rollouts import RolloutRawResult

__all__ = ["LitAgent"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_HOOKS = ("on_rollout_start", "on_rollout_end")


class LitAgent(Generic[T]):
    """Base class of 0.x agents; see the module docstring for what fulmen runs.

    Args:
        trained_agents: a regular expression naming the agents whose calls are trained (0.x's
            deprecated way to say ``agent_match``). ``agl.Trainer`` turns it into fulmen's
            ``algorithm.transitions.agents``; under ``fulmen train`` the config decides, and the
            pattern to put there is logged when training starts.
    """

    def __init__(self, *, trained_agents: str | None = None) -> None:
        self.trained_agents = trained_agents
        # The agl.Trainer (typed loosely: the trainer module imports this one).
        self._trainer_ref: weakref.ReferenceType[Any] | None = None

    # -- what 0.x code overrides -----------------------------------------------------------

    def is_async(self) -> bool:
        """Whether the agent overrides an async rollout method (then those are the ones run)."""
        cls = type(self)
        return any(
            getattr(cls, name) is not getattr(LitAgent, name)
            for name in ("rollout_async", "training_rollout_async", "validation_rollout_async")
        )

    def rollout(self, task: T, resources: dict[str, Any], rollout: Any) -> RolloutRawResult:
        """Run one rollout (both modes, unless the mode-specific methods are overridden)."""
        raise NotImplementedError(f"{type(self).__name__} must implement rollout")

    async def rollout_async(
        self, task: T, resources: dict[str, Any], rollout: Any
    ) -> RolloutRawResult:
        """Run one rollout asynchronously."""
        raise NotImplementedError(f"{type(self).__name__} must implement rollout_async")

    def training_rollout(
        self, task: T, resources: dict[str, Any], rollout: Any
    ) -> RolloutRawResult:
        """Run one training rollout; defaults to ``rollout``."""
        return self.rollout(task, resources, rollout)

    def validation_rollout(
        self, task: T, resources: dict[str, Any], rollout: Any
    ) -> RolloutRawResult:
        """Run one validation (or test) rollout; defaults to ``training_rollout``, as documented."""
        return self.training_rollout(task, resources, rollout)

    async def training_rollout_async(
        self, task: T, resources: dict[str, Any], rollout: Any
    ) -> RolloutRawResult:
        """Run one training rollout asynchronously; defaults to ``rollout_async``."""
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(
        self, task: T, resources: dict[str, Any], rollout: Any
    ) -> RolloutRawResult:
        """Run one validation rollout asynchronously; defaults to ``training_rollout_async``."""
        return await self.training_rollout_async(task, resources, rollout)

    # -- the trainer, runner and tracer 0.x attached -----------------------------------------

    def set_trainer(self, trainer: Any) -> None:
        """Remember the ``agl.Trainer`` that trains this agent (it calls this in ``fit``)."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """Return the ``agl.Trainer`` set by ``set_trainer``; ``ValueError`` if none (as 0.x)."""
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if trainer is None:
            raise ValueError("Trainer has not been set for this agent.")
        return trainer

    @property
    def trainer(self) -> Any:
        """Return the ``agl.Trainer`` training this agent."""
        return self.get_trainer()

    @property
    def runner(self) -> Any:
        """Refused: fulmen's runner is not an object agents reach."""
        raise NotSupported(
            "LitAgent.runner",
            why="fulmen's runner runs many agents and hands each attempt its context only",
            instead="read what you need from the rollout argument (ids, mode, resources_id)",
        )

    @property
    def tracer(self) -> Any:
        """Refused: fulmen has no per-agent tracer object."""
        raise NotSupported(
            "LitAgent.tracer",
            why="fulmen keeps the tracer of each rollout in a context variable",
            instead="agl.emit_reward / emit_message / emit_object / operation(...)",
        )

    def get_runner(self) -> Any:
        """Refused, as ``runner``."""
        return self.runner

    def get_tracer(self) -> Any:
        """Refused, as ``tracer``."""
        return self.tracer

    def on_rollout_start(self, task: Any, runner: Any, tracer: Any) -> None:
        """0.x's deprecated hook; overriding it is refused when training starts."""

    def on_rollout_end(self, task: Any, rollout: Any, runner: Any, tracer: Any) -> None:
        """0.x's deprecated hook; overriding it is refused when training starts."""

    # -- what fulmen's runner calls ------------------------------------------------------------

    def __fulmen_agent__(self) -> Agent:
        """Return the fulmen ``Agent`` that runs this 0.x agent (``NotSupported`` first)."""
        from fulmen.compat.agentlightning.bridge import bridge_for

        cls = type(self)
        for hook in _HOOKS:
            if getattr(cls, hook) is not getattr(LitAgent, hook):
                raise NotSupported(
                    f"{cls.__name__}.{hook}",
                    why="fulmen's runner calls no per-agent hooks (0.x deprecated them too)",
                    instead="put the code at the start or end of your rollout method",
                )
        if not self._overrides_a_rollout():
            raise NotSupported(
                f"{cls.__name__} without a rollout method",
                why="there is nothing to run",
                instead="override rollout, training_rollout or their *_async forms",
            )
        if self.trained_agents is not None:
            logger.warning(
                "%s(trained_agents=%r): fulmen train selects trained calls from the config; "
                "set algorithm.transitions.agents: %s (agl.Trainer does this itself)",
                cls.__name__,
                self.trained_agents,
                list(agent_patterns(self.trained_agents)),
            )
        return bridge_for(self)

    def _overrides_a_rollout(self) -> bool:
        cls = type(self)
        names = (
            "rollout",
            "rollout_async",
            "training_rollout",
            "training_rollout_async",
        )
        return any(getattr(cls, n) is not getattr(LitAgent, n) for n in names) or (
            inspect.isfunction(getattr(self, "_rollout_func", None))
        )
