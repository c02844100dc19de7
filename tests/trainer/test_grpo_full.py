"""``algorithm.grpo.finetune: full`` in ``fulmen train``: every step's full weights are saved and
reloaded into the real built-in engine (``tiny`` model), which samples the next step with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fulmen.engines.models import resolve_model
from tests.algorithms.sft.test_sft_train import (
    example_imports_restored,
    logprob_gaps,
    models_of,
    train,
)

pytest.importorskip("torch")
pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures(example_imports_restored.__name__)


@pytest.mark.slow
def test_grpo_full_weights_are_reloaded_into_the_engine_each_step(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    run_dir = tmp_path / "run"
    records = train(
        run_dir,
        "algorithm={steps: 2, tasks_per_step: 2, group_size: 4, "
        "grpo: {finetune: full, learning_rate: 0.001}}",
        "validation=null",
        "data.val=null",
    )
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2]
    state = json.loads((run_dir / "state.json").read_text())
    assert (state["step"], state["weights"], state["adapter"]) == (2, "weights/step-00002", None)
    assert not (run_dir / "adapters").exists()
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny")).eval()
    first = AutoModelForCausalLM.from_pretrained(run_dir / "weights" / "step-00001").eval()
    # step 2 sampled from step 1's weights, served under the base model's name
    assert models_of(run_dir, "g1-s1-") == {"tiny"}
    assert max(logprob_gaps(run_dir, "g1-s0-", base)) < 1e-3
    assert max(logprob_gaps(run_dir, "g1-s1-", first)) < 1e-3
    assert max(logprob_gaps(run_dir, "g1-s1-", base)) > 0.1
