"""The ``capture:`` and ``redaction:`` sections of the gateway's config (production traffic).

``capture`` turns the gateway's untracked calls (plain ``/v1``) into production sessions:
which request names the session, when a session ends, which sessions are kept, and how fast
the gateway may write to the store. ``redaction`` removes personal data from every record the
gateway stores. See ``docs/production.md``.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["CaptureConfig", "RedactionConfig", "SessionKeyConfig"]

RedactionPattern = Literal["email", "phone", "card"]


class SessionKeyConfig(BaseModel):
    """Where a call's session id is read from, and when a session ends.

    Exactly one of ``header``, ``body_field`` and ``metadata_key`` is set. A call that carries
    no session id (or an empty one) is a session of its own.

    Attributes:
        header: a request header, such as ``x-session-id``.
        body_field: a top-level string field of the request body, such as OpenAI's ``user``.
        metadata_key: a key of the request body's ``metadata`` object.
        idle_timeout_s: a session with no call for this long is closed and written.
        max_calls: a session is closed after this many calls (a runaway conversation does not
            grow in memory without bound); the next call with its id starts a new attempt.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    header: str | None = Field(default=None, min_length=1)
    body_field: str | None = Field(default=None, min_length=1)
    metadata_key: str | None = Field(default=None, min_length=1)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    max_calls: int = Field(default=1000, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [n for n in ("header", "body_field", "metadata_key") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError(
                f"set exactly one of header, body_field, metadata_key; got {given or 'none'}"
            )
        return self


class CaptureConfig(BaseModel):
    """Sessions, sampling and rate limits for production traffic through plain ``/v1``.

    Attributes:
        session: how calls are grouped into sessions (see ``SessionKeyConfig``).
        base_rate: the fraction of sessions kept, decided once per session from a seeded hash
            of its id, so a kept session is kept whole and every gateway decides the same.
        seed: the hash's seed; another seed keeps another sample of sessions.
        keep_if_reward_at_least: a session that was not sampled is held in memory and written
            after all if a reward at least this high for it reaches the gateway's
            ``POST /v1/rewards`` while it is held; ``None`` holds nothing.
        buffer_max_sessions: most unsampled sessions held; the oldest is dropped first.
        buffer_max_bytes: most bytes of request and response JSON held for them.
        buffer_ttl_s: how long an unsampled session is held after it closed.
        max_calls_per_minute: most call records written per minute (token bucket, bursts of
            up to this many); over it a call is still answered, only its record is shed.
        max_spans_per_minute: most store records per minute, counting each call record and
            each new kept session (its rollout and attempt) as one.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    session: SessionKeyConfig
    base_rate: float = Field(default=1.0, ge=0, le=1)
    seed: int = 0
    keep_if_reward_at_least: float | None = None
    buffer_max_sessions: int = Field(default=10_000, ge=0)
    buffer_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    buffer_ttl_s: float = Field(default=3600.0, ge=0)
    max_calls_per_minute: float | None = Field(default=None, gt=0)
    max_spans_per_minute: float | None = Field(default=None, gt=0)


class RedactionConfig(BaseModel):
    """What is removed from the text of every record before it is stored.

    Attributes:
        patterns: built-in patterns: ``email``, ``phone`` (international or 10+ digit
            numbers with separators) and ``card`` (13-19 digits passing the Luhn check).
        hook: ``module:function`` taking a text and returning it redacted, run after the
            patterns.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    patterns: tuple[RedactionPattern, ...] = ("email", "phone", "card")
    hook: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
