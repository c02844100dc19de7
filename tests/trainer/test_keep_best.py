"""A run never silently ends worse than it started (``validation.keep_best``).

The rule (``pick_best``: the best ``val/reward_mean``, ties to the later version), the loud
warning (``validation_change``: more than two paired standard errors below the baseline), what
the end of a run serves on a stand-in engine (an adapter, the original weights, a vanished
version, an earlier stage's prompts), and real toy runs of ``fulmen train`` whose validation
falls under a learning rate far too high: they end serving their best version, and with
``keep_best: false`` their last.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.trainer import best
from fulmen.trainer.best import (
    Validated,
    end_run,
    pick_best,
    read_validations,
    record_validation,
    validation_change,
)
from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import MetricsLogger, read_metrics
from fulmen.trainer.run_record import RunRecorder
from fulmen.trainer.stages import last_stage_context
from fulmen.trainer.state import RunState, ServedFiles
from fulmen.trainer.training_run import TrainingRun
from fulmen.types import LLMResource, PromptTemplate, Run, RunStatus
from tests.algorithms.sft.test_sft_train import example_imports_restored

__all__ = ["example_imports_restored"]  # an autouse fixture: the toy runs import its agent

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def validated(step: int, score: float, **served: Any) -> Validated:
    rewards = served.pop("rewards", [score] * 4)
    return Validated(
        run_id="run", step=step, scores={"val/reward_mean": score}, rewards=rewards, **served
    )


# -- the rule --------------------------------------------------------------------------------


def test_the_best_score_wins_and_a_tie_keeps_the_later_version() -> None:
    versions = [validated(0, 0.2), validated(2, 0.5), validated(4, 0.5), validated(6, 0.1)]
    assert pick_best(versions) == versions[2]
    assert pick_best(list(reversed(versions))) == versions[2]  # by step, not by order given
    assert pick_best([validated(0, 0.2), validated(1, 0.2)]).step == 1  # type: ignore[union-attr]
    assert pick_best([validated(0, 0.2), validated(1, 0.3)]).step == 1  # type: ignore[union-attr]
    assert pick_best([]) is None


def test_validations_are_read_back_per_step_latest_first_of_this_run_only(tmp_path: Path) -> None:
    record_validation(tmp_path, validated(0, 0.2))
    record_validation(tmp_path, validated(3, 0.4, adapter="adapters/step-00003"))
    record_validation(tmp_path, validated(3, 0.6, adapter="adapters/step-00003"))  # again
    record_validation(tmp_path, validated(5, math.nan))  # not kept
    record_validation(tmp_path, Validated(run_id="other", step=7, scores={"val/reward_mean": 1}))
    with (tmp_path / "validations.jsonl").open("a") as out:
        out.write('{"run_id": "run", "step": 9, "sco')  # torn by a crash
    read = read_validations(tmp_path, "run")
    assert [(v.step, v.score) for v in read] == [(0, 0.2), (3, 0.6)]
    assert read[1].adapter == "adapters/step-00003"


def test_a_fall_of_more_than_two_paired_standard_errors_is_loud() -> None:
    baseline = validated(0, 0.5, rewards=[0.5, 0.6, 0.4, 0.5])
    fallen = validated(4, 0.25, rewards=[0.2, 0.3, 0.3, 0.2])
    change = validation_change(baseline, fallen)
    differences = [-0.3, -0.3, -0.1, -0.3]
    mean = sum(differences) / 4
    spread = math.sqrt(sum((d - mean) ** 2 for d in differences) / 3)
    assert change is not None and change.tasks == 4
    assert change.delta == pytest.approx(-0.25)
    assert change.standard_error == pytest.approx(spread / 2)
    assert change.fell
    report = best.EndOfRun(final=fallen, keep_best=True, change=change)
    (line,) = report.warnings()
    assert "WARNING: validation FELL" in line
    assert "0.500 before training -> 0.250 after" in line
    assert "standard errors below, paired over 4 validation tasks" in line
    assert report.summary()[0] == line
    assert report.metrics()["end/val_fell"] == 1.0


def test_a_fall_within_the_noise_or_a_rise_is_not_a_warning() -> None:
    baseline = validated(0, 0.5, rewards=[1.0, 0.0, 1.0, 0.0])
    noisy = validated(4, 0.25, rewards=[0.0, 1.0, 0.0, 0.0])  # one task better, two worse
    change = validation_change(baseline, noisy)
    assert change is not None and not change.fell
    rise = validation_change(baseline, validated(4, 0.75))
    assert rise is not None and not rise.fell
    report = best.EndOfRun(final=noisy, keep_best=True, change=change)
    assert report.warnings() == []


def test_every_task_falling_by_the_same_amount_is_loud_and_other_lengths_pair_a_prefix() -> None:
    baseline = validated(0, 0.5, rewards=[0.5] * 8)
    uniform = validation_change(baseline, validated(3, 0.25, rewards=[0.25] * 8))
    assert uniform is not None and uniform.standard_error == 0 and uniform.fell
    report = best.EndOfRun(final=validated(3, 0.25), keep_best=True, change=uniform)
    assert "every task fell" in report.warnings()[0]
    # other task lists (max_tasks changed on resume): the first 6 tasks are the same tasks,
    # so the change is paired over them: 0.5 -> 0.0, differences -1, 0, -1, 0, -1, 0
    shorter = validation_change(
        validated(0, 0.5, rewards=[1.0, 0.0] * 4), validated(3, 0.0, rewards=[0.0] * 6)
    )
    assert shorter is not None and (shorter.tasks, shorter.left_out) == (6, 2)
    assert (shorter.baseline, shorter.final) == (0.5, 0.0)
    assert shorter.standard_error == pytest.approx(math.sqrt(0.3 / 6))
    assert shorter.fell  # 0.5 below, with a standard error of 0.22
    one_task = validation_change(validated(0, 1.0, rewards=[1.0]), validated(1, 0.0, rewards=[0]))
    assert one_task is not None and not one_task.fell  # no spread to judge by


def test_a_failed_validation_rollout_counts_as_zero_so_failing_cannot_win() -> None:
    """Issue 46, item 3: 6 of 8 rollouts failed and the other 2 solved (1.000 over the tasks
    scored) used to beat a version that solved 5 of 8 (0.625), and the end of the run
    reported +0.750 where the paired difference over the tasks scored both times is 0."""
    base = validated(0, 0.25, rewards=[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    good = validated(3, 0.625, rewards=[1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    failing = validated(6, 1.0, rewards=[1.0, 1.0, None, None, None, None, None, None])
    assert failing.score == 1.0  # val/reward_mean: over the 2 tasks scored
    assert failing.ranked_score() == 0.25 and pick_best([base, good, failing]) == good
    change = validation_change(base, failing)
    assert change is not None
    assert (change.baseline, change.final, change.delta, change.tasks) == (0.25, 0.25, 0.0, 8)
    report = best.EndOfRun(final=failing, keep_best=True, best=good, kept=good, change=change)
    assert report.summary() == [
        "validation reward: before 0.250 -> after 0.250 (+0.000 ± 0.000, paired over 8 "
        "validation tasks; 6 failed validation rollouts counted as 0)",
        "serving step 3's version: its validation 0.625 beat the final 0.250 "
        "(validation.keep_best)",
    ]
    metrics = report.metrics()
    assert (metrics["end/final_reward_mean"], metrics["end/served_reward_mean"]) == (0.25, 0.625)
    assert (metrics["end/val_before"], metrics["end/val_after"]) == (0.25, 0.25)
    assert (metrics["end/val_change"], metrics["end/val_change_tasks"]) == (0.0, 8.0)
    # validation.failed_rollouts: leave_out, the explicit other rule: each version on the tasks
    # it scored, and the change paired over the 2 tasks scored both times (1.0 -> 1.0)
    assert pick_best([base, good, failing], failed="leave_out") == failing
    left = validation_change(base, failing, failed="leave_out")
    assert left is not None and (left.baseline, left.final, left.tasks) == (1.0, 1.0, 2)
    assert left.line() == (
        "validation reward: before 1.000 -> after 1.000 (+0.000 ± 0.000, paired over 2 "
        "validation tasks; 6 tasks left out (not scored by both validations))"
    )


def test_with_leave_out_and_no_task_scored_both_times_nothing_is_compared() -> None:
    base = validated(0, 0.5, rewards=[1.0, 0.0, None, None])
    final = validated(4, 1.0, rewards=[None, None, 1.0, 1.0])
    assert validation_change(base, final, failed="leave_out") is None
    report = best.EndOfRun(final=final, keep_best=True, failed="leave_out", baseline=base)
    assert report.summary() == [
        "validation reward: no validation task was scored both before and after training "
        "(2 of 4 rollouts failed before, 2 of 4 after): nothing to compare"
    ]


def test_every_rollout_failing_is_recorded_and_ranked_last(tmp_path: Path) -> None:
    record_validation(tmp_path, validated(0, 0.25, rewards=[1.0, 0.0, 0.0, 0.0]))
    record_validation(tmp_path, validated(2, math.nan, rewards=[None] * 4))
    read = read_validations(tmp_path, "run")
    assert [(v.step, v.ranked_score()) for v in read] == [(0, 0.25), (2, 0.0)]
    assert pick_best(read) == read[0]
    change = validation_change(read[0], read[1])
    assert change is not None and change.delta == -0.25 and change.zeroed == 4


# -- what the end of a run serves (a stand-in engine) ----------------------------------------


class FakeEngine:
    """Records what it is asked to serve, like the built-in engine's adapter table."""

    capabilities = SimpleNamespace(full_reload=True)

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}
        self.weights: str | None = "original"
        self.version = 0
        self.calls: list[tuple[str, Any]] = []

    async def load_adapter(self, name: str, path: str) -> int:
        self.calls.append(("load", name))
        self.adapters[name] = path
        self.version += 1
        return self.version

    async def unload_adapter(self, name: str) -> int:
        self.calls.append(("unload", name))
        del self.adapters[name]
        self.version += 1
        return self.version

    async def reload_weights(self, path: str | None = None) -> int:
        self.calls.append(("reload", path))
        self.weights = path or "original"
        self.version += 1
        return self.version


