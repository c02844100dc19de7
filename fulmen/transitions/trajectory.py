"""From a finished attempt's LLM call records and spans to training transitions.

Per-call mode makes one transition per token-level call. Merged mode chains the calls of one
agent: a call whose prompt starts with a sequence built so far (prompt + everything generated
and observed) token-exactly is appended to it, the new prompt tokens (the observation: tool
results, user turns) are masked out of the loss. Each agent can have several sequences open,
one per *lineage*: a sub-agent or a side task whose calls interleave with the main loop's
extends its own sequence, and a call joins the longest sequence its prompt extends. When the
prompt extends none (a chat template that re-renders history, a truncated context) a new
sequence starts and ``merge_splits`` counts it; a sequence whose last reply was cut by
``max_tokens`` is not extended (``merge_stops_truncated``): the next call conditions on a
reply the policy did not finish. Token ids always come from the gateway's records; text is
never re-tokenized.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.errors import ConfigError
from fulmen.store.reading import read_llm_calls, read_spans
from fulmen.transitions.air import AIRConfig, call_signals
from fulmen.transitions.credit import (
    CallCredit,
    CreditFn,
    CreditInput,
    assign_credit,
    per_call_credit,
    resolve_credit,
)
from fulmen.transitions.named_rewards import secondary_rewards
from fulmen.transitions.selection import CallSelection
from fulmen.transitions.signals import read_signals
from fulmen.types import LLMCall, LLMChoice, Reward, Span
from fulmen.types.transitions import Trajectory, Transition, TransitionDiagnostics

if TYPE_CHECKING:
    from fulmen.store.base import Store

STATE_HEADER = "x-fulmen-state"
"""The request header an agent names its state with (anchor-state credit)."""

__all__ = [
    "STATE_HEADER",
    "AttemptRecords",
    "TransitionOptions",
    "build_trajectory",
    "load_attempt",
    "load_trajectory",
]


class TransitionOptions(BaseModel):
    """How records become transitions.

    Attributes:
        merge: chain consecutive calls of one agent into masked sequences when token-exact.
        agents: fnmatch patterns of the agent names to train; a call whose agent is unknown
            matches as the empty name, so the default ``"*"`` trains every call.
        credit: built-in credit strategy name (see ``fulmen.transitions.credit``).
        gamma: discount of the ``discounted`` strategy (an error with any other strategy).
        gamma_role: with ``discounted``, a further discount for each hand-off between agents
            on the way from a call to the reward (role-aware discount; 1 = none).
        missing_reward: reward of an attempt that emitted none; ``None`` skips such attempts.
        calls: rules on the model name, session headers and tools a call must meet to be
            trained (``fulmen.transitions.selection.CallSelection``; default: every call).
        air: weights of the automatic intermediate rewards (``fulmen.transitions.air``); empty
            (default): the signals are counted and shown, not trained on.
        names: where a call's agent name comes from: ``"call_or_spans"`` (default) the name
            the call carried to the gateway (the ``x-fulmen-agent`` header), else the one its
            spans give; ``"call"`` the header alone. Per-role adapters use ``"call"``: the
            gateway routes a call to a role's adapter by its header, so a call is trained only
            into the adapter that sampled it, never into another role its spans name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    merge: bool = False
    agents: tuple[str, ...] = ("*",)
    credit: str = "final"
    gamma: float | None = Field(default=None, ge=0.0, le=1.0)
    gamma_role: float | None = Field(default=None, ge=0.0, le=1.0)
    missing_reward: float | None = None
    names: Literal["call_or_spans", "call"] = "call_or_spans"
    calls: CallSelection = Field(default_factory=CallSelection)
    air: AIRConfig = Field(default_factory=AIRConfig)

    @model_validator(mode="after")
    def _one_reward_per_merged_sequence(self) -> TransitionOptions:
        if self.credit == "per_call" and self.merge:
            # A merged transition carries one reward, its last call's: the rewards emitted for
            # the earlier calls of the chain would be dropped without a word.
            raise ValueError(
                "transitions.credit 'per_call' does not work with merge: true (a merged "
                "sequence carries only its last call's reward, so the rewards emitted for the "
                "earlier calls would not be trained); set merge: false"
            )
        return self

    def credit_fn(self) -> CreditFn:
        """Return the credit function these options name, with ``gamma`` bound when given."""
        options = {"gamma": self.gamma, "gamma_role": self.gamma_role}
        return resolve_credit(self.credit, **{k: v for k, v in options.items() if v is not None})

    def selects(self, agent_name: str | None) -> bool:
        """Tell whether ``agent_name`` matches one of the patterns."""
        name = agent_name or ""
        return any(fnmatchcase(name, pattern) for pattern in self.agents)


@dataclass(frozen=True)
class _Piece:
    """One selected call, reduced to what a transition needs."""

    index: int
    call: LLMCall
    agent: str | None
    credit: CallCredit

    @property
    def prompt(self) -> list[int]:
        return self.call.prompt_token_ids or []

    @property
    def completion(self) -> list[int]:
        return self.call.choices[0].token_ids or []

    @property
    def logprobs(self) -> list[float]:
        return self.call.choices[0].logprobs or []

    @property
    def is_truncated(self) -> bool:
        return self.call.choices[0].finish_reason == "length"


