"""End to end on CPU: the toy agent learns with the whole stack (store, engine, gateway, runner,
adapter, GRPO), and the two-call variant trains only the selected agent."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.trainer.trainer import Trainer

pytest.importorskip("torch")
pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"


def _config(tmp_path: Path, *overrides: str) -> Any:
    return load_config(TOY / "config.yaml", overrides=[f"run_dir={tmp_path / 'run'}", *overrides])


@pytest.mark.slow
def test_toy_agent_reward_rises_to_near_maximum(tmp_path: Path) -> None:
    # 40 steps: alone, six seeds validated at 1.0 by step 30 (0.63-1.0 at step 20); under the
    # full suite's load one CI run stood at 0.73 at step 30 (batching, hence sampling, differs)
    config = _config(tmp_path, "algorithm.steps=40", "validation.every=40")
    trainer = Trainer(config)
    history = trainer.fit()
    assert len(history) == 40
    # The shipped example must not trip its own diagnosis: it ran its 32 rollouts a step in two
    # waves of 16 (rollouts.concurrency) until issue 48.
    findings = [finding.line() for finding in trainer.diagnosis]
    assert not any("in waves" in line for line in findings), findings
    records = read_metrics(config.run_dir / "metrics.jsonl")
    val = [r["val/reward_mean"] for r in records if "val/reward_mean" in r]
    assert len(val) == 2  # before training and after the last step
    before, after = val
    assert before < 0.3
    assert after >= 0.8, f"validation reward {before:.3f} -> {after:.3f}"
    first_train = [h["reward/mean"] for h in history[:3]]
    last_train = [h["reward/mean"] for h in history[-3:]]
    # means of three steps of 32 sampled rollouts: one noisy step must not decide it (CI saw a
    # last-three of 0.50/0.63/0.80 after 0.15/0.15/0.19 while validation reached >= 0.8)
    assert sum(last_train) / 3 > sum(first_train) / 3 + 0.4
    assert all(h["transitions"] == 32 for h in history)
    _check_on_policy(history)
    assert (config.run_dir / "state.json").exists()
    state = json.loads((config.run_dir / "state.json").read_text())
    assert state["step"] == 40
    _check_models_compare(config.run_dir, before, after)


def _check_models_compare(run_dir: Path, before: float, after: float) -> None:
    """``fulmen models compare`` finds the trained version better than base, by a CI above 0.

    The run went from ``before`` to ``after`` on validation: the comparison of its last model
    version against the model before training must say so with the right sign (issue 32).
    """
    url = f"sqlite:///{run_dir / 'store.db'}"

    async def last_version() -> tuple[str, int]:
        async with open_store(url, watchdog_interval=None) as store:
            (run,) = (await store.list_runs()).items
            versions = await store.list_model_versions(run.run_id)
            return run.run_id, versions[-1].version

    run_id, version = asyncio.run(last_version())
    args = ["models", "compare", run_id, "base", str(version), "--store", url,
            "--config", str(TOY / "config.yaml"), "--set", f"run_dir={run_dir.parent / 'cmp'}",
            "-n", "16", "--json"]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(args) == 0
    comparison = json.loads(printed.getvalue())["comparison"]
    assert comparison["n"] == 16
    assert comparison["mean_difference"] > 0 and comparison["ci_low"] > 0, (
        f"validation {before:.2f} -> {after:.2f}, compare: {comparison}"
    )


@pytest.mark.slow
def test_two_call_agent_trains_only_the_selected_agent(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "agent=agent:toy_two_calls",
        "algorithm.steps=2",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
        "algorithm.transitions={agents: [actor]}",
        "validation=null",
        "data.val=null",
        "rollouts.train_sampling={temperature: 0.8, max_tokens: 8}",
    )
    assert config.algorithm.grpo.temperature == 0.8  # derived from train_sampling
    history = Trainer(config).fit()
    _check_on_policy(history)
    for step in history:
        assert step["transitions"] == 8  # 8 rollouts, one actor call each
        assert step["transitions/calls"] == 16  # planner + actor
        assert step["transitions/skipped_agent"] == 8  # every planner call left out
        assert step["updated"] in (0.0, 1.0)
    _check_agent_attribution(config.run_dir / "store.db")
    # The run folder and its store are its owner's only (docs/security.md); the calls above
    # were made with attempt keys through a gateway that holds a token of its own.
    assert stat.S_IMODE(config.run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((config.run_dir / "store.db").stat().st_mode) == 0o600


def _check_on_policy(history: list[dict[str, Any]]) -> None:
    """The engine's recorded logprobs are the trainer's: one epoch per step is on-policy.

    ``logprob_gap`` is the mean |trainer - recorded| logprob of the trained tokens before the
    update; a temperature applied on one side only, a chat-template mismatch or a stale
    adapter in the engine would each move it far past 1e-4 (measured here: ~1e-6).
    """
    trained = [h for h in history if "logprob_gap" in h]
    assert trained, "no step trained"
    for h in trained:
        assert h["logprob_gap"] < 1e-4, h
        assert h["ratio_mean"] == pytest.approx(1.0, abs=1e-4), h
        # the engine reports the version of the weights that served each call, so retiring
        # the previous adapter does not make the current policy's calls look stale
        assert h["stale"] == 0, h


def _check_agent_attribution(db: Path) -> None:
    import asyncio

    from fulmen.store import open_store
    from fulmen.transitions.trajectory import TransitionOptions, load_trajectory
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    async def check() -> None:
        async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
            page = await store.query_rollouts(
                RolloutQuery(mode=Mode.TRAIN, statuses=[RolloutStatus.SUCCEEDED])
            )
            assert len(page.items) == 16
            for rollout in page.items:
                actor_only = await load_trajectory(
                    store, rollout.rollout_id, options=TransitionOptions(agents=("actor",))
                )
                assert [t.agent_name for t in actor_only.transitions] == ["actor"]
                both = await load_trajectory(store, rollout.rollout_id)
                assert [t.agent_name for t in both.transitions] == ["planner", "actor"]

    asyncio.run(check())


@pytest.mark.slow
def test_steps_between_checkpoints_advance(tmp_path: Path) -> None:
    # the saved progress moves only at checkpoints; step 2 once re-ran step 1's rollout ids
    config = _config(
        tmp_path,
        "algorithm.steps=3",
        "algorithm.checkpoint_every=2",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=2",
        "validation=null",
        "data.val=null",
    )
    history = Trainer(config).fit()
    assert len(history) == 3
    checkpoints = sorted(p.name for p in (config.run_dir / "checkpoints").iterdir())
    assert checkpoints[-1] == "step-00003"
    assert json.loads((config.run_dir / "state.json").read_text())["step"] == 3