CONFIG = """
model: tiny
agent: agent:toy_agent
data: {train: agent:train_tasks, val: agent:val_tasks}
validation: {every: 1}
"""


@contextlib.asynccontextmanager
async def running_training(tmp_path: Path, *overrides: str) -> AsyncIterator[tuple[Any, Any]]:
    """A ``TrainingRun`` of the config above on a stand-in engine, a memory store and a record."""
    (tmp_path / "config.yaml").write_text(CONFIG, encoding="utf-8")
    config = load_config(tmp_path / "config.yaml", overrides=[f"run_dir={tmp_path}", *overrides])
    state = RunState(tmp_path)
    state.run_id = "run"
    async with open_store("memory://", watchdog_interval=None) as store:
        stack = SimpleNamespace(engine=FakeEngine(), engine_url="http://engine/v1", store=store)
        with MetricsLogger(tmp_path) as metrics:
            run = Run(run_id="run", name="run", started_at=1.0)
            training = TrainingRun(
                config=config,
                stack=stack,  # type: ignore[arg-type]
                metrics=metrics,
                state=state,
                model_path=tmp_path / "base-model",
                train_tasks=[{"id": "t0"}],
                val_tasks=[{"id": "v0"}, {"id": "v1"}],
                uses_stages=config.stages is not None,
                recorder=RunRecorder(store, run, flush_s=0.05),
            )
            await training.recorder.start()
            metrics.add_sink(training.recorder.metrics)
            try:
                yield training, store
            finally:
                await training.recorder.finish(RunStatus.SUCCEEDED)