def build_trajectory(
    *,
    rollout_id: str,
    calls: Sequence[LLMCall],
    spans: Sequence[Span],
    rewards: Sequence[Reward] = (),
    attempt_id: str | None = None,
    task_id: str | None = None,
    options: TransitionOptions | None = None,
    credit: CreditFn | None = None,
    exclude: Collection[str] = (),
) -> Trajectory:
    """Build the transitions of one finished attempt from its call records, spans and rewards.

    ``rewards`` are the rewards posted to the store for the attempt; the latest reward, span
    or posted, is the final reward (``fulmen.transitions.signals``). ``credit`` overrides the
    strategy named in ``options``. Calls are ordered by their store
    sequence number; ``call_index`` is the position in that order.

    ``exclude`` names calls (by ``call_id``) that are read but never trained, such as offline
    GRPO's calls not sampled from the behaviour policy: they keep their place among the calls,
    so a reward emitted for one of them stays its own (and is not trained) instead of falling
    to the call before it, and in a merged sequence their tokens are observation, masked out.

    Raises:
        ConfigError: ``credit`` is ``per_call_credit`` and ``options.merge`` is on (a merged
            sequence carries one reward: the earlier calls' rewards would be dropped).
    """
    opts = options or TransitionOptions()
    if credit is per_call_credit and opts.merge:
        raise ConfigError(
            "credit per_call_credit does not work with merge: true (a merged sequence carries "
            "only its last call's reward); set merge: false"
        )
    ordered = sorted(calls, key=lambda c: c.sequence)
    diag = TransitionDiagnostics(calls=len(ordered), rollouts=1)
    signals = read_signals(ordered, spans, rewards)
    air = call_signals(ordered, spans)
    for fired in air:
        for name in fired:
            setattr(diag, f"air_{name}", getattr(diag, f"air_{name}") + 1)
    final = signals.final_reward
    if final is None:
        diag.rollouts_without_reward = 1
        final = opts.missing_reward
    shaping = [opts.air.shaping(fired) for fired in air] if opts.air.weights else None
    unshaped = final
    if final is not None and shaping is not None:
        final += sum(shaping)
    transitions: list[Transition] = []
    if final is not None:
        agents = (
            signals.agent_names
            if opts.names == "call_or_spans"
            else tuple(c.agent_name for c in ordered)
        )
        selected = _select(ordered, agents, opts, diag, frozenset(exclude))
        credits = assign_credit(
            credit or opts.credit_fn(),
            CreditInput(
                unshaped if unshaped is not None else final,
                tuple(signals.call_rewards[i] for i, _, _ in selected),
                tuple(agent for _, _, agent in selected),
            ),
            call_ids=[c.call_id for _, c, _ in selected],
        )
        if shaping is not None:  # each call's own signals on its credited reward
            credits = [
                c._replace(reward=c.reward + shaping[index])
                for (index, _, _), c in zip(selected, credits, strict=True)
            ]
        pieces = [
            _Piece(index, call, agent, credit_)
            for (index, call, agent), credit_ in zip(selected, credits, strict=True)
        ]
        diag.calls_used = len(pieces)
        chains = _chain(pieces, diag) if opts.merge else [[p] for p in pieces]
        transitions = [
            _transition(chain, rollout_id, attempt_id, task_id, final)
            for chain in sorted(chains, key=lambda ch: ch[0].index)
        ]
    return Trajectory(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        task_id=task_id,
        final_reward=final,
        transitions=transitions,
        diagnostics=diag,
        secondary_rewards=secondary_rewards(spans, rewards),
    )


def _select(
    calls: Sequence[LLMCall],
    agents: Sequence[str | None],
    opts: TransitionOptions,
    diag: TransitionDiagnostics,
    excluded: frozenset[str],
) -> list[tuple[int, LLMCall, str | None]]:
    selected: list[tuple[int, LLMCall, str | None]] = []
    for index, (call, agent) in enumerate(zip(calls, agents, strict=True)):
        if not _is_trainable(call):
            diag.skipped_not_token_level += 1
            diag.failed_calls += call.error is not None
            continue
        if call.call_id in excluded:
            continue  # the caller counts its own exclusions
        if agent is None:
            diag.calls_unnamed += 1
        if not opts.selects(agent):
            diag.skipped_agent += 1
        elif not opts.calls.keeps(call):
            diag.skipped_selection += 1
        elif not call.choices[0].token_ids:
            diag.skipped_empty += 1
        else:
            diag.extra_choices_ignored += len(call.choices) - 1
            diag.truncated += call.choices[0].finish_reason == "length"
            selected.append((index, call, agent))
    return selected


def _is_trainable(call: LLMCall) -> bool:
    if not call.is_token_level or call.prompt_token_ids is None or not call.choices:
        return False
    choice: LLMChoice = call.choices[0]
    return (
        choice.token_ids is not None
        and choice.logprobs is not None
        and len(choice.token_ids) == len(choice.logprobs)
    )


