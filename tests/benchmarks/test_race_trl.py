"""``benchmarks/race_trl.py --ci``: both trainers, two steps each on the tiny model.

fulmen (``fulmen train``) and TRL's ``GRPOTrainer`` each train two steps on the same Reasoning
Gym tasks; every adapter is measured on the same held-out problems at the fixed minutes, and
the summary, the JSON-lines record and the plot are written. Asserts what was run and
recorded, never how fast or how well.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.stopping import assert_sigterm_stops_trainer_first, write_trainer

pytest.importorskip("trl")
pytest.importorskip("reasoning_gym")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]


def race(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    script = str(ROOT / "benchmarks" / "race_trl.py")
    argv = [sys.executable, script, "--ci", "--out", str(out), *options]
    return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)


@pytest.mark.slow
# peft's PeftModel.from_pretrained (the held-out evaluator, here in this process) still calls
# a transformers method that warns of its removal.
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_ci_mode_races_both_trainers_two_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = race(tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["race"]["basic_arithmetic"]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for trainer in ("fulmen", "trl"):
        speed = [r for r in records if r["kind"] == "speed" and r["trainer"] == trainer]
        assert [r["steps"] for r in speed] == [2]
        assert speed[0]["rollout_tokens_per_s"] > 0 and speed[0]["update_s_per_step"] > 0
        if trainer == "fulmen":  # its group counts, for --versus without the run's folder
            assert speed[0]["groups"] == 4 and speed[0]["rollouts"] == 16  # 2 steps of 2x4
            assert 0 <= speed[0]["flat_groups"] <= 4
        points = {
            r["minute"]: r for r in records if r["kind"] == "point" and r["trainer"] == trainer
        }
        assert set(points) == {0.0, 5.0}
        assert points[0.0]["step"] == 0 and points[5.0]["step"] == 2  # base, then both steps
        assert 0.0 <= points[5.0]["accuracy"] <= 1.0 and 0.0 <= points[5.0]["score"] <= 1.0
        for point in points.values():  # each problem's verdict, for the paired comparison
            assert len(point["correct"]) == 8
            assert sum(point["correct"]) / 8 == point["accuracy"]
        assert summary["trainers"][trainer]["lr_grid"]
    # The held-out set is the same for both: the base model scores the same at minute 0.
    base = {r["trainer"]: r["score"] for r in records if r["kind"] == "point" and r["minute"] == 0}
    assert base["fulmen"] == base["trl"]
    assert {"final_gain", "final_gain_se", "time_ratio_fulmen_over_trl"} <= set(summary)
    assert summary["final_gain_se_problems"] >= 0 and summary["seeds"] == 1
    assert summary["gain_shown"] is False  # one seed never shows a gain
    assert (tmp_path / "race.png").stat().st_size > 0

    # The rest calls the script's ``race`` in this process: starting it again (imports, the
    # tiny model) costs more than what is checked.
    entry = race_entry(monkeypatch)

    def again(*options: str) -> dict[str, Any]:
        args = entry.parse_args(["--ci", "--out", str(tmp_path), *options])
        return json.loads(json.dumps(entry.race(args)))  # as printed: keys become strings

    # A second call into the same OUT runs nothing again: it only summarizes what is recorded.
    assert again()["basic_arithmetic"] == summary
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == len(records)
    # Rows recorded before verdicts were kept get them again from the runs' saved adapters.
    stripped = [{k: v for k, v in r.items() if k != "correct"} for r in records]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    again()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == records
    # The screen reports the recorded base model: minute 0's accuracy, with its standard error.
    row = again("--screen")["screen"]["basic_arithmetic"]
    assert row["accuracy"] == points[0.0]["accuracy"] and row["problems"] == 8
    assert row["se"] >= 0 and isinstance(row["in_range"], bool)
    # Rows measured with other settings are never mixed into one summary.
    with pytest.raises(SystemExit, match=r"other settings \(lora_r: 16 there, 4 now\)"):
        again("--lora-r", "4")


def race_entry(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The race script (``benchmarks/race_trl.py``) as a module, its parts importable."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("race_trl")


@pytest.fixture
def race_parts(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    """A part of the race script (its ``race/`` package), for its pure functions."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return lambda name: importlib.import_module(f"race.{name}")


