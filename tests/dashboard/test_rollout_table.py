"""The rollouts table over a real in-memory store: newest first, pages that neither skip nor
repeat, filters the store cannot apply (reward range, agent, task text) matching a brute-force
pass, and a scan budget that stops early and resumes where it stopped."""

from __future__ import annotations

import pytest

from fulmen.dashboard.rewards import RewardReader
from fulmen.dashboard.rollout_table import RolloutFilter, RolloutTable
from fulmen.store import open_store
from fulmen.types import Mode, RolloutCreate
from tests.dashboard.finished import finish_rollout

N = 60


def reward_of(i: int) -> float:
    return (i % 5) / 4  # 0, 0.25, 0.5, 0.75, 1.0


@pytest.fixture
async def table():  # type: ignore[no-untyped-def]
    async with open_store("memory://", watchdog_interval=None) as store:
        for i in range(N):
            mode = Mode.VAL if i % 3 == 0 else Mode.TRAIN
            await finish_rollout(
                store,
                f"r{i:03d}",
                task={"q": f"question {i}" + (" needle" if i % 7 == 0 else "")},
                reward=reward_of(i),
                mode=mode,
                reply="ok",
                agent="solver" if i % 2 else "planner",
            )
        yield store, RolloutTable(store, RewardReader(store))


async def all_pages(table: RolloutTable, where: RolloutFilter, **kw: int) -> list[str]:
    ids: list[str] = []
    before = None
    while True:
        page = await table.page(where, before=before, time_budget_s=None, **kw)
        ids += [item["rollout_id"] for item in page.items]
        if page.before is None:
            assert page.exhausted
            return ids
        before = page.before


async def test_pages_go_newest_first_without_gaps_or_repeats(table) -> None:  # type: ignore[no-untyped-def]
    store, t = table
    assert await t.newest_position() == N
    ids = await all_pages(t, RolloutFilter(), limit=7)
    assert ids == [f"r{i:03d}" for i in reversed(range(N))]
    # a rollout enqueued later is the new top
    await store.enqueue([RolloutCreate(rollout_id="late", input="x")])
    first = await t.page(RolloutFilter(), limit=1)
    assert [item["rollout_id"] for item in first.items] == ["late"]
    assert first.newest == N + 1


async def test_filters_match_a_brute_force_pass(table) -> None:  # type: ignore[no-untyped-def]
    _, t = table
    where = RolloutFilter(mode=Mode.VAL, min_reward=0.5, max_reward=0.75, agent="planner")
    expected = [
        f"r{i:03d}"
        for i in reversed(range(N))
        if i % 3 == 0 and 0.5 <= reward_of(i) <= 0.75 and i % 2 == 0
    ]
    assert expected  # the filter is not trivially empty
    assert await all_pages(t, where, limit=3) == expected
    text = await all_pages(t, RolloutFilter(text="NEEDLE"), limit=50)
    assert text == [f"r{i:03d}" for i in reversed(range(N)) if i % 7 == 0]


async def test_rows_carry_the_reward_in_the_store(table) -> None:  # type: ignore[no-untyped-def]
    _, t = table
    page = await t.page(RolloutFilter(), limit=N)
    assert {item["rollout_id"]: item["reward"] for item in page.items} == {
        f"r{i:03d}": reward_of(i) for i in range(N)
    }


async def test_a_costly_filter_stops_at_its_budget_and_resumes(table) -> None:  # type: ignore[no-untyped-def]
    _, t = table
    where = RolloutFilter(min_reward=1.0)
    first = await t.page(where, limit=50, budget=10, time_budget_s=None)
    assert first.examined == 10 and not first.exhausted and first.before == N - 10 + 1
    assert [item["rollout_id"] for item in first.items] == ["r059", "r054"]
    assert await all_pages(t, where, limit=50, budget=10) == [
        f"r{i:03d}" for i in reversed(range(N)) if reward_of(i) == 1.0
    ]


async def test_the_run_filter_matches_the_run_prefix_or_its_resources_versions() -> None:
    async with open_store("memory://", watchdog_interval=None) as store:
        for rollout_id in ("run1-g1-s0-t0-r0", "run1-g1-val0-t0", "run10-g1-s0-t0-r0", "other"):
            await finish_rollout(store, rollout_id, task="t", reward=1.0)
        t = RolloutTable(store, RewardReader(store))
        ids = await all_pages(t, RolloutFilter(run_id="run1"), limit=10)
        assert ids == ["run1-g1-val0-t0", "run1-g1-s0-t0-r0"]


async def test_a_request_past_its_time_budget_answers_with_what_it_has(table) -> None:  # type: ignore[no-untyped-def]
    _, t = table
    where = RolloutFilter(min_reward=1.0)
    page = await t.page(where, limit=50, time_budget_s=0.0)
    assert page.examined == 16 and not page.exhausted  # one chunk of rewards, then it stops
    assert page.before == N - 16 + 1
    text = await t.page(RolloutFilter(text="needle"), limit=50, time_budget_s=0.0)
    assert text.examined == N and text.exhausted  # the first window already held them all