def trained(tmp_path: Path, *steps: tuple[int, float]) -> None:
    """Validations of the base model (0.3) and of ``adapters/step-N`` after each step."""
    record_validation(tmp_path, validated(0, 0.3))
    for step, score in steps:
        adapter = f"adapters/step-{step:05d}"
        (tmp_path / adapter).mkdir(parents=True, exist_ok=True)
        record_validation(tmp_path, validated(step, score, adapter=adapter))


async def serve_final(training: Any, adapter: str, name: str) -> None:
    """Serve ``adapter`` as training leaves it: hot-loaded, named in the state."""
    await training.policy.models.load_adapter(training.config.run_dir / adapter, name)
    training.state.served = ServedFiles(adapter=adapter)


async def test_an_earlier_adapter_that_scored_higher_is_served_again(tmp_path: Path) -> None:
    async with running_training(tmp_path) as (training, store):
        trained(tmp_path, (1, 0.5), (2, 0.1))
        await serve_final(training, "adapters/step-00002", "policy-2")
        report = await end_run(training, last_stage_context(training).rollouts)
        await training.recorder.finish(RunStatus.SUCCEEDED)
        engine = training.stack.engine
        assert report is not None and report.kept is not None and report.kept.step == 1
        assert engine.adapters == {"policy-1-kept": str(tmp_path / "adapters" / "step-00001")}
        latest = await store.latest_resources()
        assert latest is not None and latest.metadata["kept_step"] == 1
        llm = latest.resources["llm"]
        assert isinstance(llm, LLMResource) and llm.model == "policy-1-kept"
        assert report.notes() == [
            "serving step 1's version: its validation 0.500 beat the final 0.100 "
            "(validation.keep_best)"
        ]
        # 0.3 -> 0.1 on each of 4 tasks: more than two standard errors, and loudly
        assert report.change is not None and report.change.fell
        assert report.summary() == [
            *report.warnings(),
            "validation reward: before 0.300 -> after 0.100 (-0.200 ± 0.000, paired over 4 "
            "validation tasks)",
            *report.notes(),
        ]
        (recorded,) = (await store.query_run_metrics("run")).items  # the run's record has it
        assert (recorded.step, recorded.values["end/served_step"]) == (2, 1.0)
        # state.json keeps what training reached: a resumed run trains on from step 2
        assert training.policy.served.adapter == "adapters/step-00002"
    end = read_metrics(tmp_path / "metrics.jsonl")[-1]
    assert (end["step"], end["end/served_step"], end["end/kept_earlier"]) == (2, 1, 1.0)


