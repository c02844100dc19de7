"""The run's memory plan: what each device needs, checked before anything starts.

``fulmen plan CONFIG`` prints it and ``fulmen train`` checks it first. Per device it adds up
what the run's processes hold: on the host, the trainer's process, the engine's (its weights,
prefix cache, one prefill, and its running KV up to the budget) and each update rank on the
CPU; on a GPU, the update of the rank it serves. The update's and the engine's figures come
from dry runs of their own code on the meta device (``fulmen.algorithms.update_memory``,
``fulmen.engines.memory``). Stages run one after the other, so the largest stage counts.

Two totals are compared with what the device has free: the **fixed** part, held whatever the
data (weights, optimizer state, a full micro-batch of ``micro_batch_tokens``, a full prefix
cache, the processes themselves), and the **peak**, which adds what only the longest data
reaches (a single sequence of ``max_seq_len`` tokens, a running batch that fills the KV
budget). A fixed part that cannot fit is refused with the setting to change; a peak that
cannot fit is a warning naming the sequence length or KV budget that would run out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.errors import ConfigError, FulmenError

if TYPE_CHECKING:
    from fulmen.algorithms.update_memory import UpdateMemory
    from fulmen.engines.memory import EngineMemory
    from fulmen.trainer.config import TrainConfig

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "PROCESS_BYTES",
    "DevicePlan",
    "MemoryPlan",
    "MemoryPlanUnavailable",
    "StageUpdate",
    "available_bytes",
    "plan_memory",
]

#: What one fulmen process holds before any model: Python, torch, transformers and peft
#: imported (0.36 GiB resident, measured on CPU) and the allocator's slack around a step.
PROCESS_BYTES = 640 << 20
#: A CUDA context per process and GPU (not measured here: no GPU; a typical figure).
CUDA_CONTEXT_BYTES = 512 << 20


class MemoryPlanUnavailable(ConfigError):
    """The model's code could not run on the meta device, so its memory cannot be planned.

    Code that needs values (a data-dependent operation) or a device feature meta lacks (peft's
    LoRA on a mixture-of-experts model's expert weights enters ``torch.autocast``, which has no
    meta device) stops the dry run; ``fulmen train`` then starts without a plan.
    """


@dataclass(frozen=True)
class StageUpdate:
    """One stage's update plan and the option path its settings live under."""

    name: str
    prefix: str  # "algorithm.grpo" or "stages.1.grpo"
    memory: UpdateMemory


@dataclass
class DevicePlan:
    """What one device needs: named items, each fixed or reached only by the longest data."""

    device: str
    available: int | None
    fixed: list[tuple[str, int]] = field(default_factory=list)
    extra: list[tuple[str, int]] = field(default_factory=list)

    @property
    def fixed_bytes(self) -> int:
        """What it holds whatever the data."""
        return sum(n for _, n in self.fixed)

    @property
    def peak_bytes(self) -> int:
        """The most it may hold: the fixed part and every data-dependent item at its limit."""
        return self.fixed_bytes + sum(n for _, n in self.extra)

    def verdict(self) -> str:
        """``fits``, ``fits unless the data reaches its limits``, ``does not fit``, ``unknown``."""
        if self.available is None:
            return "unknown (free memory not known)"
        if self.fixed_bytes > self.available:
            return "does not fit"
        if self.peak_bytes > self.available:
            return "fits unless the data reaches its limits"
        return "fits"


