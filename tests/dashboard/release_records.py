"""Releases whose figures are known by construction, written to a store as the gateway writes
them (``record_session`` with the release and arm in the metadata, rewards by session id).

``support-v2``: 20 sessions an arm; the candidate (``run-1-v3``, model version 3 of ``run-1``)
scores 1 on 15 and the incumbent (``gemma``) on 5, so the means are 0.75 and 0.25, the
difference +0.5, the ratio 3. ``hostile``: markup in the candidate's model name, in a window
event's reason and in who decided it; 2 candidate sessions, one rewarded, so no comparison.
"""

from __future__ import annotations

from typing import Any

from fulmen.types import RewardCreate, SessionCreate
from fulmen.types.releases import ArmModel, ReleaseCreate, ReleaseDecision

KNOWN = "support-v2"
HOSTILE = "hostile"
MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


async def fill_releases(store: Any) -> None:
    """Put ``hostile`` then ``support-v2`` (the latest created) with their sessions."""
    await store.put_release(
        ReleaseCreate(
            name=HOSTILE,
            incumbent=ArmModel(model="plain"),
            candidate=ArmModel(model=MARKUP),
            share=0.25,
        )
    )
    for i, reward in enumerate((1.0, None)):
        sid = f"h{i}"
        metadata = {"release": HOSTILE, "arm": "candidate"}
        await store.record_session(SessionCreate(session_id=sid, attempt_id=sid, metadata=metadata))
        if reward is not None:
            await store.add_reward(RewardCreate.scalar(reward, session_id=sid))
    await store.decide_release(
        HOSTILE,
        ReleaseDecision(
            event_id="window-0",
            kind="window",
            by=MARKUP[:40],
            reason=f"waiting: {MARKUP}",
            figures={"window": 0, "verdict": "waiting"},
        ),
    )
    await store.put_release(
        ReleaseCreate(
            name=KNOWN,
            incumbent=ArmModel(model="gemma"),
            candidate=ArmModel(model="run-1-v3", run_id="run-1", version=3),
            share=0.1,
        )
    )
    for i in range(40):
        arm = "candidate" if i % 2 else "incumbent"
        metadata = {"release": KNOWN, "arm": arm}
        await store.record_session(
            SessionCreate(session_id=f"s{i}", attempt_id=f"at{i}", metadata=metadata)
        )
        hits = 15 if arm == "candidate" else 5
        value = 1.0 if i // 2 < hits else 0.0
        await store.add_reward(RewardCreate.scalar(value, session_id=f"s{i}"))


def promotion(reason: str = "candidate better: 0.75 vs 0.25") -> ReleaseDecision:
    """A person's promotion of ``support-v2``, as ``fulmen release promote`` records it."""
    return ReleaseDecision(event_id="cli-promote", kind="promoted", by="cli", reason=reason)
