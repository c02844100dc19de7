"""SQL prune works through the rollouts a chunk (one transaction) at a time, on both dialects."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fulmen.store import open_store
from fulmen.store.sql import rewards as sql_rewards
from fulmen.types import AttemptStatus, PruneReport, PruneRequest, RolloutCreate, RolloutStatus


async def test_prune_crosses_chunk_boundaries(
    sql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_rewards, "PRUNE_CHUNK", 2)
    async with open_store(sql_url, watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(input=i, rollout_id=f"r{i}") for i in range(6)])
        claims = await store.claim("w", limit=6)
        for claim in claims[:5]:
            await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        cut = datetime.now(UTC)
        dry = await store.prune(PruneRequest(ended_before=cut, dry_run=True))
        assert dry == PruneReport(dry_run=True, rollouts=5, attempts=5)
        assert await store.prune(PruneRequest(ended_before=cut)) == PruneReport(
            dry_run=False, rollouts=5, attempts=5
        )
        stats = await store.stats()
        assert sum(stats.rollouts.values()) == stats.rollouts[RolloutStatus.RUNNING] == 1