@dataclass
class _Lineage:
    """One open sequence: its calls and every token it holds so far."""

    chain: list[_Piece]
    tokens: list[int]


def _chain(pieces: Sequence[_Piece], diag: TransitionDiagnostics) -> list[list[_Piece]]:
    """Group pieces into token-exact chains per agent and lineage, in call order inside each.

    A piece joins the longest open sequence of its agent that its prompt extends, unless that
    sequence's last reply was truncated; otherwise it opens a sequence of its own.
    """
    lineages: dict[str | None, list[_Lineage]] = {}
    chains: list[list[_Piece]] = []
    for piece in pieces:
        open_ = lineages.setdefault(piece.agent, [])
        extended = [
            lineage
            for lineage in open_
            if len(lineage.tokens) <= len(piece.prompt)
            and piece.prompt[: len(lineage.tokens)] == lineage.tokens
        ]
        best = max(extended, key=lambda lineage: len(lineage.tokens), default=None)
        if best is not None and not best.chain[-1].is_truncated:
            best.chain.append(piece)
            best.tokens = piece.prompt + piece.completion
            diag.merges += 1
            continue
        if best is not None:
            diag.merge_stops_truncated += 1
            open_.remove(best)  # what follows a cut reply starts afresh
        elif open_:
            diag.merge_splits += 1
        chain = [piece]
        chains.append(chain)
        open_.append(_Lineage(chain, piece.prompt + piece.completion))
    return chains


def _transition(
    chain: Sequence[_Piece],
    rollout_id: str,
    attempt_id: str | None,
    task_id: str | None,
    final: float,
) -> Transition:
    first, last = chain[0], chain[-1]
    completion: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    weights: list[float] = []
    for position, piece in enumerate(chain):
        if position > 0:
            # The observation: prompt tokens of this call beyond what the chain already holds.
            observed = piece.prompt[len(first.prompt) + len(completion) :]
            completion += observed
            logprobs += [0.0] * len(observed)
            mask += [0] * len(observed)
            weights += [0.0] * len(observed)
        completion += piece.completion
        logprobs += piece.logprobs
        mask += [1] * len(piece.completion)
        weights += [piece.credit.weight] * len(piece.completion)
    return Transition(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        task_id=task_id,
        agent_name=first.agent,
        call_index=first.index,
        call_ids=[p.call.call_id for p in chain],
        prompt_token_ids=list(first.prompt),
        completion_token_ids=completion,
        logprobs=logprobs,
        loss_mask=mask,
        credit_weights=weights,
        reward=last.credit.reward,
        rollout_reward=final,
        policy_version=last.call.policy_version,
        is_truncated=last.is_truncated,
        state_key=first.call.client_headers.get(STATE_HEADER),
    )


@dataclass(frozen=True)
class AttemptRecords:
    """Everything the store holds about one attempt: calls (store order), spans, rewards.

    ``rewards`` are those posted to the store for the rollout as a whole or for this attempt.
    """

    rollout_id: str
    attempt_id: str | None
    task_id: str | None
    calls: Sequence[LLMCall]
    spans: Sequence[Span]
    rewards: Sequence[Reward] = ()

    @property
    def final_reward(self) -> float | None:
        """The attempt's latest primary reward, span or posted; ``None`` when there is none."""
        return read_signals(self.calls, self.spans, self.rewards).final_reward

    def trajectory(
        self,
        *,
        options: TransitionOptions | None = None,
        credit: CreditFn | None = None,
        exclude: Collection[str] = (),
    ) -> Trajectory:
        """Build the attempt's transitions (see ``build_trajectory``)."""
        return build_trajectory(
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            task_id=self.task_id,
            calls=self.calls,
            spans=self.spans,
            rewards=self.rewards,
            options=options,
            credit=credit,
            exclude=exclude,
        )


async def load_attempt(
    store: Store, rollout_id: str, *, attempt_id: str | None = None
) -> AttemptRecords:
    """Read an attempt's calls, spans and posted rewards from ``store``, every page of them.

    ``attempt_id`` ``None`` takes the rollout's latest attempt. Posted rewards count when they
    name no attempt (given to the rollout) or this one (given through one of its responses).
    """
    rollout = await store.get_rollout(rollout_id)
    if attempt_id is None:
        attempts = await store.list_attempts(rollout_id)
        attempt_id = attempts[-1].attempt_id if attempts else None
    calls = await read_llm_calls(store, rollout_id, attempt_id=attempt_id)
    spans = await read_spans(store, rollout_id, attempt_id=attempt_id)
    rewards = [
        r for r in await store.list_rewards(rollout_id) if r.attempt_id in (None, attempt_id)
    ]
    return AttemptRecords(rollout_id, attempt_id, rollout.task_id, calls, spans, rewards)


async def load_trajectory(
    store: Store,
    rollout_id: str,
    *,
    attempt_id: str | None = None,
    options: TransitionOptions | None = None,
    credit: CreditFn | None = None,
) -> Trajectory:
    """Read an attempt from ``store`` and build its trajectory (latest attempt by default)."""
    records = await load_attempt(store, rollout_id, attempt_id=attempt_id)
    return records.trajectory(options=options, credit=credit)
