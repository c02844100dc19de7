"""Writing one closed production session to the store: its rollout, its calls, its rewards.

``SessionWriter.write`` asks the store to record the session (``Store.record_session``: the
finished rollout ``session-<id>`` with one new succeeded attempt, retried while the store is
away), hands the session's calls to the gateway's ``CallRecorder`` on that attempt (batched,
redacted, spilled like every record), and then posts the rewards the gateway held for the
session, in the order they arrived, once those calls are stored (a reward may name one of
them by response id).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from fulmen.gateway.capture import Exchange
from fulmen.gateway.recorder import CallRecorder
from fulmen.store.base import Store
from fulmen.tracing.backoff import Backoff, retry_call
from fulmen.types import RewardCreate
from fulmen.types.rewards import session_rollout_id
from fulmen.types.sessions import SessionCreate

__all__ = ["ClosedSession", "SessionWriter"]

_log = logging.getLogger(__name__)
_BACKOFF = Backoff(initial=0.1, maximum=5.0, deadline=300.0)


@dataclass(frozen=True)
class ClosedSession:
    """A session to write: its calls in order, and what the rollout's metadata says of it.

    Attributes:
        session_id: the session's id (the rollout is ``session-<session_id>``).
        attempt_id: the attempt to create, fixed when the session opened (a retry stores once).
        exchanges: the calls whose records were kept, in the order they were answered.
        shed_calls: calls whose records a rate limit shed (the session is incomplete).
        kept_by: ``sample`` (the sample kept it) or ``reward`` (a reward rescued it).
        rewards: rewards the gateway held for the session, in arrival order.
        release / arm: the canary release that routed the session and its arm (``None``
            outside a release); kept in the rollout's metadata.
    """

    session_id: str
    attempt_id: str
    exchanges: Sequence[Exchange]
    shed_calls: int
    kept_by: Literal["sample", "reward"]
    rewards: Sequence[RewardCreate] = ()
    release: str | None = None
    arm: str | None = None


class SessionWriter:
    """Writes closed sessions to ``store`` with their calls (through ``recorder``) and rewards.

    Args:
        store: where the session's rollout and its held rewards go.
        recorder: the gateway's recorder, which writes (and redacts) the call records.
        worker_id: the name kept on every session's attempt.
        flush_timeout_s: how long posting held rewards waits for the session's calls.
    """

    def __init__(
        self,
        store: Store,
        recorder: CallRecorder,
        *,
        worker_id: str = "gateway",
        flush_timeout_s: float = 60.0,
    ) -> None:
        self._store = store
        self._recorder = recorder
        self._worker_id = worker_id
        self._flush_timeout_s = flush_timeout_s

    async def write(self, session: ClosedSession) -> bool:
        """Write ``session``; ``False`` when the store refused it or stayed away (logged)."""
        request = SessionCreate(
            session_id=session.session_id,
            attempt_id=session.attempt_id,
            worker_id=self._worker_id,
            input={"session_id": session.session_id},
            metadata={
                "calls": len(session.exchanges),
                "shed_calls": session.shed_calls,
                "kept_by": session.kept_by,
                "first_call_at": session.exchanges[0].started_at if session.exchanges else None,
                **({"release": session.release, "arm": session.arm} if session.release else {}),
            },
        )
        try:
            await retry_call(
                lambda: self._store.record_session(request),
                backoff=_BACKOFF,
                what=f"record session {session.session_id!r}",
            )
        except Exception:
            _log.exception("session %r not stored; its calls are dropped", session.session_id)
            return False
        rollout_id = session_rollout_id(session.session_id)
        for exchange in session.exchanges:
            self._recorder.record(
                replace(exchange, rollout_id=rollout_id, attempt_id=session.attempt_id)
            )
        if session.rewards:
            await self._recorder.flush(self._flush_timeout_s)
            for reward in session.rewards:
                try:
                    await self._store.add_reward(reward)
                except Exception:
                    _log.exception("held reward for session %r not stored", session.session_id)
        return True
