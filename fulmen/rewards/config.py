"""``reward:`` of the training config: a rubric of criteria, scored by a judge model or code.

Each criterion is a ``question`` a judge model scores on one rollout (pointwise), a ``rank``
question a judge answers by ordering a whole group of rollouts of one task (one call per
group), or a ``check``, a Python function ``module:fn`` that scores the rollout itself. Every
criterion's score lies in [0, 1] and is stored as a named reward; their weighted mean is the
rollout's primary reward (``docs/rewards.md``, "Judges and rubrics").
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

__all__ = ["Criterion", "JudgeConfig", "JudgeRetry", "RewardConfig"]

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$"


class JudgeRetry(BaseModel):
    """When a judge call is sent again: after a 429, a 5xx, a connection error or a timeout.

    Any other error status (a 400, a 401, a 404) is the judge's verdict on the request and is
    never retried. Between tries the wait is drawn uniformly from ``[0, cap]`` with ``cap =
    initial_delay_s * 2**(retry - 1)`` capped at ``max_delay_s`` (full jitter: judge calls that
    failed together spread out), or is exactly what the judge asked for in a ``Retry-After``
    header (seconds or an HTTP date). After the last try the rollout gets a scoring error
    naming the judge's last answer, never a 0.

    Attributes:
        attempts: tries per judge call, the first included (``1``: never retried).
        initial_delay_s: the cap of the wait before the first retry, doubled for each further
            retry.
        max_delay_s: the largest cap of a wait the backoff draws (a ``Retry-After`` is honoured
            as sent, within ``deadline_s``).
        deadline_s: no retry starts later than this many seconds after the call's first try;
            a ``Retry-After`` that would end past it fails the call at once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(default=4, ge=1, le=100)
    initial_delay_s: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    max_delay_s: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    deadline_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)


class JudgeConfig(BaseModel):
    """The judge model: any OpenAI-compatible chat completions endpoint.

    Attributes:
        base_url: its ``.../v1`` URL (a hosted API, or a ``fulmen serve`` / vLLM engine).
        model: the model name to request.
        api_key_env: the environment variable holding its API key, sent as a bearer token
            (never the key itself, so the config can be shared); ``None``: no key.
        sampling: request fields added to every judge call (``temperature: 0`` by default, so
            the same rollout gets the same score).
        timeout_s: seconds to wait for one answer.
        scale: a ``question`` is scored from 0 to this number; the stored score is the answer
            divided by it.
        content: what the judge reads of a rollout besides its task: ``final``, the last
            reply's text; ``transcript``, every model reply of the rollout in order (with its
            agent's name and tool calls).
        max_content_chars: a rollout's content longer than this is cut to its last this many
            characters (marked as cut).
        instructions: text added to the judge's system prompt (what the agent is for, what a
            good answer looks like).
        concurrency: judge calls in flight at once.
        record_calls: store each judge call as a call record of the agent ``judge`` (no
            rollout), so its cost is visible; ``false`` when ``base_url`` is a fulmen gateway,
            which records the calls itself from the ``x-fulmen-agent: judge`` header every
            judge call carries.
        retry: when a failed call is sent again (``JudgeRetry``): after a 429, a 5xx, a
            connection error or a timeout, up to ``attempts`` tries, honouring
            ``Retry-After``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    sampling: dict[str, JsonValue] = Field(default_factory=lambda: {"temperature": 0.0})
    timeout_s: float = Field(default=120.0, gt=0)
    scale: int = Field(default=10, ge=1)
    content: Literal["final", "transcript"] = "transcript"
    max_content_chars: int = Field(default=12_000, ge=100)
    instructions: str | None = None
    concurrency: int = Field(default=4, ge=1)
    record_calls: bool = True
    retry: JudgeRetry = Field(default_factory=JudgeRetry)


class Criterion(BaseModel):
    """One component of the reward: exactly one of ``question``, ``rank`` and ``check``.

    Attributes:
        name: the named reward its score is stored under (letters, digits, ``_.-``).
        weight: its weight in the primary reward (a weighted mean, so only ratios matter).
        question: scored by the judge on each rollout alone, from 0 to ``judge.scale``.
        rank: ordered by the judge over the succeeded rollouts of one group (one call per
            group): rank ``r`` (1 = best) of ``n`` scores ``(n - r) / (n - 1)``, rollouts that
            tie sharing the mean of the ranks they span. Comparable within the group only,
            which is what GRPO's group-relative advantage needs; left out for a rollout that
            ran alone (validation), see ``docs/rewards.md``.
        ties: with ``rank``: ``equal`` (default) lets the judge put equally good rollouts in
            one place, and rollouts whose content the judge reads is identical always tie
            (the judge sees each distinct content once; a group whose every rollout is the
            same scores 0.5 each, with no call), so identical rollouts never get different
            scores; ``forbidden`` asks for a strict order of every rollout (identical ones
            too, each shown), the behaviour before ties existed.
        check: a Python function ``module:fn`` given the ``JudgedRollout``; returns a number
            in [0, 1] (``True``/``False`` count as 1/0), may be async.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    question: str | None = Field(default=None, min_length=1)
    rank: str | None = Field(default=None, min_length=1)
    check: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    ties: Literal["equal", "forbidden"] = "equal"

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [k for k in ("question", "rank", "check") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"criterion {self.name!r} needs exactly one of question, rank, check; "
                f"got {kinds or 'none'}"
            )
        if "ties" in self.model_fields_set and self.rank is None:
            raise ValueError(f"criterion {self.name!r}: ties has effect only with rank")
        return self

    @property
    def kind(self) -> Literal["question", "rank", "check"]:
        """Which of the three it is."""
        if self.question is not None:
            return "question"
        return "rank" if self.rank is not None else "check"


class RewardConfig(BaseModel):
    """Rewards from a rubric: the judge (if any criterion needs one) and the criteria.

    With ``reward:`` set, the trainer scores every rollout it runs once its group finished,
    before transitions are built, and posts the scores to the store as one reward per
    rollout; that reward replaces one the agent emitted itself.

    Attributes:
        judge: the judge model (``JudgeConfig``); needed by ``question`` and ``rank``
            criteria, refused when every criterion is a ``check``.
        criteria: the rubric (``Criterion``), at least one; names are unique.
        name: the name of the primary reward, the weighted mean of the criteria's scores.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge: JudgeConfig | None = None
    criteria: list[Criterion] = Field(min_length=1)
    name: str = Field(default="reward", pattern=_NAME)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        names = [c.name for c in self.criteria]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"reward.criteria names repeat: {', '.join(repeated)}")
        if self.name in names:
            raise ValueError(f"reward.name {self.name!r} is also a criterion's name")
        judged = [c.name for c in self.criteria if c.kind != "check"]
        if judged and self.judge is None:
            raise ValueError(f"reward.criteria {', '.join(judged)} need reward.judge")
        if not judged and self.judge is not None:
            raise ValueError("reward.judge has no effect: every criterion is a check")
        return self
