"""``AlgorithmSection``: what the trainer asks of every algorithm's config section.

An algorithm's ``algorithm:`` (or ``stages:`` entry) model subclasses this and overrides what
applies to it; the trainer, the CLI and the config checks read these members and nothing else
of a section, so they never name an algorithm or probe for its fields. Each default is the
answer of an algorithm that has no such thing (no transitions, no updater, one process).

>>> class Toy(AlgorithmSection):
...     name: str = "toy"
>>> Toy().trains_full_weights(), Toy().transition_options(), Toy.behaviour_temperature
(False, None, None)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from fulmen.algorithms.parallel.config import DataParallelConfig
    from fulmen.algorithms.update_memory import UpdateShape
    from fulmen.transitions.trajectory import TransitionOptions

__all__ = ["AlgorithmSection"]


class AlgorithmSection(BaseModel):
    """The base of every algorithm's config section: the declared capabilities the trainer reads.

    A subclass adds ``name: Literal["..."]`` (the tag ``algorithm.name`` selects it by, also
    its row in ``fulmen.algorithms.registry``) and its options, and overrides the methods below
    that apply to it.

    Attributes:
        behaviour_temperature: the key of its update settings whose ``temperature`` its
            importance ratios assume (``"grpo"``: ``algorithm.grpo.temperature``), which
            ``fulmen.algorithms.behaviour`` keeps equal to the training rollouts'
            sampling temperature, and whose training rollouts the gateway keeps sampling
            that one distribution (``docs/behaviour-policy.md``); ``None``: it computes no
            ratio against the sampling policy.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    behaviour_temperature: ClassVar[str | None] = None

    #: The tag ``algorithm.name`` selects it by: each subclass's ``name: Literal["..."]``
    #: field (typed ``str`` to its readers; ``Any`` so the literal may narrow it).
    name: Any

    def planned(self) -> tuple[int, str] | None:
        """Return how many steps (or rounds) it runs and the option that sets it; ``None``."""
        return None

    def transition_options(self) -> TransitionOptions | None:
        """Return how its rollouts' calls become transitions; ``None``: it makes none."""
        return None

    def policy_agents(self) -> tuple[str, ...] | None:
        """Return the agent patterns the trained policy serves; ``None``: every agent."""
        return None

    def trains_full_weights(self) -> bool:
        """Say whether it fine-tunes every weight (the engine must reload full weights)."""
        return False

    def runs_async(self) -> bool:
        """Say whether its rollouts run ahead of the step that trains on them."""
        return False

    def data_parallel_settings(self) -> DataParallelConfig | None:
        """Return its updates' data-parallel settings; ``None``: one process."""
        return None

    def max_seq_len_settings(self) -> tuple[str, int | None] | None:
        """Return its updater's length limit: (its key in the section, its value or ``None``).

        ``None`` as the value: the model's context; ``None`` altogether: it has no updater.
        """
        return None

    def update_shape(self) -> UpdateShape | None:
        """Return what its update's memory depends on (``fulmen plan``); ``None``: no update."""
        return None
