"""``fulmen rollouts list``: newest first, the run/task/reward filters, a quiet broken pipe."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import AttemptStatus, RewardCreate, RolloutCreate, Run

# Enqueued in this order: (rollout id, task, reward; None: never claimed).
ROLLOUTS = [
    ("ra-g1-train1-t0-r0", "a", 1.0),
    ("rb-g1-train1-t0-r0", "a", 0.5),
    ("ra-g1-train1-t1-r0", "b", 0.0),
    ("manual", "a", None),
]


async def _fill(url: str) -> None:
    async with open_store(url, watchdog_interval=None) as store:
        for run_id in ("ra", "rb"):
            await store.start_run(Run(run_id=run_id, name=run_id, started_at=1.0))
        for rollout_id, task, reward in ROLLOUTS:
            await store.enqueue([RolloutCreate(input={}, task_id=task, rollout_id=rollout_id)])
            if reward is None:
                continue
            (claim,) = await store.claim("w")
            await store.add_reward(RewardCreate(rollout_id=rollout_id, values={"reward": reward}))
            await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)


@pytest.fixture
def url(tmp_path: Path) -> str:
    address = f"sqlite:///{tmp_path / 'store.db'}"
    asyncio.run(_fill(address))
    return address


def _listed(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["rollouts", "list", "--store", url, "--json", *args]) == 0
    return [item["rollout_id"] for item in json.loads(capsys.readouterr().out)["items"]]


def test_newest_first_and_the_filters(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [r[0] for r in ROLLOUTS]
    assert _listed(url, capsys) == ids[::-1]
    assert _listed(url, capsys, "--oldest-first") == ids
    assert _listed(url, capsys, "--run", "ra") == ["ra-g1-train1-t1-r0", "ra-g1-train1-t0-r0"]
    assert _listed(url, capsys, "--task", "a") == ["manual", *ids[1::-1]]
    # Posted rewards count; a rollout without a reward is left out.
    assert _listed(url, capsys, "--min-reward", "0.5") == ids[1::-1]
    assert _listed(url, capsys, "--run", "ra", "--min-reward", "0.5") == [ids[0]]

    assert main(["rollouts", "list", "--store", url, "--limit", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert [r[0] for r in rows] == ["manual", "ra-g1-train1-t1-r0"]
    assert rows[1][-1] == "0"  # the posted reward is shown
    hint = out.splitlines()[-1]
    assert hint.startswith("more: fulmen rollouts list --before ")
    before = hint.split()[5]
    assert _listed(url, capsys, "--before", before) == ids[1::-1]

    assert main(["rollouts", "list", "--store", url, "--run", "nope"]) == 1
    assert "run 'nope' does not exist" in capsys.readouterr().err


def test_piping_into_head_ends_quietly(tmp_path: Path) -> None:
    """A real pipe: ``head`` exits after one line while the listing still writes."""
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            # ~2,000 lines, far more than a pipe's buffer holds
            await store.enqueue([RolloutCreate(input={}, task_id=f"t{i}") for i in range(2000)])

    asyncio.run(fill())
    command = (
        f"{sys.executable} -m fulmen rollouts list --store {url} --limit 5000 | head -1; "
        'echo "fulmen exited ${PIPESTATUS[0]}" >&2'
    )
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.stdout.split()[:2] == ["ROLLOUT", "STATUS"]
    assert done.stderr.strip() == "fulmen exited 141", done.stderr
