"""Run inside a test host's namespace: ask the store service what the test needs to know.

    python -m tests.multihost.probe wait URL             until GET URL answers 200
    python -m tests.multihost.probe llm-url URL          the llm base URL the trainer published
    python -m tests.multihost.probe cut URL WORKER CMD.. run CMD as soon as the store sees an
                                                         attempt of WORKER running; print it
    python -m tests.multihost.probe report URL           rollouts, attempts, reward spans (JSON)

The store's token comes from ``$FULMEN_STORE_TOKEN``. Output is one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx

from fulmen.store import open_store
from fulmen.types import RolloutQuery, RolloutStatus

_TOKEN = os.environ.get("FULMEN_STORE_TOKEN")


async def _wait(url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        try:
            response = httpx.get(url, timeout=2)
            response.raise_for_status()
            return response.json()
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _llm_url(url: str) -> dict[str, Any]:
    async with open_store(url, token=_TOKEN) as store:
        for _ in range(1200):
            latest = await store.latest_resources()
            if latest is not None and "llm" in latest.resources:
                return {"base_url": latest.resources["llm"].base_url}  # type: ignore[union-attr]
            await asyncio.sleep(0.1)
    raise SystemExit("no llm resource published in 120 s")


async def _cut(url: str, worker: str, command: list[str]) -> dict[str, Any]:
    """Cut as soon as the store holds a running attempt of ``worker`` (polled every 20 ms)."""
    async with open_store(url, token=_TOKEN) as store:
        for _ in range(6000):
            query = RolloutQuery(statuses=[RolloutStatus.RUNNING], limit=1000)
            for rollout in (await store.query_rollouts(query)).items:
                running = [a for a in await store.list_attempts(rollout.rollout_id)
                           if a.worker_id == worker and not a.is_terminal]  # fmt: skip
                if running:
                    cut_at = time.time()
                    subprocess.run(command, check=True, timeout=10)
                    return {"cut_at": cut_at, "attempt_id": running[0].attempt_id}
            await asyncio.sleep(0.02)
    raise SystemExit(f"worker {worker} never had a running attempt")


async def _report(url: str) -> dict[str, Any]:
    rollouts = []
    async with open_store(url, token=_TOKEN) as store:
        page = await store.query_rollouts(RolloutQuery(limit=10_000))
        for rollout in page.items:
            attempts = await store.list_attempts(rollout.rollout_id)
            spans = (await store.query_spans(rollout.rollout_id, limit=1000)).items
            rewards: dict[str, int] = {}
            for span in spans:
                if span.name == "fulmen.reward":
                    rewards[span.attempt_id] = rewards.get(span.attempt_id, 0) + 1
            rollouts.append({
                "rollout_id": rollout.rollout_id,
                "mode": rollout.mode.value,
                "status": rollout.status.value,
                "attempts": [
                    {"attempt_id": a.attempt_id, "number": a.number, "worker_id": a.worker_id,
                     "status": a.status.value, "error": a.error,
                     "started_at": a.started_at.timestamp(),
                     "ended_at": a.ended_at.timestamp() if a.ended_at else None,
                     "last_heartbeat_at": a.last_heartbeat_at.timestamp(),
                     "reward_spans": rewards.get(a.attempt_id, 0)}
                    for a in attempts
                ],
            })  # fmt: skip
    return {"rollouts": rollouts}


def main(argv: list[str]) -> None:
    """Run one probe command and print its JSON answer."""
    command, url, *rest = argv
    if command == "wait":
        result = asyncio.run(_wait(url))
    elif command == "llm-url":
        result = asyncio.run(_llm_url(url))
    elif command == "cut":
        result = asyncio.run(_cut(url, rest[0], rest[1:]))
    elif command == "report":
        result = asyncio.run(_report(url))
    else:
        raise SystemExit(f"unknown probe command {command!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
