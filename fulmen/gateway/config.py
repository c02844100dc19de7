"""The gateway's options, each documented once beside its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fulmen.gateway.capture_config import CaptureConfig, RedactionConfig
from fulmen.gateway.release_config import ReleaseConfig
from fulmen.types.rewards import RewardRange

__all__ = ["GatewayConfig"]


class GatewayConfig(BaseModel):
    """How the gateway forwards, caches and records.

    Attributes:
        connect_timeout_s: time to open a connection to an upstream before trying the next one.
        read_timeout_s: longest wait for the next bytes of an upstream reply (→ 504).
        connect_retries: extra rounds over the upstreams after every one refused a connection.
        retry_backoff_s: base of the capped, jittered wait between those rounds.
        max_connections: pooled connections to all upstreams together.
        keepalive_s: idle upstream connections are closed after this; kept below the engines'
            own keep-alive (uvicorn and vLLM: 5 s) so a connection is not reused just as the
            engine closes it.
        unhealthy_s: how long an upstream that refused a connection is tried last.
        attempt_ttl_s: how long a running attempt's status is trusted before it is re-read
            (final statuses are cached for good).
        max_body_bytes: largest request body accepted (→ 413).
        batch_size: most call records written to the store in one ``add_llm_calls``.
        flush_interval_s: longest time a call record waits before it is written.
        max_pending: call records held in memory while the store is unreachable; more are
            spilled to a file in ``spill_dir`` and replayed in order when it is back.
        spill_dir: where that file goes (``None``: a new temporary directory; ``fulmen
            gateway`` passes ``$FULMEN_SPILL_DIR``).
        close_timeout_s: how long closing keeps retrying writes to an unreachable store.
        flush_timeout_s: how long ``POST /gateway/flush`` waits for an unreachable store
            before it answers 503.
        record_untracked: whether calls through plain ``/v1`` are recorded.
        policy_version_headers: response headers that name the weights' version, first wins
            (a top-level ``policy_version`` field of the body is read as well).
        capture: production sessions, sampling and rate limits for untracked calls
            (``CaptureConfig``; ``record_untracked`` is then not consulted); ``None`` records
            each untracked call alone, as ``record_untracked`` says.
        release: a canary release of production traffic (``ReleaseConfig``): each session
            served by the incumbent or the candidate model, with an optional promotion gate;
            needs ``capture`` (the sessions carry the arms and their rewards).
        redaction: personal data removed from every record before it is stored
            (``RedactionConfig``); ``None`` stores records as they are.
        model_map: the model name the engine gets for each model name an agent asks for, so
            an agent that insists on its own name (Claude Code asks for ``claude-sonnet-4-6``,
            Codex for ``gpt-5``) reaches the policy being trained; the key ``*`` maps every
            name not listed. Applies to every recorded wire API's calls (``fulmen.wire``); the
            record keeps the agent's request as sent. Empty: names go through unchanged.
        reward_range: the values ``POST /v1/rewards`` accepts (``RewardRange``, default
            ``[-1e6, 1e6]``); a value outside it is refused with a 422 naming the field.
        max_calls_per_rollout: the most calls one rollout may have in flight at once; more
            are answered 429 at once (an agent opening thousands of calls would otherwise
            queue the engine's work of every other rollout behind its own).
        max_n: the most choices (``n``) a tracked call may ask for; more is refused with a 400
            (each choice is a full generation: an agent could otherwise multiply the engine's
            work for every other rollout).
        session_headers: request headers recorded with each call (``client_headers``)
            because clients use them to tell their sessions, threads and sub-agents apart;
            ``algorithm.transitions.calls.headers`` selects calls by them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0)
    connect_retries: int = Field(default=2, ge=0, le=10)
    retry_backoff_s: float = Field(default=0.05, ge=0)
    max_connections: int = Field(default=512, ge=1)
    keepalive_s: float = Field(default=2.0, ge=0)
    unhealthy_s: float = Field(default=5.0, ge=0)
    attempt_ttl_s: float = Field(default=1.0, ge=0)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    batch_size: int = Field(default=256, ge=1)
    flush_interval_s: float = Field(default=0.05, gt=0)
    max_pending: int = Field(default=100_000, ge=1)
    spill_dir: Path | None = None
    close_timeout_s: float = Field(default=10.0, ge=0)
    flush_timeout_s: float = Field(default=60.0, gt=0)
    record_untracked: bool = True
    policy_version_headers: tuple[str, ...] = ("x-policy-version", "x-fulmen-policy-version")
    capture: CaptureConfig | None = None
    release: ReleaseConfig | None = None
    redaction: RedactionConfig | None = None
    model_map: dict[str, str] = Field(default_factory=dict)
    reward_range: RewardRange = Field(default_factory=RewardRange)
    max_calls_per_rollout: int = Field(default=16, ge=1, le=100_000)
    max_n: int = Field(default=16, ge=1, le=1024)
    session_headers: tuple[str, ...] = (
        "x-claude-code-session-id",  # Claude Code
        "session-id",  # the Codex CLI
        "thread-id",  # the Codex CLI (a sub-agent's thread)
        "x-session-id",  # OpenCode
        "x-fulmen-session",  # fulmen's own clients
        "x-fulmen-state",  # the state an agent names (anchor-state credit)
    )

    @model_validator(mode="after")
    def _release_needs_sessions(self) -> Self:
        if self.release is not None and self.capture is None:
            raise ValueError(
                "release: needs capture: (its session key): arms are assigned per session, and "
                "the sessions carry the rewards the arms are compared on"
            )
        return self

    @field_validator("model_map")
    @classmethod
    def _names_are_set(cls, value: dict[str, str]) -> dict[str, str]:
        empty = [f"{k!r}: {v!r}" for k, v in value.items() if not k or not v]
        if empty:
            raise ValueError(f"model_map names must be non-empty, got {', '.join(empty)}")
        return value

    @field_validator("session_headers")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name.strip().lower() for name in value if name.strip())

    def engine_model(self, model: Any) -> Any:
        """Return the model name the engine gets for an agent's ``model`` (``model_map``)."""
        if not self.model_map or not isinstance(model, str):
            return model
        return self.model_map.get(model, self.model_map.get("*", model))
