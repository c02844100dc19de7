"""The ``transitions:`` section every weight-training algorithm shares.

Agent selection, merging and credit, validated once, with the rules ``TransitionOptions`` itself
cannot check, including those of ``untrained_agents: base`` (PPO's and DPO's policy serves only
the agents it trains).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Self

from pydantic import model_validator

from fulmen.algorithms.section import AlgorithmSection
from fulmen.transitions.trajectory import TransitionOptions

if TYPE_CHECKING:
    from fulmen.algorithms.lora import LoraUpdateSettings
    from fulmen.algorithms.parallel.config import DataParallelConfig
    from fulmen.algorithms.update_memory import UpdateShape

__all__ = ["PolicyRoutedSection", "check_transitions", "check_untrained_on_base", "served_by_name"]


class PolicyRoutedSection(AlgorithmSection):
    """A section whose trained policy may serve only the agents it trains (PPO, DPO).

    Its subclass declares the fields (``steps``, ``transitions``, ``untrained_agents``,
    ``data_parallel``, where its docs and option order put them); this base checks the
    transitions and routing options and answers the trainer's questions from them.
    """

    if TYPE_CHECKING:  # the subclass's fields, and its updater settings for a run
        steps: int
        transitions: TransitionOptions
        untrained_agents: Literal["policy", "base"]
        data_parallel: DataParallelConfig | None

        def update_settings(self) -> LoraUpdateSettings:
            """Return its updater settings as written (the seed not completed)."""
            ...

    @model_validator(mode="after")
    def _check_routing(self) -> Self:
        """Check ``transitions`` and, with ``untrained_agents: base``, what it routes by."""
        check_transitions(self.transitions)
        if self.untrained_agents == "base":
            check_untrained_on_base(self.transitions)
        return self

    def update_config(self, *, seed: int) -> LoraUpdateSettings:
        """Return its updater settings with the run's ``seed`` unless they set one."""
        return self.update_settings().for_run(seed)

    def planned(self) -> tuple[int, str]:
        """Return how many steps the stage runs, and the option that sets it."""
        return self.steps, "steps"

    def transition_options(self) -> TransitionOptions:
        """Return the ``TransitionOptions`` (``transitions``).

        With ``untrained_agents: base`` agent names come from each call's header
        (``names: call``): the name the gateway routed it by.
        """
        if self.untrained_agents == "base":
            return served_by_name(self.transitions)
        return self.transitions

    def policy_agents(self) -> tuple[str, ...] | None:
        """Return the agent patterns the trained policy serves; ``None``: every agent.

        ``transitions.agents`` with ``untrained_agents: base``; the trainer routes the other
        agents' calls to the base model when it publishes the policy.
        """
        return self.transitions.agents if self.untrained_agents == "base" else None

    def data_parallel_settings(self) -> DataParallelConfig | None:
        """Return ``data_parallel``."""
        return self.data_parallel

    def max_seq_len_settings(self) -> tuple[str, int | None]:
        """Return ``<name>.max_seq_len`` of its updater settings."""
        return f"{self.name}.max_seq_len", self.update_settings().max_seq_len

    def update_shape(self) -> UpdateShape:
        """Return its updater's shape (a LoRA adapter; the reference is the base without it)."""
        from fulmen.algorithms.update_memory import UpdateShape

        return UpdateShape.of(self.name, self.update_settings(), parallel=self.data_parallel)


def check_transitions(options: TransitionOptions) -> None:
    """Check an ``algorithm.transitions`` section beyond what its model checks.

    Raises:
        ValueError: ``gamma`` with a credit strategy other than ``discounted`` (it would have
            no effect).
    """
    if options.gamma is not None and options.credit != "discounted":
        raise ValueError("algorithm.transitions.gamma has effect only with credit 'discounted'")


def check_untrained_on_base(options: TransitionOptions) -> None:
    """Check ``untrained_agents: base`` against the ``transitions:`` section it routes by.

    The trained policy then serves only the agents ``transitions.agents`` names, by the name
    a call carried to the gateway (its ``x-fulmen-agent`` header), and every other call the
    base model; so the section must name agents, none of its patterns may match a call
    without a name (every call would be trained), and agent names must come from the call.

    Raises:
        ValueError: ``agents`` is left out or matches an unnamed call, or ``names`` is
            ``call_or_spans``.
    """
    if "agents" not in options.model_fields_set:
        raise ValueError(
            "untrained_agents 'base' serves the policy to the agents algorithm.transitions."
            "agents names: give those agents (every agent is trained without it)"
        )
    if options.selects(None):
        raise ValueError(
            f"untrained_agents 'base' needs algorithm.transitions.agents that name agents: "
            f"{list(options.agents)} also matches calls without an agent name, so every call "
            "is trained and there is no untrained agent to serve from the base model"
        )
    if "names" in options.model_fields_set and options.names != "call":
        raise ValueError(
            "untrained_agents 'base' routes each call by the agent name its x-fulmen-agent "
            "header carries, and trains only calls it routed to the policy: "
            "algorithm.transitions.names must be 'call' (or left out)"
        )


def served_by_name(options: TransitionOptions) -> TransitionOptions:
    """Return ``options`` that read a call's agent from its header alone (``names: call``).

    With ``untrained_agents: base`` the gateway routed each call by that header, so a call is
    trained only when the policy sampled it, never because its spans name a trained agent.
    """
    return options.model_copy(update={"names": "call"})