def test_the_rate_is_chosen_on_the_seeds_every_rate_ran(race_parts: Callable[[str], Any]) -> None:
    # Rate 1e-5 ran seeds 0-2, rate 5e-5 seed 0 only. Over all its seeds 1e-5 averages 0.5,
    # above 5e-5's 0.3, but on seed 0 (the grid's only common seed) 5e-5 is better.
    finals = {(1e-5, 0): 0.2, (1e-5, 1): 0.6, (1e-5, 2): 0.7, (5e-5, 0): 0.3}
    rows = []
    for (lr, seed), final in finals.items():
        for minute, accuracy in ((0.0, 0.1), (30.0, final)):
            rows.append({"kind": "point", "dataset": "d", "trainer": "trl", "lr": lr})
            rows[-1].update(seed=seed, minute=minute, accuracy=accuracy)
        speed = {"rollout_tokens_per_s": 1.0, "update_s_per_step": 1.0, "steps": 1}
        rows.append({"kind": "speed", "dataset": "d", "trainer": "trl", "lr": lr, **speed})
    summary = race_parts("summary").summarize(rows, [0.0, 30.0])["d"]["trainers"]["trl"]
    assert summary["lr"] == 5e-5
    assert summary["lr_grid"] == {1e-5: pytest.approx(0.2), 5e-5: pytest.approx(0.3)}
    assert summary["final_over_start"] == pytest.approx(0.2)


