"""The end-of-run diagnosis names the bottleneck a run's metrics show, with what to change.

Runs whose outcome is known by construction: each record set makes one phase dominate.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.trainer.diagnosis import diagnose, engine_counters
from fulmen.types import Run, RunMetrics


def step(rollout: float, train: float, sync: float = 0.1, **extra: float) -> dict[str, float]:
    return {
        "time/step_s": rollout + train + sync,
        "time/rollout_s": rollout,
        "time/train_s": train,
        "time/sync_s": sync,
        "updated": 1.0,
        **extra,
    }


def lines(records: list[dict[str, float]], **options: Any) -> list[str]:
    return [f.line() for f in diagnose(records, **options)]


def test_rollouts_that_dominate_point_at_async() -> None:
    found = lines([step(rollout=9.0, train=1.0)] * 5)
    assert found[0].startswith("step time (5 steps, 0.8 min): rollouts 89%, the update 10%")
    assert any("rollouts take 89%" in line and "algorithm.async" in line for line in found)


def test_an_update_that_dominates_points_at_precision_and_data_parallel() -> None:
    found = lines([step(rollout=1.0, train=9.0)] * 3)
    assert any("the update takes 89%" in line and "autocast" in line for line in found)
    assert not any("rollouts take" in line for line in found)


def test_steps_without_an_update_say_the_most_common_reason() -> None:
    same = step(
        rollout=1.0, train=1.0, updated=0.0, transitions=8.0, groups=2.0,
        skipped_zero_advantage=8.0, **{"reward/mean": 0.0, "rollouts/finished": 8.0},
    )  # fmt: skip
    found = lines([same, same, same, step(rollout=1.0, train=1.0)])
    (line,) = [line for line in found if "made no update" in line]
    assert line.startswith("3 of 4 steps made no update; most often (3): every rollout in each")
    assert "algorithm.group_size" in line


def test_validation_and_the_prefix_cache() -> None:
    records = [step(rollout=1.0, train=1.0), {"time/val_s": 30.0}, {"time/val_s": 30.0}]
    page = (
        "# HELP x\nfulmen_engine_prefix_cache_enabled 1\n"
        "fulmen_engine_prefix_cache_hit_tokens_total 10\n"
        "fulmen_engine_prefix_cache_miss_tokens_total 90\n"
    )
    found = lines(records, engine=engine_counters(page))
    assert any(line.startswith("validation took 97% of the run (2 validations") for line in found)
    assert any("prefix cache served 10% of prompt tokens (10 of 100)" in line for line in found)


def test_an_asynchronous_run_that_waits_for_rollouts() -> None:
    waiting = step(rollout=0.0, train=2.0, **{"time/wait_data_s": 8.0})
    waiting["time/step_s"] = 10.0
    found = lines([waiting] * 2, is_async=True)
    assert any("waited for rollouts 80%" in line and "runners" in line for line in found)
    assert not any("rollouts take" in line for line in found)


def test_a_healthy_run_has_only_its_time_split() -> None:
    assert len(diagnose([step(rollout=4.0, train=4.0)] * 3)) == 1


def test_runs_diagnose_reads_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.start_run(Run(run_id="r1", name="r1", started_at=1.0))
            await store.add_run_metrics(
                [
                    RunMetrics(run_id="r1", step=i, time=float(i), values=step(9.0, 1.0))
                    for i in range(1, 4)
                ]
            )

    asyncio.run(fill())
    assert main(["runs", "diagnose", "r1", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "rollouts take 89% of step time" in out


async def _run_with_validation(
    store: Any, run_id: str, config: dict[str, Any], rewards: list[float | None]
) -> None:
    """A run whose final validation (step 4) scored ``rewards`` (``None``: a failed rollout)."""
    from fulmen.types import AttemptStatus, Mode, RewardCreate, RolloutCreate

    await store.start_run(Run(run_id=run_id, name=run_id, config=config, started_at=1.0))
    await store.add_run_metrics(
        [RunMetrics(run_id=run_id, step=i, time=float(i), values=step(3.0, 1.0)) for i in (1, 2)]
    )
    for tag in ("val0", "val4"):  # the final validation is the one enqueued last
        for i, reward in enumerate(rewards):
            rid = f"{run_id}-g1-{tag}-t{i}"
            await store.enqueue(
                [RolloutCreate(input={}, mode=Mode.VAL, task_id=f"v{i}", rollout_id=rid)]
            )
            (claim,) = await store.claim("w")
            if reward is None:
                await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.FAILED)
                continue
            value = reward if tag == "val4" else 0.0
            await store.add_reward(RewardCreate(rollout_id=rid, values={"reward": value}))
            await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)


def test_runs_compare_names_the_differing_setting_and_the_paired_gain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B differs from A only by its learning rate and scores higher on the same tasks."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    base = {"model": "tiny", "run_dir": "/x/a", "algorithm": {"grpo": {"learning_rate": 1e-5}}}
    other = {**base, "run_dir": "/x/b", "algorithm": {"grpo": {"learning_rate": 1e-4}}}

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await _run_with_validation(store, "ra", base, [0.0, 0.0, 1.0, 0.0, None])
            await _run_with_validation(store, "rb", other, [1.0, 1.0, 1.0, 0.0, 1.0])

    asyncio.run(fill())
    assert main(["runs", "compare", "ra", "rb", "--store", url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["differences"] == {"algorithm.grpo.learning_rate": [1e-05, 0.0001]}
    ra, rb = result["runs"]
    assert (ra["final"], ra["tasks"]) == (0.25, 4) and (rb["final"], rb["tasks"]) == (0.8, 5)
    assert ra["split"]["rollouts"] == pytest.approx(3.0 / 4.1)
    paired = result["paired"]["rb"]
    assert paired["n"] == 4 and paired["mean_difference"] == 0.5  # v4 failed in ra: not paired
    assert main(["runs", "compare", "ra", "rb", "--store", url]) == 0
    text = capsys.readouterr().out
    assert "algorithm.grpo.learning_rate" in text and "rb - ra on 4 shared validation tasks" in text


def test_runs_suggest_names_the_setting_that_made_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six finished runs: the learning rate decides the gain, the group size (also varied) does
    not; the proposal sets the learning rate only, and each statement says its runs."""
    from fulmen.trainer.config import load_config
    from fulmen.types import RunStatus

    url = f"sqlite:///{tmp_path / 'store.db'}"
    toy = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"
    recorded = json.loads(load_config(toy).model_dump_json())
    # (learning rate, group size, final validation after 10 minutes of steps, from 0.1)
    plan = [(0.01, 8, 0.9), (0.01, 4, 0.85), (0.01, 8, 0.8), (0.001, 4, 0.2), (0.001, 8, 0.25),
            (0.001, 4, 0.3)]  # fmt: skip

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            for i, (lr, group, final) in enumerate(plan):
                config = json.loads(json.dumps(recorded))
                config["algorithm"]["grpo"]["learning_rate"] = lr
                config["algorithm"]["group_size"] = group
                run_id = f"r{i}"
                await store.start_run(
                    Run(run_id=run_id, name=run_id, config=config, started_at=1.0)
                )
                values = [
                    RunMetrics(run_id=run_id, step=0, time=0.0, values={"val/reward_mean": 0.1}),
                    RunMetrics(run_id=run_id, step=1, time=1.0, values=step(299.0, 300.0, 1.0)),
                    RunMetrics(run_id=run_id, step=2, time=2.0, values={"val/reward_mean": final}),
                ]
                await store.add_run_metrics(values)
                await store.update_run(run_id, status=RunStatus.SUCCEEDED, ended_at=2.0)

    asyncio.run(fill())
    assert main(["runs", "suggest", str(toy), "--store", url, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["runs"] == 6
    by_key = {s["key"]: s for s in result["statements"]}
    lr = by_key["algorithm.grpo.learning_rate"]
    assert lr["best"] == 0.01 and lr["shown"] and [m["runs"] for m in lr["means"]] == [3, 3]
    assert not by_key["algorithm.group_size"]["shown"]
    assert result["proposal"] == {}  # the toy config already uses 0.01
    assert main(["runs", "suggest", str(toy), "--store", url, "--set",
                 "algorithm.grpo.learning_rate=0.001"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "--set algorithm.grpo.learning_rate=0.01   (now 0.001)" in text
    assert "algorithm.group_size" in text and "not shown" in text


def test_rollouts_that_ran_in_waves_point_at_concurrency_and_runners() -> None:
    waves = {"rollouts/finished": 16.0, "rollouts/concurrency_max": 4.0}
    found = lines([step(9.0, 1.0, **waves, **{"rollouts/concurrency_mean": 3.5})] * 3)
    (line,) = [line for line in found if "ran in waves" in line]
    assert line.startswith("at most 4 rollouts ran at once for 16 a step (on average 3.5 at once)")
    assert "rollouts.concurrency" in line and "cluster.runners" in line
    # All of a step's rollouts at once, or an update that dominates: nothing to say.
    at_once = {**waves, "rollouts/concurrency_max": 16.0}
    assert not any("waves" in line for line in lines([step(9.0, 1.0, **at_once)]))
    assert not any("waves" in line for line in lines([step(1.0, 9.0, **waves)]))


def test_the_engine_counters_name_a_small_batch_and_a_long_admission_wait() -> None:
    page = (
        "fulmen_engine_max_batch 8\nfulmen_engine_decode_passes_total 100\n"
        "fulmen_engine_decode_rows_total 150\nfulmen_engine_admitted_requests_total 10\n"
        "fulmen_engine_queue_wait_seconds_total 30.5\n"
    )
    engine = engine_counters(page)
    found = lines([step(9.0, 1.0)] * 2, engine=engine)
    (batch,) = [line for line in found if "sequences a pass" in line]
    assert batch.startswith("the engine decoded 1.5 sequences a pass on average, below 50% of")
    assert "engine.max_batch 8" in batch and "rollouts.concurrency" in batch
    (wait,) = [line for line in found if "waited" in line]
    assert wait.startswith("model calls waited 3.0 s on average for a place in the engine's")
    assert "(above 1 s; 10 requests)" in wait and "cluster.engine_replicas" in wait
    # The update dominates: a small batch is no bottleneck (the wait still is worth saying).
    found = lines([step(1.0, 9.0)] * 2, engine=engine)
    assert not any("sequences a pass" in line for line in found)
    assert any("model calls waited" in line for line in found)
    # As many rollouts at once as the engine batches: more at once would not fill it (the toy
    # example's 32 at once on a loaded machine drew this advice).
    at_once = step(9.0, 1.0, **{"rollouts/concurrency_max": 8.0, "rollouts/finished": 8.0})
    found = lines([at_once] * 2, engine=engine)
    assert not any("sequences a pass" in line for line in found)


def test_records_and_counters_from_before_these_figures_give_no_finding() -> None:
    old_engine = {"fulmen_engine_prefix_cache_enabled": 0.0, "fulmen_engine_decode_passes_total": 9}
    found = lines([step(9.0, 1.0, **{"rollouts/finished": 16.0})] * 2, engine=old_engine)
    assert len(found) == 2 and "rollouts take 89%" in found[1]
