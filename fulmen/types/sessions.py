"""A closed production session, stored as a finished rollout of mode ``production``.

The gateway groups a deployed agent's calls into sessions (by a header or a body field) and,
when one closes, asks the store to record it with a ``SessionCreate``: the store makes (or
finds) the rollout ``session-<session id>`` and adds one succeeded attempt, to which the
gateway then attaches the session's call records. A session id that comes back after its
session closed gets a new attempt on the same rollout, so rewards by session id keep naming
one rollout.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types.limits import Id, JsonData
from fulmen.types.rewards import SessionId, session_rollout_id

__all__ = ["SessionCreate"]


class SessionCreate(BaseModel):
    """What the gateway sends to store one closed production session.

    Attributes:
        session_id: the session's id; the rollout is ``session-<session_id>``.
        attempt_id: the attempt to create, chosen by the caller so a retried request stores
            the session once (the same id again returns what the first request stored).
        worker_id: who recorded the session (the gateway's name), kept on the attempt.
        input: the rollout's input when the rollout is new (the session's first request, say);
            a later attempt of the same session leaves it as it was.
        metadata: kept on the rollout when it is new (first and last call times, call count).
    """

    model_config = ConfigDict(extra="forbid")

    session_id: SessionId
    attempt_id: Id
    worker_id: Id = "gateway"
    input: JsonData = None
    metadata: dict[str, JsonData] = Field(default_factory=dict)

    @property
    def rollout_id(self) -> str:
        """The rollout this session is stored under (``session-<session_id>``)."""
        return session_rollout_id(self.session_id)