async def test_the_model_before_training_is_served_again_when_it_was_best(tmp_path: Path) -> None:
    async with running_training(tmp_path) as (training, store):
        trained(tmp_path, (1, 0.2), (2, 0.3))  # a tie with the base model: the later wins
        await serve_final(training, "adapters/step-00002", "policy-2")
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is None and report.best is None
        assert training.stack.engine.adapters == {"policy-2": str(tmp_path / "adapters/step-00002")}
        # step 2 validated again (a restart), worse: the base model (no adapter) comes back
        record_validation(tmp_path, validated(2, 0.0, adapter="adapters/step-00002"))
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is not None and report.kept.step == 0
        assert training.stack.engine.adapters == {}
        assert training.policy.models.model_name == "tiny" and training.policy.version is None
        assert report.notes() == [
            "serving step 0's version (the model before training): its validation 0.300 "
            "beat the final 0.000 (validation.keep_best)"
        ]
        latest = await store.latest_resources()
        assert latest is not None and latest.resources["llm"].model == "tiny"  # type: ignore[union-attr]


async def test_with_keep_best_off_or_files_gone_the_final_version_stays(tmp_path: Path) -> None:
    async with running_training(tmp_path, "validation.keep_best=false") as (training, store):
        trained(tmp_path, (1, 0.5), (2, 0.1))
        await serve_final(training, "adapters/step-00002", "policy-2")
        calls = list(training.stack.engine.calls)
        published = await store.latest_resources()
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is None and report.best is not None
        assert (
            training.stack.engine.calls == calls and training.policy.models.model_name == "policy-2"
        )
        assert await store.latest_resources() == published
        assert report.summary()[-1] == (
            "step 1's version had the best validation (0.500 beat the final 0.100); "
            "validation.keep_best is off: serving the final version"
        )
        assert "WARNING: validation FELL" in report.summary()[0]  # whatever keep_best says

        training.config = load_config(
            tmp_path / "config.yaml", overrides=[f"run_dir={tmp_path}"]
        )  # keep_best on, but step 1's adapter is gone
        shutil.rmtree(tmp_path / "adapters" / "step-00001")
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is None and report.missing
        assert training.stack.engine.calls == calls
        assert (
            "its files are gone (adapters/step-00001): serving the final version"
            in (report.notes()[0])
        )


