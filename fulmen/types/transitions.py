"""Transitions and trajectories: what ``fulmen.transitions`` produces and the algorithms consume.

A ``Transition`` is one training sequence: a prompt and a completion, the behaviour logprobs the
gateway recorded for the completion, which completion tokens the policy generated
(``loss_mask``), how much of its rollout's advantage each token receives (``credit_weights``),
and the credited reward. In per-call mode a transition is one LLM call; in merged mode it is a
run of consecutive calls of one agent whose prompts extend each other token-exactly, with the
observation tokens between them masked out.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["TransitionDiagnostics", "Trajectory", "Transition"]


class Transition(BaseModel):
    """One training sequence built from one or more LLM calls of a finished attempt.

    Attributes:
        rollout_id / attempt_id / task_id: where it came from; ``task_id`` groups rollouts of
            the same task for group-relative advantages (``None``: the rollout is its own group).
        agent_name: the agent that made the call(s), ``None`` when the spans do not say.
        call_index: position of the (first) call among the attempt's calls, in store order.
        call_ids: the gateway call ids merged into this sequence, in order.
        prompt_token_ids / completion_token_ids: the exact tokens the model saw and produced
            (observation tokens of later merged calls are part of the completion, masked).
        logprobs: behaviour logprob of each completion token (0.0 where ``loss_mask`` is 0).
        loss_mask: 1 where the policy generated the token, 0 for observation tokens.
        credit_weights: the share of the rollout's advantage each completion token receives.
        reward: the reward the credit strategy gave this transition (its last call's).
        rollout_reward: the rollout's final reward, the score that groups compare.
        policy_version: the weights version that sampled it (for staleness counts).
        is_truncated: the (last) call stopped at its token limit.
        state_key: the state the agent named for its (first) call with the ``x-fulmen-state``
            header (anchor-state credit groups calls by it instead of by prompt tokens).
    """

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    attempt_id: str | None = None
    task_id: str | None = None
    agent_name: str | None = None
    call_index: int = Field(ge=0)
    call_ids: list[str] = Field(default_factory=list)
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    credit_weights: list[float]
    reward: float
    rollout_reward: float
    policy_version: str | None = None
    is_truncated: bool = False
    state_key: str | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Transition:
        n = len(self.completion_token_ids)
        for name in ("logprobs", "loss_mask", "credit_weights"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"{name} has {got} entries for {n} completion tokens")
        bad = sorted({m for m in self.loss_mask if m not in (0, 1)})
        if bad:
            raise ValueError(f"loss_mask holds only 0 and 1; got {bad}")
        return self

    @property
    def group_id(self) -> str:
        """The id that groups rollouts for advantages: the task, or the rollout itself."""
        return self.task_id if self.task_id is not None else f"rollout:{self.rollout_id}"

    @property
    def num_trained_tokens(self) -> int:
        """How many completion tokens the policy generated (and the loss sees)."""
        return sum(self.loss_mask)


class TransitionDiagnostics(BaseModel):
    """Counts of what transition building kept, skipped and split; add two with ``+``.

    Attributes:
        calls: LLM calls read.
        calls_used: calls that went into a transition.
        skipped_not_token_level: calls without token ids or logprobs.
        failed_calls: of those, calls that failed (an error, a 400 say, instead of a reply):
            the engine may well be token-level.
        skipped_agent: calls of agents the name patterns did not select.
        calls_unnamed: token-level calls no agent name reached (neither the ``x-fulmen-agent``
            header nor a span named their agent).
        skipped_empty: token-level calls with an empty completion.
        extra_choices_ignored: choices beyond the first (only choice 0 is trained).
        merge_splits: merged mode started a new sequence because the next prompt did not extend
            the previous prompt+completion token-exactly.
        merges: calls appended to a previous sequence.
        merge_stops_truncated: merged mode started a new sequence because the one the prompt
            extended ended in a reply cut by ``max_tokens``.
        skipped_selection: calls the ``transitions.calls`` rules left out (model name,
            session headers, tools).
        truncated: calls trained whose reply was cut by ``max_tokens``.
        air_*: calls on which each automatic intermediate reward fired (``fulmen.transitions.air``:
            tool_error, malformed_tool, truncated, repeated, model_error), trained or not.
        rollouts: attempts read; rollouts_without_reward: of those, attempts with no reward.
    """

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    calls_used: int = 0
    skipped_not_token_level: int = 0
    failed_calls: int = 0
    skipped_agent: int = 0
    calls_unnamed: int = 0
    skipped_empty: int = 0
    extra_choices_ignored: int = 0
    merge_splits: int = 0
    merges: int = 0
    merge_stops_truncated: int = 0
    skipped_selection: int = 0
    truncated: int = 0
    air_tool_error: int = 0
    air_malformed_tool: int = 0
    air_truncated: int = 0
    air_repeated: int = 0
    air_model_error: int = 0
    rollouts: int = 0
    rollouts_without_reward: int = 0

    def __add__(self, other: TransitionDiagnostics) -> TransitionDiagnostics:
        names = type(self).model_fields
        return TransitionDiagnostics(
            **{name: getattr(self, name) + getattr(other, name) for name in names}
        )


class Trajectory(BaseModel):
    """The transitions of one finished attempt, with its final reward and diagnostics.

    ``secondary_rewards`` are the attempt's named reward values other than the primary one
    (``fulmen.transitions.named_rewards``), averaged by name into the step's metrics.
    """

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    attempt_id: str | None = None
    task_id: str | None = None
    final_reward: float | None
    transitions: list[Transition] = Field(default_factory=list)
    diagnostics: TransitionDiagnostics = Field(default_factory=TransitionDiagnostics)
    secondary_rewards: dict[str, float] = Field(default_factory=dict)
