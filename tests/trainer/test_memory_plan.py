"""The run's memory plan (``fulmen plan``, and the check ``fulmen train`` runs first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.trainer.config import load_config
from fulmen.trainer.memory_plan import PROCESS_BYTES, plan_memory

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "examples" / "toy" / "config.yaml"
GIB = 1 << 30


def _toy(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    return load_config(TOY, overrides=[f"run_dir={tmp_path / 'run'}", *overrides])


def test_toy_run_fits_here_and_sums_its_processes(tmp_path: Path) -> None:
    plan = plan_memory(_toy(tmp_path))
    assert plan.fits and not plan.warnings
    (stage,) = plan.updates
    assert stage.prefix == "algorithm.grpo" and stage.memory.shape.lora.r == 8
    assert plan.engine is not None and plan.engine.kind == "builtin"
    (host,) = plan.devices
    assert host.device == "cpu" and host.available is not None and host.available > 0
    items = dict(host.fixed)
    assert items["trainer process"] == items["engine (builtin): process"] == PROCESS_BYTES
    assert items["engine: weights"] == plan.engine.weights_bytes
    micro = stage.memory.micro_batches[0]
    assert items["update (grpo): a full micro-batch"] == micro.peak_bytes
    assert dict(host.extra)["engine: running KV at its budget"] == plan.engine.kv_bytes
    text = "\n".join(plan.lines())
    assert "memory plan for tiny" in text and "cpu: needs" in text and ": fits" in text


def test_a_fixed_need_over_the_free_memory_is_refused_with_the_setting(tmp_path: Path) -> None:
    plan = plan_memory(_toy(tmp_path), available={"cpu": GIB})
    assert not plan.fits
    (problem,) = plan.problems
    assert "1.00 GiB is free" in problem
    assert "engine.prefix_cache_mb" in problem  # the largest item that a setting shrinks
    assert "algorithm.grpo.gradient_checkpointing: true" in problem


def test_data_that_reaches_its_limits_is_a_warning_naming_the_budget(tmp_path: Path) -> None:
    config = _toy(tmp_path, "engine.kv_cache_mb=4096")
    fixed = plan_memory(config, alternatives=False).devices[0].fixed_bytes
    plan = plan_memory(config, available={"cpu": fixed + GIB})
    assert plan.fits
    (warning,) = plan.warnings
    assert "running batch" in warning and "engine.kv_cache_mb: 1024" in warning


def test_stages_ranks_reference_and_gpus_are_planned(tmp_path: Path) -> None:
    config = _toy(
        tmp_path,
        "algorithm=null",
        "stages=[{name: sft, sft: {finetune: full}}, {name: grpo, grpo: {finetune: full, "
        "kl_coef: 0.1, device: cuda}, data_parallel: {world_size: 2}}]",
    )
    plan = plan_memory(config, available={"cpu": 64 * GIB, "cuda": 80 * GIB})
    sft, grpo = plan.updates
    assert (sft.prefix, grpo.prefix) == ("stages.0.sft", "stages.1.grpo")
    assert sft.memory.reference_bytes == 0
    assert grpo.memory.reference_bytes == grpo.memory.weights_bytes  # frozen copy for the KL
    host, gpu = plan.devices
    assert gpu.device == "cuda:0" and gpu.available == 80 * GIB
    # one rank per GPU: the device holds one copy; the host holds the SFT stage alone
    assert dict(gpu.fixed)["update (grpo): weights and optimizer"] == (
        grpo.memory.weights_bytes + grpo.memory.reference_bytes + grpo.memory.optimizer_bytes
    )
    assert "update (sft): weights and optimizer" in dict(host.fixed)
    cpu_ranks = plan_memory(
        _toy(tmp_path, "algorithm.data_parallel={world_size: 2}"), available={"cpu": 64 * GIB}
    )
    items = dict(cpu_ranks.devices[0].fixed)
    memory = cpu_ranks.updates[0].memory
    assert items["update (grpo): weights and optimizer x 2 ranks"] == 2 * (
        memory.weights_bytes + memory.optimizer_bytes
    )
    assert items["update (grpo): rank processes"] == PROCESS_BYTES


def test_a_prompt_only_run_on_an_endpoint_plans_no_model(tmp_path: Path) -> None:
    config = _toy(
        tmp_path,
        "model=a-hosted-model",  # not a local model: nothing may try to resolve it
        "engine={kind: endpoint, url: 'http://127.0.0.1:9/v1'}",
        "algorithm={name: demos}",
        "validation=null",
    )
    plan = plan_memory(config)
    assert plan.engine is None and not plan.updates and plan.fits


def test_fulmen_plan_prints_json_and_exits_1_when_it_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", str(TOY), "--set", f"run_dir={tmp_path / 'run'}"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] and data["updates"][0]["trained"] == 32768
    assert data["devices"][0]["items"]["trainer process"] == PROCESS_BYTES
    assert main([*args, "--memory", "1GiB"]) == 1
    out = capsys.readouterr().out
    assert "does not fit" in out and "engine.prefix_cache_mb" in out
    assert main([*args, "--memory", "lots"]) == 1
    assert "--memory 'lots' is not a size" in capsys.readouterr().err


def test_fulmen_train_refuses_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", str(TOY), "--no-dashboard", "--set", f"run_dir={run_dir}"]
    assert main([*args, "--set", "engine.prefix_cache_mb=100000000"]) == 1
    out, err = capsys.readouterr()
    assert "the run does not fit in memory" in err and "lower engine.prefix_cache_mb" in err
    assert "memory plan for tiny:" in out and "  cpu: needs" in out
    assert not run_dir.exists()  # no store, no engine, no run folder


def test_a_model_whose_code_cannot_run_on_meta_starts_without_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """peft's LoRA on expert weights enters torch.autocast, which the meta device lacks."""
    from transformers import MixtralConfig

    from fulmen.cli.plan import check_before_training
    from fulmen.trainer.memory_plan import MemoryPlanUnavailable

    model_dir = tmp_path / "moe"
    MixtralConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=512,
    ).save_pretrained(model_dir)
    config = _toy(tmp_path, f"model={model_dir}")
    with pytest.raises(MemoryPlanUnavailable, match="did not run on the meta device"):
        plan_memory(config)
    capsys.readouterr()
    check_before_training(config)  # no exception: the run starts
    assert "starting without a memory plan" in capsys.readouterr().out
    args = ["plan", str(TOY), "--set", f"run_dir={tmp_path / 'run'}", "--set", f"model={model_dir}"]
    assert main(args) == 1
    assert "cannot plan the memory of" in capsys.readouterr().err