@dataclass(frozen=True)
class MemoryPlan:
    """The run's plan: its updates, its engine, and per device what is needed and free."""

    model: str
    updates: tuple[StageUpdate, ...]
    engine: EngineMemory | None
    devices: tuple[DevicePlan, ...]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """Whether every device's fixed part fits (nothing to refuse)."""
        return not self.problems

    def lines(self) -> list[str]:
        """Describe the plan for the console, one item per line."""
        out = [f"memory plan for {self.model}:"]
        if self.engine is not None:
            out.append("  " + _engine_line(self.engine))
        for stage in self.updates:
            out.extend("  " + line for line in _update_lines(stage))
        for device in self.devices:
            free = "?" if device.available is None else _size(device.available)
            out.append(
                f"  {device.device}: needs {_size(device.fixed_bytes)}, up to "
                f"{_size(device.peak_bytes)} at the data's limits; {free} free: "
                f"{device.verdict()}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """Return the plan as plain data (``fulmen plan --json``), sizes in bytes."""
        engine = self.engine
        return {
            "model": self.model,
            "fits": self.fits,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "engine": None
            if engine is None
            else {
                "kind": engine.kind,
                "weights": engine.weights_bytes,
                "prefix_cache": engine.prefix_cache_bytes,
                "prefill": engine.prefill_bytes,
                "kv": engine.kv_bytes,
                "kv_per_token": engine.kv_bytes_per_token,
                "context": engine.context,
            },
            "updates": [
                {
                    "stage": s.name,
                    "settings": s.prefix,
                    "device": s.memory.shape.device,
                    "ranks": s.memory.shape.ranks,
                    "parameters": s.memory.parameters,
                    "trained": s.memory.trained,
                    "weights": s.memory.weights_bytes,
                    "reference": s.memory.reference_bytes,
                    "optimizer": s.memory.optimizer_bytes,
                    "optimizer_step": s.memory.step_bytes,
                    "micro_batches": [
                        {
                            "tokens": m.tokens,
                            "checkpointed": m.checkpointed,
                            "plain": m.plain_bytes,
                            "with_checkpointing": m.checkpointed_bytes,
                        }
                        for m in s.memory.micro_batches
                    ],
                }
                for s in self.updates
            ],
            "devices": [
                {
                    "device": d.device,
                    "available": d.available,
                    "fixed": d.fixed_bytes,
                    "peak": d.peak_bytes,
                    "items": {label: n for label, n in d.fixed + d.extra},
                    "verdict": d.verdict(),
                }
                for d in self.devices
            ],
        }


def plan_memory(
    config: TrainConfig,
    *,
    model_dir: str | Path | None = None,
    available: dict[str, int] | None = None,
    alternatives: bool = True,
) -> MemoryPlan:
    """Plan ``config``'s run: its engine, each stage's update, and the devices they share.

    ``model_dir`` is the model's local directory (default: ``resolve_model(config.model)``,
    which builds a known model on first use). ``available`` overrides the free memory of a
    device (``"cpu"``, ``"cuda"``: every GPU), to plan for another machine.
    ``alternatives`` plans each micro-batch with activation checkpointing and without, not
    only as the run does it (``plan_update``).
    """
    from fulmen.algorithms.update_memory import plan_update
    from fulmen.engines.memory import plan_engine
    from fulmen.engines.models import resolve_model

    shapes = [
        ("algorithm" if config.stages is None else f"stages.{index}", stage.name, shape)
        for index, stage in enumerate(config.plan())
        for shape in [stage.update_shape()]
        if shape is not None
    ]
    updates: list[StageUpdate] = []
    engine: EngineMemory | None = None
    if shapes or config.engine.kind != "endpoint":  # else nothing here holds a model
        directory = Path(model_dir) if model_dir is not None else resolve_model(config.model)
        try:
            for where, name, shape in shapes:
                memory = plan_update(shape, directory, alternatives=alternatives)
                updates.append(StageUpdate(str(name), f"{where}.{shape.key}", memory))
            engine = plan_engine(config.engine, directory)
        except FulmenError:
            raise
        except Exception as exc:  # the model's own code, run where it was not written to run
            raise MemoryPlanUnavailable(
                f"cannot plan the memory of {config.model}: its code did not run on the meta "
                f"device ({type(exc).__name__}: {str(exc)[:300]})"
            ) from exc
    replicas = None if config.cluster is None else config.cluster.engine_replicas
    devices = _devices(updates, engine, available or {}, engine_replicas=replicas)
    problems, warnings = _advice(devices, updates, engine)
    return MemoryPlan(
        model=config.model,
        updates=tuple(updates),
        engine=engine,
        devices=tuple(devices),
        problems=tuple(problems),
        warnings=tuple(warnings),
    )


def available_bytes(device: str) -> int | None:
    """Free memory of ``device`` now: the host's (``cpu``, within a cgroup's limit) or a GPU's."""
    if device == "cpu":
        return _host_available()
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            return None
        return int(torch.cuda.mem_get_info(index)[0])
    except (ImportError, RuntimeError):
        return None


def _host_available() -> int | None:
    free: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # a container's limit (cgroup v2) may be below the host's free memory
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            room = max(0, int(limit) - used)
            free = room if free is None else min(free, room)
    except (OSError, ValueError):
        pass
    if free is None and hasattr(os, "sysconf"):
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return None
    return free


def _device_key(device: str) -> str:
    return "cpu" if device == "cpu" else device if ":" in device else "cuda:0"


