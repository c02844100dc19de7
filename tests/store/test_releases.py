"""Releases in the store: put, get, list and decide, the same on every backend.

Every test runs against memory, SQLite, PostgreSQL and the HTTP service over both (see
``conftest.store``).
"""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.store import Store
from fulmen.store.releases import decided_release, new_release
from fulmen.types.releases import (
    MAX_RELEASE_EVENTS,
    ArmModel,
    ReleaseArm,
    ReleaseCreate,
    ReleaseDecision,
    ReleaseState,
)


def release(name: str = "rel", share: float = 0.1, **kw: object) -> ReleaseCreate:
    fields: dict[str, object] = {
        "name": name,
        "incumbent": ArmModel(model="base"),
        "candidate": ArmModel(model="run-1-v3", run_id="run-1", version=3),
        "share": share,
        **kw,
    }
    return ReleaseCreate.model_validate(fields)


def decision(event_id: str, kind: str, **kw: object) -> ReleaseDecision:
    return ReleaseDecision.model_validate({"event_id": event_id, "kind": kind, "by": "t", **kw})


async def test_a_release_is_put_once_and_read_back(store: Store) -> None:
    put = await store.put_release(release())
    assert (put.state, put.revision, [e.kind for e in put.events]) == (
        ReleaseState.CANARY,
        1,
        ["created"],
    )
    assert put.serving(ReleaseArm.CANDIDATE).version == 3
    assert await store.put_release(release()) == put  # the same definition: a no-op
    assert await store.get_release("rel") == put
    with pytest.raises(Conflict, match="another definition"):
        await store.put_release(release(share=0.5))
    later = await store.put_release(release("later"))
    assert [r.name for r in await store.list_releases()] == ["later", "rel"]
    assert later.created_at >= put.created_at


async def test_decisions_move_the_state_only_where_allowed(store: Store) -> None:
    await store.put_release(release())
    window = await store.decide_release(
        "rel", decision("w1", "window", figures={"p_value": 0.2, "arms": {"candidate": 3}})
    )
    assert (window.state, window.revision, window.events[-1].figures["p_value"]) == (
        ReleaseState.CANARY,
        2,
        0.2,
    )
    # A decision made on a stale read is refused; the same event id again is a no-op.
    with pytest.raises(Conflict, match="changed since revision 1"):
        await store.decide_release("rel", decision("p0", "promoted", expected_revision=1))
    promoted = await store.decide_release("rel", decision("p1", "promoted", expected_revision=2))
    assert (promoted.state, promoted.revision) == (ReleaseState.PROMOTED, 3)
    assert await store.decide_release("rel", decision("p1", "promoted")) == promoted
    with pytest.raises(Conflict, match="is promoted: it cannot be promoted"):
        await store.decide_release("rel", decision("p2", "promoted"))
    back = await store.decide_release("rel", decision("r1", "rolled_back", reason="worse"))
    assert (back.state, back.events[-1].reason) == (ReleaseState.ROLLED_BACK, "worse")
    with pytest.raises(Conflict, match="is rolled_back"):
        await store.decide_release("rel", decision("r2", "rolled_back"))
    assert await store.get_release("rel") == back


async def test_unknown_and_hostile_names_are_refused(store: Store) -> None:
    with pytest.raises(NotFound, match="release 'nope' does not exist"):
        await store.get_release("nope")
    with pytest.raises(NotFound):
        await store.decide_release("nope", decision("e", "window"))
    with pytest.raises((InvalidRequest, NotFound)):
        await store.get_release("x" * 200)
    with pytest.raises(ValidationError):
        release(share=float("nan"))
    with pytest.raises(ValidationError):
        release(share=1.5)
    with pytest.raises(ValidationError, match="different models"):
        ReleaseCreate(
            name="same", incumbent=ArmModel(model="m"), candidate=ArmModel(model="m"), share=0.1
        )
    with pytest.raises(ValidationError, match="run_id and version together"):
        ArmModel(model="m", run_id="r")
    with pytest.raises(ValidationError):
        decision("bad\x00id", "window")


def test_window_events_are_bounded_state_changes_kept() -> None:
    kept = new_release(release(), None, 1.0)
    kept = decided_release(kept, decision("p", "promoted"), 2.0)
    for i in range(MAX_RELEASE_EVENTS + 5):
        kept = decided_release(kept, decision(f"w{i}", "window"), 3.0 + i)
    assert len(kept.events) == MAX_RELEASE_EVENTS
    assert [e.kind for e in kept.events[:3]] == ["created", "promoted", "window"]
    assert kept.events[2].event_id == "w7"
    assert kept.revision == MAX_RELEASE_EVENTS + 7


async def test_two_gates_deciding_at_once_apply_one(store: Store) -> None:
    """Compare-and-set on the revision: of two promotions read at the same revision, one wins."""
    put = await store.put_release(release())
    results = await asyncio.gather(
        store.decide_release("rel", decision("a", "promoted", expected_revision=put.revision)),
        store.decide_release("rel", decision("b", "rolled_back", expected_revision=put.revision)),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "Release"]
    assert (await store.get_release("rel")).revision == 2
