"""What fulmen's GPU paths do on a lent device: update steps, memory against the plan, the gap.

Run by ``benchmarks/gpu_check.sh`` (8 minutes at most, no network). Models are built from
configs in the repository with random weights (speed and memory do not depend on the values):
the tiny model (built from its recipe), a Gemma 3 270M-shaped model and a Qwen2.5 7B-shaped one
(``benchmarks/workloads/shapes``). For each shape and LoRA / full weights (full weights up to
Gemma's size) it:

- plans the update's memory (``plan_update``, what ``fulmen plan`` reports) and skips a case
  the device cannot hold;
- builds ``GRPOUpdater`` on the device and times ``train_step`` on a batch of random sequences
  whose behaviour logprobs are the policy's own (so the ratio starts at 1), one warm-up step
  then the median of the timed ones;
- reads the device's peak memory (``torch.cuda.max_memory_allocated``) against the plan.

It also measures the logprob gap between the CPU and the device for the same tiny-model weights
(what the device's kernels add to the importance ratio), and says which GPU paths are not built
(the built-in engine on CUDA, full-weight sync to vLLM). It takes a sharded step (FSDP2,
``data_parallel.strategy: fsdp``) of the tiny model over every GPU present (NCCL; two gloo
ranks with ``--device cpu``; skipped on one GPU). Human-readable lines go
to stderr, one JSON line to stdout. Nothing in CI or the README depends on it; ``--device cpu
--quick`` runs the same code on a CPU, to check the script itself.

Needs torch (with CUDA), transformers and peft importable, as fulmen's ``train`` extra installs.

    bash benchmarks/gpu_check.sh                       # on the device
    python benchmarks/gpu_check.py --device cpu --quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES = Path(__file__).parent / "workloads" / "shapes"
NOT_CHECKED = {
    "builtin_engine_on_cuda": "the built-in engine serves on the CPU only",
    "full_weight_sync_to_vllm": "needs vLLM installed on the device (CPU-checked in CI)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a dry run)")
    parser.add_argument("--quick", action="store_true", help="small batches, tiny and Gemma only")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    args = parser.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"torch {torch.__version__} sees no CUDA device; use --device cpu")
    sequences, prompt, completion = (4, 96, 32) if args.quick else (32, 768, 256)
    cases = [("tiny", "lora"), ("tiny", "full"), ("gemma-3-270m", "lora")]
    if not args.quick:
        cases += [("gemma-3-270m", "full"), ("qwen2.5-7b", "lora")]
    report: dict[str, Any] = {
        "benchmark": "gpu_check",
        "device": args.device,
        "gpu": torch.cuda.get_device_name(args.device) if args.device != "cpu" else None,
        "torch": torch.__version__,
        "batch": {"sequences": sequences, "prompt": prompt, "completion": completion},
        "updates": [],
        "not_checked": NOT_CHECKED,
    }
    with tempfile.TemporaryDirectory() as scratch:
        for shape, finetune in cases:
            started = time.perf_counter()
            result = _update_case(
                shape, finetune, args.device, Path(scratch), sequences, prompt, completion,
                args.steps,
            )  # fmt: skip
            result["wall_s"] = round(time.perf_counter() - started, 1)
            _say(f"{shape} {finetune}: {json.dumps(result)}")
            report["updates"].append(result)
        for finetune in ("lora", "full"):
            sharded = _fsdp_case(finetune, args.device, sequences, prompt, completion, args.steps)
            _say(f"fsdp tiny {finetune}: {json.dumps(sharded)}")
            report["updates"].append(sharded)
        report["tiny_logprob_gap_cpu_vs_device"] = _gap(args.device)
    _say(f"logprob gap, CPU vs {args.device}: {report['tiny_logprob_gap_cpu_vs_device']}")
    print(json.dumps(report), flush=True)
    return 0


def _model_dir(shape: str, scratch: Path) -> Path:
    """The model directory of ``shape``: the tiny model's, or a folder with the config alone."""
    if shape == "tiny":
        from fulmen.engines.models import resolve_model

        return resolve_model("tiny")
    folder = scratch / shape
    folder.mkdir(exist_ok=True)
    shutil.copy(SHAPES / f"{shape}.json", folder / "config.json")
    return folder