async def test_full_weights_give_way_to_the_original_ones(tmp_path: Path) -> None:
    async with running_training(tmp_path) as (training, store):
        record_validation(tmp_path, validated(0, 0.6))
        (tmp_path / "weights" / "step-00002").mkdir(parents=True)
        record_validation(tmp_path, validated(2, 0.2, weights="weights/step-00002"))
        weights = tmp_path / "weights" / "step-00002"
        await training.policy.models.reload_weights(weights, "weights-2")
        training.state.served = ServedFiles(weights="weights/step-00002")
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is not None and report.kept.step == 0
        engine = training.stack.engine
        assert engine.calls[-1] == ("reload", None) and engine.weights == "original"
        assert training.policy.models.model_name == "tiny"
        assert training.policy.served.weights == "weights/step-00002"  # what training reached
        latest = await store.latest_resources()
        assert latest is not None and latest.metadata["kept_step"] == 0


async def test_stages_pick_once_across_the_run_with_the_kept_prompts(tmp_path: Path) -> None:
    """An earlier stage's version (its adapter and the prompt it carried) beats the last."""
    async with running_training(tmp_path, "algorithm=null", "stages=[sft, grpo]") as (
        training,
        store,
    ):
        prompt = PromptTemplate(template="Say {prompt}")
        record_validation(tmp_path, validated(0, 0.1))
        sft_adapter = "stages/0-sft/adapters/round-002"
        (tmp_path / sft_adapter).mkdir(parents=True)
        record_validation(
            tmp_path,
            validated(2, 0.7, adapter=sft_adapter, stage=0, resources={"prompt": prompt}),
        )
        grpo_adapter = "stages/1-grpo/adapters/step-00003"
        (tmp_path / grpo_adapter).mkdir(parents=True)
        record_validation(tmp_path, validated(5, 0.4, adapter=grpo_adapter, stage=1))
        training.state.stage, training.state.step_offset = 1, 2
        await serve_final(training, grpo_adapter, "policy-5")
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is not None and report.kept.step == 2
        assert training.stack.engine.adapters == {"policy-2-kept": str(tmp_path / sft_adapter)}
        latest = await store.latest_resources()
        assert latest is not None and latest.resources["prompt"] == prompt
        assert latest.metadata["algorithm"] == "grpo" and latest.metadata["stage"] == 1
        assert training.state.resources == {}  # state.json keeps what training reached
    end = read_metrics(tmp_path / "metrics.jsonl")[-1]
    assert (end["stage"], end["algorithm"], end["end/served_step"]) == (1, "grpo", 2)


