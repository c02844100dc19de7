"""``benchmarks/over_seeds.py``: a sweep over seeds; a setting's sweep against one without it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.stopping import assert_sigterm_stops_trainer_first, write_trainer

ROOT = Path(__file__).resolve().parents[2]


def over_seeds() -> Any:
    spec = importlib.util.spec_from_file_location(
        "over_seeds", ROOT / "benchmarks" / "over_seeds.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_setting_is_compared_with_the_base_sweep_seed_by_seed(tmp_path: Path) -> None:
    base, setting = tmp_path / "base", tmp_path / "redraw"
    # learn_examples' lines; seed 2 ran only in the setting's sweep (not paired, left out).
    runs = {s: {"reward_before": 0.2, "reward_after": a} for s, a in ((0, 0.5), (1, 0.6), (2, 0.9))}
    base_runs = {s: {"reward_before": 0.2, "reward_after": a} for s, a in ((0, 0.3), (1, 0.5))}
    for out, cost in ((setting, 1.5), (base, None)):
        (out / "seed0").mkdir(parents=True)
        step = {"time/step_s": 1.0} | ({} if cost is None else {"sampling/cost": cost})
        (out / "seed0" / "metrics.jsonl").write_text(json.dumps(step) + "\n{}\n")
    found = over_seeds().versus(runs, base_runs, setting, base)
    assert found["seeds"] == 2
    assert [r["difference"] for r in found["per_seed"]] == pytest.approx([0.2, 0.1])
    assert found["difference_mean"] == pytest.approx(0.15)
    assert found["difference_se_over_seeds"] == pytest.approx(0.05)
    assert found["difference_shown"] is True  # 0.15 >= 2 x 0.05
    # Each side's sampling cost: the setting's 1.5, the base without dynamic sampling 1.0;
    # a seed whose run directory is gone has none.
    assert found["per_seed"][0]["cost"] == [1.5, 1.0]
    assert found["per_seed"][1]["cost"] == [None, None]
    assert found["per_seed"][0]["before"] == [0.2, 0.2]


def test_a_seed_run_on_another_machine_is_left_out(tmp_path: Path) -> None:
    # The runs have a wall-clock budget: on a machine 1.7x slower a run reaches fewer steps, so
    # a seed is paired only where both sweeps ran it on one machine. Rows from before rows
    # named a machine name none, and pair only with each other.
    amd, intel = "vm: AMD EPYC x2", "vm: Intel(R) Xeon(R) Processor x2"
    runs = {
        0: {"reward_before": 0.2, "reward_after": 0.5, "machine": amd},
        1: {"reward_before": 0.2, "reward_after": 0.6, "machine": amd},
        2: {"reward_before": 0.2, "reward_after": 0.4},
    }
    base_runs = {
        0: {"reward_before": 0.2, "reward_after": 0.3, "machine": amd},
        1: {"reward_before": 0.2, "reward_after": 0.1, "machine": intel},
        2: {"reward_before": 0.2, "reward_after": 0.3},
    }
    found = over_seeds().versus(runs, base_runs, tmp_path / "setting", tmp_path / "base")
    assert [r["seed"] for r in found["per_seed"]] == [0, 2]
    assert found["difference_mean"] == pytest.approx(0.15)
    assert found["other_machine"] == {"1": {"setting": amd, "base": intel}}
    assert found["machines"] == ["unrecorded", amd]


def stand_in(tmp_path: Path, body: str) -> Path:
    """A benchmark script standing in for learn_examples.py (over_seeds adds its options)."""
    script = tmp_path / "bench.py"
    script.write_text("import json, os, pathlib, signal, sys, time\n" + body, encoding="utf-8")
    return script


def test_a_sweep_records_each_seed_once_with_its_machine(tmp_path: Path) -> None:
    bench = stand_in(
        tmp_path,
        "seed = int(sys.argv[sys.argv.index('--set') + 1].split('=')[1])\n"
        "print('progress')\n"
        "print(json.dumps({'reward_before': 0.2, 'reward_after': 0.2 + 0.1 * seed}))\n",
    )
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "benchmarks" / "over_seeds.py"), "--out", str(out)]
    done = subprocess.run(
        [*argv, "--seeds", "1", "2", "--", str(bench)], capture_output=True, text=True, check=True
    )
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [1, 2]
    assert all(r["machine"] == over_seeds().machine() for r in rows)
    summary = json.loads(done.stdout.splitlines()[-1])
    assert [r["after"] for r in summary["per_seed"]] == pytest.approx([0.3, 0.4])
    # Run again with one more seed: only the new seed runs.
    done = subprocess.run(
        [*argv, "--seeds", "1", "2", "3", "--", str(bench)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "seed 1: already in" in done.stderr and "seed 2: already in" in done.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


def test_a_sweep_stopped_by_sigterm_stops_its_seed_run_first(tmp_path: Path) -> None:
    # With subprocess.run the sweep died alone and left the seed's run training on a machine
    # the next measurement needs idle.
    bench = write_trainer(tmp_path)  # over_seeds adds its options; the stand-in ignores them
    script, out = str(ROOT / "benchmarks" / "over_seeds.py"), str(tmp_path / "out")
    argv = [sys.executable, script, "--out", out, "--seeds", "0", "--", str(bench)]
    assert_sigterm_stops_trainer_first(argv, tmp_path)
    assert not (tmp_path / "out" / "results.jsonl").exists()
