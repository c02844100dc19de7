"""The ``capture:`` and ``redaction:`` sections of the gateway's config (production traffic).

``capture`` turns the gateway's untracked calls (plain ``/v1``) into production sessions:
which request names the session, when a session ends, which sessions are kept, and how fast
the gateway may write to the store. ``redaction`` removes personal data from every record the
gateway stores. See ``docs/production.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.types.limits import MAX_ID_LENGTH
from fulmen.types.rewards import SESSION_ROLLOUT_PREFIX
from fulmen.wire.json_values import as_object

__all__ = ["CaptureConfig", "RedactionConfig", "SessionKeyConfig"]

RedactionPattern = Literal["email", "phone", "card"]
_MAX_SESSION_ID = MAX_ID_LENGTH - len(SESSION_ROLLOUT_PREFIX)  # ``session-<id>`` is an ``Id``


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

    def session_id_of(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """Return the session id a request names; ``None`` when it names none (or an empty one).

        An id too long for a rollout id (over 120 characters) or holding a NUL is replaced by
        ``h-`` and a hash of it, so the same id still lands in the same session.
        """
        value: Any = None
        if self.header is not None:
            value = headers.get(self.header)
        elif self.body_field is not None:
            value = body.get(self.body_field)
        elif self.metadata_key is not None:
            value = (as_object(body.get("metadata")) or {}).get(self.metadata_key)
        if not isinstance(value, str) or not value:
            return None
        if len(value) > _MAX_SESSION_ID or "\x00" in value:
            return "h-" + hashlib.blake2b(value.encode(), digest_size=16).hexdigest()
        return value


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
