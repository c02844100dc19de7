"""The store's face (``fulmen.store.base.Store`` and its roles), the same for every backend.

The argument checks, the closed state and the locking policy are written once in front of the
backends; these tests hold every backend, in-process and over HTTP, to them, and show what a
new backend is asked to write: the work methods only.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from fulmen.errors import InvalidRequest
from fulmen.store import Store
from fulmen.store.memory import MemoryStore
from fulmen.store.roles import RecordLog, ReleaseBook, RolloutQueue, RunLog
from fulmen.types import RolloutCreate
from tests.store.conftest import Backend


async def test_a_closed_store_refuses_writes_and_closing_again_is_a_no_op(
    backend: Backend,
) -> None:
    store: Store = await backend.open()
    await store.enqueue([RolloutCreate(input={"n": 1})])
    await store.aclose()
    with pytest.raises(InvalidRequest, match="the store is closed"):
        await store.enqueue([RolloutCreate(input={"n": 2})])
    with pytest.raises(InvalidRequest, match="the store is closed"):
        await store.heartbeat("w1")
    await store.aclose()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda s: s.claim("w", limit=0), "limit must be at least 1"),
        (lambda s: s.claim("w\x00"), "worker_id"),
        (lambda s: s.heartbeat("w", metadata={"x": math.nan}), "metadata"),
        (lambda s: s.heartbeat("w", attempt_ids=["a" * 10_000]), "attempt_ids"),
        (lambda s: s.update_attempt("at-1", error="e\x00"), "error"),
        (lambda s: s.update_rollout("ro-1", metadata={"x": math.inf}), "metadata"),
        (lambda s: s.update_run("r", ended_at=1e400), "ended_at"),
        (lambda s: s.list_runs(limit=10**6), "limit"),
        (lambda s: s.get_run(""), "run_id"),
        (lambda s: s.get_release("n\x00"), "release name"),
    ],
)
async def test_every_backend_refuses_bad_arguments_before_any_work(
    store: Store, call: Any, named: str
) -> None:
    # The same InvalidRequest everywhere: the face checks before the backend (or the network)
    # sees the call, so the client refuses a NaN that JSON would have turned into null.
    with pytest.raises(InvalidRequest, match=named):
        await call(store)
    assert (await store.stats()).workers == 0


def test_a_backend_writes_only_the_work_and_is_refused_until_it_has_all_of_it() -> None:
    class Partial(Store):
        @property
        def capabilities(self) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError, match="abstract") as refused:
        Partial()  # type: ignore[abstract]
    message = str(refused.value)
    assert "_claim" in message and "_add_spans" in message and "_decide_release" in message
    public = {n for n in dir(Store) if not n.startswith("_") and n != "closed"}
    work = set(Store.__abstractmethods__) - {"capabilities"}
    assert {w.removeprefix("_") for w in work} == public - {"capabilities"}


def test_each_role_is_a_part_of_every_store() -> None:
    store = MemoryStore()
    for role in (RolloutQueue, RecordLog, RunLog, ReleaseBook):
        assert isinstance(store, role)
    assert not hasattr(RunLog, "claim") and not hasattr(RecordLog, "start_run")