def _update_case(
    shape: str,
    finetune: str,
    device: str,
    scratch: Path,
    sequences: int,
    prompt: int,
    completion: int,
    steps: int,
) -> dict[str, Any]:
    import torch

    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from fulmen.algorithms.update_memory import UpdateShape, plan_update
    from fulmen.meta_memory import meta_causal_lm

    directory = _model_dir(shape, scratch)
    config = GRPOConfig(
        finetune=finetune,  # type: ignore[arg-type]
        device=device,
        learning_rate=1e-5,
        micro_batch_tokens=4096,
        max_seq_len=prompt + completion,
    )
    plan = plan_update(UpdateShape.of("grpo", config), directory, alternatives=False)
    result: dict[str, Any] = {
        "shape": shape,
        "finetune": finetune,
        "parameters": plan.parameters,
        "trained": plan.trained,
        "planned_gb": round(plan.peak_bytes / 2**30, 3),
    }
    free = _free(device)
    if free is not None and plan.peak_bytes > 0.9 * free:
        result["skipped"] = f"planned {plan.peak_bytes / 2**30:.1f} GiB, {free / 2**30:.1f} free"
        return result
    torch.manual_seed(0)
    meta_config: Any = meta_causal_lm(directory).config
    vocab = int(meta_config.get_text_config().vocab_size)
    if shape == "tiny":
        from fulmen.algorithms.policy import load_causal_lm

        model = load_causal_lm(directory)
    else:
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(str(directory)), dtype=torch.float32
            )
    updater = GRPOUpdater(model, config=config)
    batch = _batch(updater, vocab, sequences, prompt, completion)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times: list[float] = []
    first: dict[str, float] = {}
    for step in range(steps + 1):
        started = time.perf_counter()
        metrics = updater.train_step(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        if step == 0:
            first = metrics
        else:
            times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    result.update(
        step_s=round(seconds, 3),
        trained_tokens_per_s=round(sequences * completion / seconds, 1),
        processed_tokens_per_s=round(sequences * (prompt + completion) / seconds, 1),
        first_step_ratio_mean=first.get("ratio_mean"),
        first_step_logprob_gap=first.get("logprob_gap"),
    )
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated(device)
        result["peak_gb"] = round(peak / 2**30, 3)
        result["peak_over_planned"] = round(peak / plan.peak_bytes, 3)
    del updater, model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return result


def _fsdp_case(
    finetune: str, device: str, sequences: int, prompt: int, completion: int, steps: int
) -> dict[str, Any]:
    """A GRPO step of the tiny model sharded over every GPU (FSDP2), rank 0's figures."""
    import torch

    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from fulmen.algorithms.parallel.config import DataParallelConfig
    from fulmen.algorithms.parallel.workers import UpdaterSpec, open_update_workers
    from fulmen.algorithms.policy import load_causal_lm
    from fulmen.engines.models import resolve_model

    cuda = device.startswith("cuda")
    ranks = torch.cuda.device_count() if cuda else 2
    result: dict[str, Any] = {"shape": "tiny", "finetune": finetune, "fsdp_ranks": ranks}
    if ranks < 2:
        result["skipped"] = "one GPU: a sharded update needs two"
        return result
    parallel = DataParallelConfig(
        world_size=ranks, backend="nccl" if cuda else "gloo", strategy="fsdp", timeout_s=300
    )
    directory = resolve_model("tiny")
    config = GRPOConfig(
        finetune=finetune,  # type: ignore[arg-type]
        device="cuda:0" if cuda else "cpu",
        learning_rate=1e-5,
        micro_batch_tokens=4096,
        max_seq_len=prompt + completion,
    )
    updater = GRPOUpdater(load_causal_lm(directory), config=config)
    batch = _batch(updater, 1000, sequences, prompt, completion)
    workers = open_update_workers(parallel)
    assert workers is not None
    try:
        workers.attach(updater, UpdaterSpec.of(updater, directory), config=parallel)
        if cuda:
            torch.cuda.reset_peak_memory_stats(config.device)
        times = []
        for step in range(steps + 1):
            started = time.perf_counter()
            metrics = updater.train_step(batch)
            if cuda:
                torch.cuda.synchronize(config.device)
            if step:
                times.append(time.perf_counter() - started)
            else:
                result["first_step_ratio_mean"] = metrics.get("ratio_mean")
        result["step_s"] = round(statistics.median(times), 3)
        if cuda:
            result["rank0_peak_gb"] = round(
                torch.cuda.max_memory_allocated(config.device) / 2**30, 3
            )
    finally:
        workers.close()
    return result


def _batch(updater: Any, vocab: int, sequences: int, prompt: int, completion: int) -> list[Any]:
    """Random sequences in groups of four, their behaviour logprobs the policy's own."""
    import torch

    from fulmen.algorithms.policy import token_logprobs
    from fulmen.types.transitions import Transition

    generator = torch.Generator().manual_seed(1)
    batch = []
    for i in range(sequences):
        ids = torch.randint(4, vocab, (prompt + completion,), generator=generator)
        full = ids[None].to(updater.device)
        positions = torch.arange(prompt, prompt + completion, device=updater.device)
        with torch.no_grad():
            logprobs, _ = token_logprobs(
                updater.model,
                input_ids=full,
                attention_mask=torch.ones_like(full),
                rows=torch.zeros_like(positions),
                positions=positions,
            )
        batch.append(
            Transition(
                rollout_id=f"r{i}",
                task_id=f"t{i // 4}",
                call_index=0,
                prompt_token_ids=ids[:prompt].tolist(),
                completion_token_ids=ids[prompt:].tolist(),
                logprobs=logprobs.float().cpu().tolist(),
                loss_mask=[1] * completion,
                credit_weights=[1.0] * completion,
                reward=float(i % 2),
                rollout_reward=float(i % 2),
            )
        )
    return batch


def _gap(device: str) -> dict[str, float] | None:
    """Mean and largest |CPU - device| token logprob of the tiny model on the same tokens."""
    if device == "cpu":
        return None
    import torch

    from fulmen.algorithms.policy import load_causal_lm, token_logprobs
    from fulmen.engines.models import resolve_model

    model = load_causal_lm(resolve_model("tiny")).eval()
    ids = torch.randint(4, 1000, (8, 512), generator=torch.Generator().manual_seed(2))
    rows = torch.arange(8).repeat_interleave(511)
    positions = torch.arange(1, 512).repeat(8)
    values = []
    for where in ("cpu", device):
        model.to(where)
        with torch.no_grad():
            logprobs, _ = token_logprobs(
                model,
                input_ids=ids.to(where),
                attention_mask=torch.ones_like(ids).to(where),
                rows=rows.to(where),
                positions=positions.to(where),
            )
        values.append(logprobs.double().cpu())
    gap = (values[0] - values[1]).abs()
    return {"mean": float(gap.mean()), "max": float(gap.max())}


def _free(device: str) -> int | None:
    import torch

    if not device.startswith("cuda"):
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