async def test_an_earlier_stages_version_is_served_with_that_stages_routing(
    tmp_path: Path,
) -> None:
    """Issue 46, item 6: stage 0 (PPO, ``untrained_agents: base``) served its adapter to the
    solver and the checker from the base model; the last stage (GRPO) serves every call from
    its adapter. Stage 0's version, kept at the end, was published with the last stage's
    routing: the checker it was validated on the base model with ended on the adapter."""
    ppo = "{name: ppo, untrained_agents: base, transitions: {agents: [solver]}}"
    async with running_training(tmp_path, "algorithm=null", f"stages=[{ppo}, grpo]") as (
        training,
        store,
    ):
        record_validation(tmp_path, validated(0, 0.1))
        ppo_adapter = "stages/0-ppo/adapters/step-00002"
        (tmp_path / ppo_adapter).mkdir(parents=True)
        record_validation(tmp_path, validated(2, 0.7, adapter=ppo_adapter, stage=0))
        grpo_adapter = "stages/1-grpo/adapters/step-00003"
        (tmp_path / grpo_adapter).mkdir(parents=True)
        record_validation(tmp_path, validated(5, 0.4, adapter=grpo_adapter, stage=1))
        training.state.stage, training.state.step_offset = 1, 2
        await serve_final(training, grpo_adapter, "policy-5")
        report = await end_run(training, last_stage_context(training).rollouts)
        assert report is not None and report.kept is not None and report.kept.step == 2
        latest = await store.latest_resources()
        assert latest is not None and latest.metadata["kept_stage"] == 0
        llm = latest.resources["llm"]
        assert isinstance(llm, LLMResource)
        assert (llm.model, llm.agent_models) == ("tiny", {"solver": "policy-2-kept"})
        assert llm.model_for("checker") == "tiny" and llm.model_for(None) == "tiny"
        assert llm.model_for("solver") == "policy-2-kept"


# -- real runs ---------------------------------------------------------------------------------

#: Two GRPO steps at a learning rate 10**8 times the toy's (0.01). Adam's first step moves each
#: LoRA weight by about the learning rate (the step is the gradient's sign), which wrecks the
#: `tiny` model: every next-token distribution comes out uniform (logprob -ln 1024, measured),
#: greedy validation answers token 0 (`<|endoftext|>`, an empty answer) and scores 0.0 after
#: each step, from the base model's 0.19, whatever the training rollouts sampled. (At 1000 the
#: wrecked model still picks a token of its own, now and then one with an "a": not reliable.)
#: The base model is the best version, and the fall is far more than two standard errors.
FALLING = (
    "algorithm.steps=2",
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=4",
    "algorithm.grpo.learning_rate=1e6",
    "validation.every=1",
)


def train(run_dir: Path, capsys: Any, *overrides: str) -> str:
    """Run ``fulmen train`` on the toy config in-process; return what it printed."""
    args = ["train", str(TOY), "--no-dashboard", "--set", f"run_dir={run_dir}"]
    for override in overrides:
        args += ["--set", override]
    capsys.readouterr()
    assert main(args) == 0
    return capsys.readouterr().out


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the engine serves and the last resources name, as the run ends (engine still up)."""
    seen: dict[str, Any] = {}
    real = best.end_run

    async def end_and_look(training: Any, publisher: Any) -> Any:
        report = await real(training, publisher)
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{training.stack.engine_url}/models")
        seen["engine"] = {m["id"]: m["root"] for m in response.json()["data"]}
        latest = await training.stack.store.latest_resources()
        seen["model"] = latest.resources["llm"].model
        seen["metadata"] = latest.metadata
        return report

    monkeypatch.setattr(best, "end_run", end_and_look)
    return seen


def validations(run_dir: Path) -> dict[int, float]:
    records = read_metrics(run_dir / "metrics.jsonl")
    return {r["step"]: r["val/reward_mean"] for r in records if "val/reward_mean" in r}


def best_step(scores: dict[int, float]) -> int:
    return max(scores, key=lambda step: (scores[step], step))  # ties: the later version


def check_kept(run_dir: Path, served: dict[str, Any], out: str, *, adapters: str) -> int:
    """The run ended serving its best-scoring version (``adapters``: where its adapters are)
    and said so; returns that version's step."""
    scores = validations(run_dir)
    final, kept = max(scores), best_step(scores)
    assert scores[final] < scores[kept], f"validation did not fall: {scores}"
    if kept == 0:
        assert served["model"] == "tiny"
        assert set(served["engine"]) == {"tiny"}  # every adapter unloaded
        version = "step 0's version (the model before training)"
    else:
        name = f"policy-{kept}-kept"
        assert served["model"] == name
        adapter = str(run_dir / adapters / f"step-{kept:05d}")
        assert served["engine"] == {"tiny": served["engine"]["tiny"], name: adapter}
        version = f"step {kept}'s version"
    assert served["metadata"]["kept_step"] == kept
    assert (
        f"serving {version}: its validation {scores[kept]:.3f} "
        f"beat the final {scores[final]:.3f} (validation.keep_best)"
    ) in out, out
    end = read_metrics(run_dir / "metrics.jsonl")[-1]
    assert (end["step"], end["end/served_step"], end["end/kept_earlier"]) == (final, kept, 1.0)
    assert ("WARNING: validation FELL" in out) == (end["end/val_fell"] == 1.0), out
    return kept


