"""``fulmen rescore``: new reward functions over real toy rollouts in a SQLite store, without
running the agent; ``--write`` stores named values through the reward API, idempotently."""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.transitions.trajectory import load_attempt
from tests.debugging.conftest import run_rollouts

pytestmark = pytest.mark.usefixtures("toy_imports")

TASKS = [{"id": f"t{i}", "prompt": f"Task {i}: write the letter a."} for i in range(12)]
REWARDS = "tests.debugging.rewards"


@pytest.fixture
def stored(tmp_path: Path, engine_url: str) -> tuple[str, dict[str, float]]:
    """A store of 12 sampled toy rollouts and each one's recorded reward."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ids = asyncio.run(run_rollouts(url, engine_url, "agent:toy_agent", TASKS, prefix="toy"))
    return url, asyncio.run(_rewards(url, ids))


async def _rewards(url: str, ids: list[str]) -> dict[str, float]:
    async with open_store(url, watchdog_interval=None) as store:
        out: dict[str, float] = {}
        for rid in ids:
            reward = (await load_attempt(store, rid)).final_reward
            assert reward is not None
            out[rid] = reward
        return out


def rescore(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["rescore", "--store", url, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_agents_own_reward_recomputed_changes_nothing(
    stored: tuple[str, dict[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, old = stored
    summary = rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy")
    assert (summary["rollouts"], summary["scored"], summary["changed"]) == (12, 12, 0)
    assert summary["old"]["mean"] == summary["new"]["mean"] == statistics.fmean(old.values())
    assert [(b["old"], b["new"]) for b in summary["histogram"]] == [
        (b["old"], b["old"]) for b in summary["histogram"]
    ]


def test_a_new_reward_shows_the_expected_changes_and_distribution(
    stored: tuple[str, dict[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, old = stored
    summary = rescore(url, capsys, "--reward", f"{REWARDS}:twice_as_generous", "--top", "50")
    new = {rid: min(1.0, 2 * r) for rid, r in old.items()}
    changed = {rid for rid, r in old.items() if 0 < r < 1}
    assert changed, old  # sampled rewards: some strictly between 0 and 1
    assert summary["changed"] == len(changed)
    assert {i["rollout_id"] for i in summary["most_changed"]} == changed
    changes = [abs(i["change"]) for i in summary["most_changed"]]
    assert changes == sorted(changes, reverse=True)
    assert summary["new"]["mean"] == pytest.approx(statistics.fmean(new.values()))
    assert sum(b["old"] for b in summary["histogram"]) == 12
    assert sum(b["new"] for b in summary["histogram"]) == 12
    # The text report shows the same figures.
    capsys.readouterr()
    assert main(["rescore", "--store", url, "--reward", f"{REWARDS}:twice_as_generous"]) == 0
    out = capsys.readouterr().out
    assert f"{len(changed)} changed" in out
    assert f"new reward: n=12 mean={statistics.fmean(new.values()):.4f}" in out


def test_filters_and_errors_of_the_reward_function(
    stored: tuple[str, dict[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = stored
    one = rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy", "--task", "t3")
    assert one["rollouts"] == 1
    assert (
        rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy", "--mode", "val")["rollouts"] == 0
    )
    assert (
        rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy", "--limit", "5")["rollouts"] == 5
    )
    assert (
        rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy", "--since", "1h")["rollouts"]
        == 12
    )
    later = rescore(url, capsys, "--reward", f"{REWARDS}:same_as_toy", "--since", "2999-01-01")
    assert later["rollouts"] == 0
    failing = rescore(url, capsys, "--reward", f"{REWARDS}:fails_on_first_task")
    assert (failing["scored"], failing["failed"]) == (11, 1)
    assert failing["errors"][0]["error"] == "ValueError: no reward for t0"


def test_write_stores_named_values_and_keeps_the_reward_unless_primary(
    stored: tuple[str, dict[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, old = stored
    args = ["--reward", f"{REWARDS}:twice_as_generous", "--write", "generous"]
    written = rescore(url, capsys, *args)["written"]
    assert written == sum(0 < r < 1 for r in old.values())
    assert rescore(url, capsys, *args)["written"] == written  # posted again, stored once

    async def read() -> dict[str, tuple[float | None, int, list[dict[str, float]]]]:
        async with open_store(url, watchdog_interval=None) as store:
            out = {}
            for rid in old:
                rewards = await store.list_rewards(rid)
                final = (await load_attempt(store, rid)).final_reward
                out[rid] = (final, len(rewards), [r.values for r in rewards])
            return out

    after = asyncio.run(read())
    for rid, reward in old.items():
        final, count, values = after[rid]
        assert final == reward  # the rollout's reward is what it was
        if 0 < reward < 1:
            assert count == 1 and values[0]["generous"] == min(1.0, 2 * reward)
        else:
            assert count == 0
    rescore(url, capsys, *args, "--primary")
    promoted = asyncio.run(read())
    for rid, reward in old.items():
        assert promoted[rid][0] == min(1.0, 2 * reward)