def test_a_trl_setting_is_checked_before_any_run(
    tmp_path: Path, race_parts: Callable[[str], Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--ci", "--out", str(tmp_path), "--trl-set", "no_such_field=1"]
    with pytest.raises(SystemExit) as exited:
        race_parts("settings").parse_args(argv)
    assert exited.value.code == 2
    assert "GRPOConfig has no such field" in capsys.readouterr().err
    assert not tmp_path.joinpath("results.jsonl").exists()


def test_an_out_recorded_before_a_setting_existed_is_continued(
    tmp_path: Path, race_parts: Callable[[str], Any]
) -> None:
    records = race_parts("records")
    args = race_parts("settings").parse_args(["--ci", "--out", str(tmp_path)])
    records.open_out(args)
    settings = json.loads((tmp_path / "race.json").read_text())
    del settings["trl_set"]  # as the races recorded before --trl-set were
    (tmp_path / "race.json").write_text(json.dumps(settings))
    records.open_out(args)  # the same race: continued
    args.trl_set = ["gradient_checkpointing=false"]
    with pytest.raises(SystemExit, match="trl_set"):
        records.open_out(args)


def test_the_time_to_trl_final_is_read_off_the_mean_curves(
    race_parts: Callable[[str], Any],
) -> None:
    # TRL's seed 0 ends at 0.16, below TRL's mean final (0.18): per seed it would never reach
    # it. On the mean curves TRL reaches it at minute 30 and fulmen at minute 15.
    curves = {("trl", 0): (0.1, 0.12, 0.16), ("trl", 1): (0.1, 0.14, 0.2)}
    curves |= {("fulmen", 0): (0.1, 0.2, 0.2), ("fulmen", 1): (0.1, 0.16, 0.2)}
    rows = []
    for (trainer, seed), accuracies in curves.items():
        key = {"dataset": "d", "trainer": trainer, "lr": 1e-5}
        for minute, accuracy in zip((0.0, 15.0, 30.0), accuracies, strict=True):
            rows.append({"kind": "point", **key, "seed": seed, "minute": minute})
            rows[-1]["accuracy"] = accuracy
        speed = {"rollout_tokens_per_s": 1.0, "update_s_per_step": 1.0, "steps": 1}
        rows.append({"kind": "speed", **key, "seed": seed, **speed})
    summary = race_parts("summary").summarize(rows, [0.0, 15.0, 30.0])["d"]
    assert summary["trl_final_accuracy"] == pytest.approx(0.18)
    assert summary["minutes_to_trl_final"] == {"fulmen": pytest.approx(15.0), "trl": 30.0}
    assert summary["time_ratio_fulmen_over_trl"] == pytest.approx(0.5)


def test_a_setting_is_compared_with_the_base_race_seed_by_seed(
    tmp_path: Path, race_parts: Callable[[str], Any]
) -> None:
    settings, records, versus = (race_parts(n) for n in ("settings", "records", "versus"))
    base, setting = tmp_path / "base", tmp_path / "redraw"
    redraw = "algorithm.dynamic_sampling={redraw: true}"
    for out, extra in ((base, []), (setting, ["--fulmen-set", redraw])):
        args = settings.parse_args(["--ci", "--out", str(out), *extra])
        results = records.open_out(args)
        # Seeds 0 and 1 in both; the setting gains 0.25 and 0.5 at minute 5 (8 problems).
        for seed, (start, final) in enumerate(((2, 4), (2, 3))):
            if out == setting:
                final += 2 + 2 * seed
            for minute, right in ((0.0, start), (5.0, final)):
                correct = [1] * right + [0] * (8 - right)
                row = {"kind": "point", "dataset": "basic_arithmetic", "trainer": "fulmen"}
                row |= {"lr": 1e-3, "seed": seed, "minute": minute, "accuracy": right / 8}
                records.append(results, {**row, "correct": correct})
            run = out / "basic_arithmetic" / "fulmen" / "lr0.001" / f"seed{seed}"
            speed = {**row, "kind": "speed", "steps": 2}
            del speed["minute"], speed["accuracy"]
            if out == setting:  # dynamic sampling counts its own groups: 3 a step, 1 flat
                speed |= {"groups": 6, "flat_groups": 2, "rollouts": 24}  # no folder needed
            else:  # a base recorded before the speed rows had counts: read from its folder
                run.mkdir(parents=True)
                step = {"time/step_s": 1.0, "groups": 2, "rollouts": 8}
                step["skipped_zero_advantage"] = 4
                (run / "metrics.jsonl").write_text(f"{json.dumps(step)}\n" * 2)
            records.append(results, speed)
        # Seed 2 ran on another machine for each side: its wall-clock runs are not paired.
        row = {"kind": "point", "dataset": "basic_arithmetic", "trainer": "fulmen", "seed": 2}
        row |= {"lr": 1e-3, "correct": [1] * 8}
        for minute in (0.0, 5.0):
            records.append(results, {**row, "minute": minute, "accuracy": 1.0})
        counts = {"groups": 2, "flat_groups": 0, "rollouts": 8, "steps": 9}
        where = "slow machine" if out == setting else "fast machine"
        del row["correct"]
        records.append(results, {**row, "kind": "speed", "machine": where, **counts})
    found = versus.versus(setting, base)["basic_arithmetic, lr 0.001"]
    assert found["other_machine"] == {"2": {"setting": "slow machine", "base": "fast machine"}}
    assert found["fulmen_set"] == [redraw] and found["base_fulmen_set"] == []
    assert found["accuracy_difference"]["0.0"] == {"mean": 0.0, "se": 0.0}
    assert found["accuracy_difference"]["5.0"]["mean"] == pytest.approx(0.375)
    assert found["final_gain"] == pytest.approx(0.375) and found["seeds"] == 2
    assert found["final_gain_se"] == pytest.approx(0.125)  # gains 0.25, 0.5
    assert found["final_gain_se_problems"] > 0
    assert found["sampling"]["base"] == {"steps": 2.0, "flat_groups": 0.5, "cost": 1.0}
    assert found["sampling"]["setting"] == {
        "steps": 2.0,
        "flat_groups": pytest.approx(1 / 3),
        "cost": 1.5,
    }
    # Without counts in the row and without the run's folder the entry says so.
    (base / "basic_arithmetic" / "fulmen" / "lr0.001" / "seed1" / "metrics.jsonl").unlink()
    gone = versus.versus(setting, base)["basic_arithmetic, lr 0.001"]["sampling"]["base"]
    assert "seed1: its group counts were not recorded" in gone["note"]
    # A base measured with other settings (beyond what fulmen and TRL were given) is refused.
    other = settings.parse_args(["--ci", "--out", str(tmp_path / "r4"), "--lora-r", "4"])
    other.versus = base
    with pytest.raises(SystemExit, match="lora_r: 16 there, 4 now"):
        versus.check_base(other)
    same = settings.parse_args(["--ci", "--out", str(tmp_path / "x"), "--fulmen-set", redraw])
    same.versus = base
    versus.check_base(same)  # only the fulmen setting differs: accepted


def test_flat_groups_of_an_agent_that_calls_the_model_twice_are_counted_once(
    race_parts: Callable[[str], Any],
) -> None:
    # Two groups of 4 rollouts, each rollout two model calls (16 samples); one group was flat,
    # so its 8 samples were left out: one flat group, not two.
    fulmen_side = race_parts("fulmen_side")
    step = {"groups": 2, "rollouts": 8, "transitions": 16, "skipped_zero_advantage": 8}
    counts = fulmen_side.run_sampling([step], group_size=4)
    assert counts == {"groups": 2, "flat_groups": 1.0, "rollouts": 8}
    # A single-call agent (a row from before transitions were counted too) is read as before.
    single = {"groups": 2, "rollouts": 8, "skipped_zero_advantage": 4}
    assert fulmen_side.run_sampling([single], group_size=4)["flat_groups"] == 1.0


def test_a_race_stopped_by_sigterm_stops_its_trainer_first(tmp_path: Path) -> None:
    # The trainer here stands in for `fulmen train`: on SIGTERM it cleans up (the real one stops
    # its engine) and exits. The race used to die alone and leave it training.
    trainer = write_trainer(tmp_path)
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from race.child import run_child, stop_on_sigterm\n"
        f"stop_on_sigterm(); run_child([sys.executable, {str(trainer)!r}])\n"
    )
    assert_sigterm_stops_trainer_first([sys.executable, "-c", script], tmp_path)
