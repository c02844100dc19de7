"""``benchmarks/over_seeds.py --versus BASE``: a setting's sweep against the sweep without it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

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