def _devices(
    updates: list[StageUpdate],
    engine: EngineMemory | None,
    given: dict[str, int],
    *,
    engine_replicas: int | None,
) -> list[DevicePlan]:
    host = DevicePlan("cpu", given["cpu"] if "cpu" in given else available_bytes("cpu"))
    host.fixed.append(("trainer process", PROCESS_BYTES))
    plans = {"cpu": host}
    if engine is not None:
        # On Ray the replicas run on whichever nodes the cluster gives them: each is planned
        # as a node of its own, whose free memory is not known from here.
        where = host
        if engine_replicas is not None:
            where = DevicePlan(f"each of {engine_replicas} engine replicas' node", None)
            plans["engine"] = where
        where.fixed.append((f"engine ({engine.kind}): process", PROCESS_BYTES))
        where.fixed.append(("engine: weights", engine.weights_bytes))
        if engine.prefix_cache_bytes:
            where.fixed.append(("engine: prefix cache", engine.prefix_cache_bytes))
        if engine.prefill_bytes:
            where.fixed.append(("engine: one prefill chunk", engine.prefill_bytes))
        if engine.kv_allocated_at_start:
            where.fixed.append(("engine: KV space", engine.kv_bytes))
        else:
            where.extra.append(("engine: running KV at its budget", engine.kv_bytes))
    # stages run one after the other: each device counts its largest stage
    largest: dict[str, tuple[int, StageUpdate]] = {}
    for stage in updates:
        key = _device_key(stage.memory.shape.device)
        ranks = stage.memory.shape.ranks if key == "cpu" else 1
        size = ranks * stage.memory.peak_bytes
        if key not in largest or size > largest[key][0]:
            largest[key] = (size, stage)
    for key, (_, stage) in largest.items():
        memory = stage.memory
        if key not in plans:
            free = given["cuda"] if "cuda" in given else available_bytes(key)
            plans[key] = DevicePlan(key, free)
            plans[key].fixed.append(("CUDA context", CUDA_CONTEXT_BYTES))
        plan = plans[key]
        ranks = memory.shape.ranks if key == "cpu" else 1
        each = f" x {ranks} ranks" if ranks > 1 else ""
        if ranks > 1:
            plan.fixed.append(
                (f"update ({stage.name}): rank processes", (ranks - 1) * PROCESS_BYTES)
            )
        full = memory.micro_batches[0]
        resident = memory.weights_bytes + memory.reference_bytes + memory.optimizer_bytes
        step = max(full.peak_bytes, memory.stepping_bytes)
        plan.fixed.append((f"update ({stage.name}): weights and optimizer{each}", ranks * resident))
        plan.fixed.append((f"update ({stage.name}): a full micro-batch{each}", ranks * step))
        if len(memory.micro_batches) > 1:
            longest = memory.micro_batches[1].peak_bytes
            if longest > step:
                plan.extra.append(
                    (f"update ({stage.name}): the longest sequence{each}", ranks * (longest - step))
                )
    return list(plans.values())


def _advice(
    devices: list[DevicePlan], updates: list[StageUpdate], engine: EngineMemory | None
) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    warnings: list[str] = []
    for device in devices:
        if device.available is None:
            continue
        free = device.available
        if device.fixed_bytes > free:
            fixes = _fixes(device, updates, engine)
            problems.append(
                f"the run needs {_size(device.fixed_bytes)} of {device.device} memory and "
                f"{_size(free)} is free ({_largest(device.fixed)}); " + "; or ".join(fixes)
            )
        elif device.peak_bytes > free:
            room = free - device.fixed_bytes
            for label, size in device.extra:
                if size > room:
                    warnings.append(_extra_warning(label, size, room, device, updates, engine))
    return problems, warnings


def _largest(items: list[tuple[str, int]]) -> str:
    top = sorted(items, key=lambda item: -item[1])[:3]
    return ", ".join(f"{label} {_size(n)}" for label, n in top)


