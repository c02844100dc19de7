"""The logprobs an engine records for its sampled tokens are the trainer's, for every engine.

For each engine (built-in, vLLM) and temperature (1 and 0.8) the engine samples completions and
the trainer recomputes the logprobs of the same prompt + completion token ids with
``token_logprobs`` at the same temperature, on the base model, after a LoRA adapter is
hot-loaded, and after it is replaced in place by different weights (what a training step does).
The largest difference measured on this CPU machine, float32: see ``TOLERANCE``.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from fulmen.algorithms.policy import load_causal_lm, token_logprobs
from fulmen.engines.launcher import EngineProcess
from fulmen.engines.vllm import VLLMLauncher

PROMPTS = [
    [{"role": "user", "content": "Hello, how are you today?"}],
    [{"role": "user", "content": "Write one line about the sea."}],
]
# Measured max |engine - trainer| over these tests (float32, CPU, tiny model): built-in 9.1e-6,
# vLLM 1.1e-5. A temperature applied on one side only is off by > 0.1 (checked below).
TOLERANCE = {"builtin": 1e-4, "vllm": 1e-4}


def _engine_kind(engine: EngineProcess) -> str:
    return "vllm" if isinstance(engine, VLLMLauncher) else "builtin"


def _sample(
    engine: EngineProcess, model: str, temperature: float
) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, completion ids, recorded logprobs) of two choices per prompt."""
    out = []
    for i, messages in enumerate(PROMPTS):
        response = httpx.post(
            f"{engine.base_url}/chat/completions",
            json={
                "model": model,
                "messages": messages,
                "temperature": temperature,
                "seed": 7 + i,
                "n": 2,
                "max_tokens": 16,
                "ignore_eos": True,
                "logprobs": True,
                "return_token_ids": True,
            },
            timeout=120,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        for choice in body["choices"]:
            recorded = [e["logprob"] for e in choice["logprobs"]["content"]]
            assert len(recorded) == len(choice["token_ids"]) == 16
            out.append((body["prompt_token_ids"], choice["token_ids"], recorded))
    return out


def _recompute(
    policy: torch.nn.Module, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    ids = torch.tensor([prompt + completion])
    positions = torch.arange(len(prompt), ids.shape[1])
    with torch.no_grad():
        lp, _ = token_logprobs(
            policy,
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            rows=torch.zeros_like(positions),
            positions=positions,
            temperature=temperature,
        )
    return lp.tolist()


def _max_gap(policy: torch.nn.Module, samples: list[Any], temperature: float) -> float:
    gaps = [
        abs(a - b)
        for prompt, completion, recorded in samples
        for a, b in zip(_recompute(policy, prompt, completion, temperature), recorded, strict=True)
    ]
    return max(gaps)


def _halved_copy(adapter: Path, out: Path) -> Path:
    """The same adapter with its LoRA B matrices halved: different weights, same shape."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(adapter, out)
    weights = load_file(str(out / "adapter_model.safetensors"))
    save_file(
        {k: v * 0.5 if "lora_B" in k else v for k, v in weights.items()},
        str(out / "adapter_model.safetensors"),
    )
    return out


def _with_adapter(base_dir: Path, adapter: Path) -> torch.nn.Module:
    from peft import PeftModel

    with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
        warnings.simplefilter("ignore", FutureWarning)
        return PeftModel.from_pretrained(load_causal_lm(base_dir), str(adapter)).eval()


@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_recorded_logprobs_match_the_trainer_across_a_lora_hot_load(
    engine: EngineProcess,
    tiny_dir: Path,
    tool_adapter: Path,
    tmp_path: Path,
    temperature: float,
) -> None:
    tolerance = TOLERANCE[_engine_kind(engine)]
    second = _halved_copy(tool_adapter, tmp_path / "halved")
    base = load_causal_lm(tiny_dir).eval()
    measured: dict[str, float] = {}

    base_samples = _sample(engine, "tiny", temperature)
    measured["base"] = _max_gap(base, base_samples, temperature)
    # Guard: one side applying the temperature and the other not is far outside the tolerance.
    other = 1.0 if temperature != 1.0 else 0.8
    assert _max_gap(base, base_samples, other) > 0.1

    name = f"policy-{int(temperature * 10)}"
    asyncio.run(engine.load_adapter(name, str(tool_adapter)))
    try:
        tuned = _with_adapter(tiny_dir, tool_adapter)
        tuned_samples = _sample(engine, name, temperature)
        measured["adapter"] = _max_gap(tuned, tuned_samples, temperature)
        assert _max_gap(base, tuned_samples, temperature) > 0.1  # the adapter was applied

        asyncio.run(engine.load_adapter(name, str(second)))  # in place, as a training step does
        replaced = _with_adapter(tiny_dir, second)
        replaced_samples = _sample(engine, name, temperature)
        measured["replaced"] = _max_gap(replaced, replaced_samples, temperature)
        assert _max_gap(tuned, replaced_samples, temperature) > 1e-2  # new weights served
    finally:
        asyncio.run(engine.unload_adapter(name))
    print(f"{_engine_kind(engine)} temperature={temperature} max |engine - trainer|: {measured}")
    assert max(measured.values()) < tolerance, measured


def test_a_full_fine_tunes_weights_reach_the_engine_each_step(
    engine: EngineProcess, tiny_dir: Path, tmp_path: Path
) -> None:
    """Two GRPO steps on every weight, each served by reloading the engine's weights in place.

    What ``fulmen train`` does with ``finetune: full`` (``serve_policy`` -> ``reload_weights``):
    after each step the engine's logprobs are the updated policy's, and differ from the last.
    """
    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from tests.algorithms.test_data_parallel import _batch

    tolerance = TOLERANCE[_engine_kind(engine)]
    updater = GRPOUpdater(load_causal_lm(tiny_dir), config=GRPOConfig(finetune="full"))
    batch = _batch(updater.model)
    previous = load_causal_lm(tiny_dir).eval()
    versions: list[int | None] = []
    try:
        for step in range(2):
            assert updater.train_step(batch)["updated"] == 1.0
            versions.append(
                asyncio.run(
                    engine.reload_weights(str(updater.save_model(tmp_path / f"step-{step}")))
                )
            )
            samples = _sample(engine, "tiny", 1.0)
            gap = _max_gap(updater.model.eval(), samples, 1.0)
            print(f"{_engine_kind(engine)} full weights, step {step + 1}: max gap {gap:.3g}")
            assert gap < tolerance  # the engine serves this step's weights
            assert _max_gap(previous, samples, 1.0) > 1e-3  # ... and not the last step's
            previous = load_causal_lm(tmp_path / f"step-{step}").eval()
    finally:
        asyncio.run(engine.reload_weights(None))
    if engine.capabilities.policy_version:  # the built-in engine numbers what it serves
        assert versions[0] is not None and versions[1] == versions[0] + 1


# top_p 1e-6 keeps only the most likely token (the tiny model's distribution is nearly flat,
# so any larger top_p keeps more tokens than top_logprobs can show).
@pytest.mark.parametrize(("truncation", "size"), [({"top_k": 2}, 2), ({"top_p": 1e-6}, 1)])
def test_recorded_logprobs_are_renormalized_over_the_top_k_top_p_set(
    engine: EngineProcess, truncation: dict[str, float], size: int
) -> None:
    """Truncation is applied and recorded: the kept tokens' probabilities sum to 1.

    (The trainer cannot reproduce such a set, so ``train_sampling`` refuses these fields.)
    """
    response = httpx.post(
        f"{engine.base_url}/chat/completions",
        json={
            "model": "tiny",
            "messages": PROMPTS[0],
            "temperature": 0.8,
            "seed": 3,
            "max_tokens": 12,
            "ignore_eos": True,
            "logprobs": True,
            "top_logprobs": 5,
            **truncation,
        },
        timeout=120,
    )
    assert response.status_code == 200, response.text
    for entry in response.json()["choices"][0]["logprobs"]["content"]:
        kept = [t for t in entry["top_logprobs"] if t["logprob"] > -1000]
        assert entry["token"] in [t["token"] for t in kept]
        assert len(kept) == size
        assert sum(math.exp(t["logprob"]) for t in kept) == pytest.approx(1.0, abs=1e-4)