@pytest.mark.slow
def test_a_run_whose_validation_falls_ends_serving_its_best_version(
    tmp_path: Path, capsys: Any, served: dict[str, Any]
) -> None:
    run_dir = tmp_path / "run"
    out = train(run_dir, capsys, *FALLING)
    scores = validations(run_dir)
    assert sorted(scores) == [0, 1, 2]
    kept = check_kept(run_dir, served, out, adapters="adapters")
    fell = f"validation FELL during training: {scores[0]:.3f} before training -> 0.000 after"
    assert scores[2] == 0.0 and fell in out, out

    # started again, the finished run says so and starts nothing: no training, no validation,
    # and the state still names what training reached (a run with more steps trains on)
    del kept
    served.clear()
    again = train(run_dir, capsys, *FALLING)
    assert "done: 0 steps in this run, 2 in all" in again
    assert served == {}  # the end of the run was not reached again: nothing was started
    assert validations(run_dir) == scores
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["adapter"]) == (2, "adapters/step-00002")


@pytest.mark.slow
def test_with_keep_best_off_a_falling_run_ends_serving_its_last_version(
    tmp_path: Path, capsys: Any, served: dict[str, Any]
) -> None:
    run_dir = tmp_path / "run"
    out = train(run_dir, capsys, *FALLING, "validation.keep_best=false")
    assert served["model"] == "policy-2"
    assert served["engine"]["policy-2"] == str(run_dir / "adapters" / "step-00002")
    assert "kept_step" not in served["metadata"]
    assert "(validation.keep_best)" not in out
    assert "validation.keep_best is off: serving the final version" in out
    assert "WARNING: validation FELL" in out  # whatever keep_best says


@pytest.mark.slow
def test_keep_best_picks_once_at_the_end_of_a_run_with_stages(
    tmp_path: Path, capsys: Any, served: dict[str, Any]
) -> None:
    """A first stage too gentle to change any greedy answer (its validation ties the base
    model's, so its adapter is kept: the later of a tie), then one that wrecks the model: the
    end of the whole run, not of each stage, serves the first stage's adapter again (or the
    base model, should the first stage have moved an answer after all)."""
    step = "name: grpo, steps: 1, tasks_per_step: 2, group_size: 4, grpo: {learning_rate: %s}"
    run_dir = tmp_path / "run"
    out = train(
        run_dir,
        capsys,
        "algorithm=null",
        f"stages=[{{{step % 1e-6}}}, {{{step % 1e6}}}]",
    )
    assert sorted(validations(run_dir)) == [0, 1, 2]
    check_kept(run_dir, served, out, adapters="stages/0-grpo/adapters")
    assert out.count("(validation.keep_best)") == 1