def _fixes(
    device: DevicePlan, updates: list[StageUpdate], engine: EngineMemory | None
) -> list[str]:
    """List the settings that shrink the largest items on ``device``, largest first."""
    fixes: list[tuple[int, str]] = []
    for stage in updates:
        memory = stage.memory
        if _device_key(memory.shape.device) != device.device:
            continue
        shape, p = memory.shape, stage.prefix
        full = memory.micro_batches[0]
        if shape.finetune == "full":
            fixes.append(
                (
                    memory.weights_bytes + memory.optimizer_bytes,
                    f"set {p}.finetune: lora (optimizer state for {memory.trained:,} parameters "
                    f"now: {_size(memory.optimizer_bytes)})",
                )
            )
        plain, checkpointed = full.plain_bytes, full.checkpointed_bytes
        if not full.checkpointed and checkpointed is not None and plain is not None:
            fixes.append(
                (
                    plain - checkpointed,
                    f"set {p}.gradient_checkpointing: true (a full micro-batch "
                    f"{_size(checkpointed)} instead of {_size(plain)})",
                )
            )
        fixes.append(
            (
                full.peak_bytes // 2,
                f"lower {p}.micro_batch_tokens (a micro-batch of {full.tokens} tokens needs "
                f"{_size(full.peak_bytes)})",
            )
        )
        if shape.ranks > 1 and device.device == "cpu":
            fixes.append(
                (
                    (shape.ranks - 1) * memory.peak_bytes,
                    f"lower algorithm.data_parallel.world_size ({shape.ranks} ranks on this "
                    "machine each hold the whole model)",
                )
            )
    if engine is not None and device.device == "cpu":
        if engine.prefix_cache_bytes:
            fixes.append(
                (
                    engine.prefix_cache_bytes,
                    f"lower engine.prefix_cache_mb (now {_size(engine.prefix_cache_bytes)}), or "
                    "engine.prefix_cache: false",
                )
            )
        if engine.kind == "builtin":
            fixes.append(
                (engine.weights_bytes // 2, "set engine.dtype: bfloat16 (half the weights)")
            )
    fixes.sort(key=lambda fix: -fix[0])
    return [text for _, text in fixes[:3]] or ["a device with more memory"]


def _extra_warning(
    label: str,
    size: int,
    room: int,
    device: DevicePlan,
    updates: list[StageUpdate],
    engine: EngineMemory | None,
) -> str:
    head = (
        f"{device.device}: {label} needs {_size(size)} beyond the fixed "
        f"{_size(device.fixed_bytes)}, and {_size(max(room, 0))} is left"
    )
    if label.startswith("engine") and engine is not None:
        mb = max(1, room // (1 << 20))
        tokens = engine.kv_bytes // engine.kv_bytes_per_token
        return (
            f"{head}: a running batch of {tokens:,} KV tokens would run out of memory; set "
            f"engine.kv_cache_mb: {mb} (or lower engine.max_batch)"
        )
    for stage in updates:
        if stage.name in label and len(stage.memory.micro_batches) > 1:
            longest = stage.memory.micro_batches[1]
            plain, checkpointed = longest.plain_bytes, longest.checkpointed_bytes
            fix = (
                f", or set {stage.prefix}.gradient_checkpointing: true "
                f"({_size(checkpointed)} instead of {_size(plain)})"
                if not longest.checkpointed and plain is not None and checkpointed is not None
                else ""
            )
            return (
                f"{head}: a sequence of {longest.tokens:,} tokens would run out of memory; "
                f"lower {stage.prefix}.max_seq_len{fix}"
            )
    return head


def _engine_line(engine: EngineMemory) -> str:
    parts = [f"weights {_size(engine.weights_bytes)}"]
    if engine.prefix_cache_bytes:
        parts.append(f"prefix cache up to {_size(engine.prefix_cache_bytes)}")
    if engine.prefill_bytes:
        parts.append(f"one prefill chunk {_size(engine.prefill_bytes)}")
    kv = (
        f"KV space {_size(engine.kv_bytes)} taken at start"
        if engine.kv_allocated_at_start
        else f"running KV up to {_size(engine.kv_bytes)} "
        f"({engine.kv_bytes // engine.kv_bytes_per_token:,} tokens at "
        f"{engine.kv_bytes_per_token / 1024:.1f} KiB; context {engine.context:,})"
    )
    return f"engine {engine.kind} ({engine.dtype}): {', '.join(parts)}; {kv}"


def _update_lines(stage: StageUpdate) -> list[str]:
    memory = stage.memory
    shape = memory.shape
    how = f"lora r{shape.lora.r}" if shape.finetune == "lora" else "full weights"
    ranks = f", {shape.ranks} ranks" if shape.ranks > 1 else ""
    if shape.sharded:
        ranks += f" sharded, each holding {_size(memory.gathered_bytes)} gathered"
    reference = (
        f", frozen reference {_size(memory.reference_bytes)}" if memory.reference_bytes else ""
    )
    trained = memory.stepping_bytes - memory.step_bytes  # the gradients: one per trained value
    whole = memory.trained * (4 if shape.dtype == "float32" else 2)  # not a rank's shard of it
    adapter = f" (the adapter {_size(whole)})" if shape.finetune == "lora" else ""
    lines = [
        f"update {stage.name} ({how}, {shape.dtype}, {shape.device}{ranks}): "
        f"{memory.parameters:,} parameters, {memory.trained:,} trained; weights "
        f"{_size(memory.weights_bytes)}{adapter}, gradients {_size(trained)}, optimizer "
        f"{_size(memory.optimizer_bytes)}{reference}"
    ]
    names = ["a full micro-batch", "the longest sequence"]
    for name, micro in zip(names, memory.micro_batches, strict=False):
        ways = [
            f"{label} {_size(n)}" + (" (this run)" if checkpointed == micro.checkpointed else "")
            for label, n, checkpointed in (
                ("without activation checkpointing", micro.plain_bytes, False),
                ("with it", micro.checkpointed_bytes, True),
            )
            if n is not None
        ]
        lines.append(f"  {name} ({micro.tokens:,} tokens): {', '.join(ways)}")
    return lines


def _size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n / 1024:.0f} KiB"
