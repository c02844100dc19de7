"""The processes of a data-parallel update: rank 0's handle on them, and what they run.

Rank 0 runs the whole training stack; every other rank runs ``run_update_worker``, which only
takes updates. It waits for rank 0's messages (``Collective.share``): ``build`` (an
``UpdaterSpec`` and rank 0's trainable weights, optimizer state and step, so a resumed run or a
stage that starts from an adapter starts every rank alike), ``step`` (its share of a step,
trained with the batch's loss weights and summed gradients), ``call`` (a function every rank
runs on its engine: sharding's gathers and checkpoints, ``parallel.sharding.everywhere``),
``release`` (the stage is over; wait for the next ``build``) and ``stop``.

The engines are the algorithms' (``parallel.updater.Updater``: GRPO's, SFT's, PPO's and DPO's
updaters), named here only as ``"module:Class"`` in an ``UpdaterSpec``.
``open_update_workers`` gives rank 0 its ``UpdateWorkers``: under ``torchrun`` the other ranks
are already running (``fulmen train`` on them calls ``run_update_worker``); otherwise it spawns
``world_size - 1`` local processes itself. ``run_update_worker`` is a plain importable
function, so another launcher (a Ray actor, say) can start ranks with it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from fulmen.algorithms.parallel.collective import Collective, resolve_backend
from fulmen.algorithms.parallel.config import (
    DataParallelConfig,
    check_sharded_resume,
    torchrun_rank,
)
from fulmen.algorithms.parallel.sharding import everywhere, run_call, shard
from fulmen.algorithms.parallel.updater import Updater
from fulmen.errors import ConfigError, FulmenError
from fulmen.settings import launcher_variable

__all__ = [
    "UpdaterSpec",
    "UpdateWorkers",
    "open_update_workers",
    "run_torchrun_rank",
    "run_update_worker",
]

logger = logging.getLogger("fulmen.train")

#: Seconds a spawned worker gets to exit after ``stop`` before it is killed.
_JOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class UpdaterSpec:
    """How a worker builds the same engine as rank 0 (the paths must be readable by it).

    Attributes:
        engine: ``"module:Class"`` of the wrapper; built as ``Class(model, config=settings)``.
        settings: ``"module:Class"`` of its config model (with ``dtype`` and ``finetune``).
        model_path: the base model directory.
        config: the engine's config as JSON.
        weights / adapter: what the stage starts from (``policy.load_stage_policy``).
    """

    engine: str
    settings: str
    model_path: str
    config: dict[str, Any] = field(default_factory=dict[str, Any])
    weights: str | None = None
    adapter: str | None = None

    @classmethod
    def of(
        cls,
        engine: Updater,
        model_path: str | Path,
        *,
        weights: str | Path | None = None,
        adapter: str | Path | None = None,
    ) -> UpdaterSpec:
        """Return the spec that rebuilds ``engine`` (its class and config) on another rank."""
        return cls(
            _qualified(type(engine)),
            _qualified(type(engine.config)),
            str(model_path),
            # what was set, not every default: a config whose checks refuse an option given
            # where it has no effect (PPO's kl_estimator without kl_coef) validates again
            engine.config.model_dump(mode="json", exclude_unset=True),
            weights=str(weights) if weights else None,
            adapter=str(adapter) if adapter else None,
        )

    def build(self, *, rank: int = 0) -> Updater:
        """Load the policy and build the engine, as rank 0 did before restoring its state.

        A policy on a GPU goes to this rank's own (``cuda:LOCAL_RANK``, else ``cuda:rank``,
        modulo the GPUs torch sees here).
        """
        from fulmen.algorithms.policy import load_stage_policy

        config = dict(self.config)
        if str(config.get("device", "cpu")).startswith("cuda"):
            local = int(launcher_variable("LOCAL_RANK") or rank)
            config["device"] = f"cuda:{local % max(torch.cuda.device_count(), 1)}"
        settings = _load(self.settings).model_validate(config)
        model = load_stage_policy(
            self.model_path,
            dtype=settings.dtype,
            finetune=settings.finetune,
            weights=Path(self.weights) if self.weights else None,
            adapter=Path(self.adapter) if self.adapter else None,
        )
        return cast("Updater", _load(self.engine)(model, config=settings))


def _qualified(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _state(engine: Updater) -> dict[str, Any]:
    """Trainable weights, optimizer state and step, on the CPU (ranks may use other GPUs)."""
    trained = engine.trained.named_parameters()
    trainable = {n: p.detach().cpu() for n, p in trained if p.requires_grad}
    optimizer = engine.optimizer.state_dict()
    optimizer["state"] = {
        index: {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
        for index, values in optimizer["state"].items()
    }
    return {"params": trainable, "optimizer": optimizer, "step": engine.step}


def _load_state(engine: Updater, state: dict[str, Any]) -> None:
    params = dict(engine.trained.named_parameters())
    with torch.no_grad():
        for name, value in state["params"].items():
            params[name].copy_(value)
    engine.optimizer.load_state_dict(state["optimizer"])
    engine.step = int(state["step"])


def run_update_worker(
    rank: int,
    world_size: int,
    init_method: str,
    *,
    backend: str | None = None,
    timeout_s: float = 600.0,
) -> None:
    """Join the group as ``rank`` and take rank 0's updates until it says ``stop``.

    Args:
        rank: this process's rank (1 .. ``world_size - 1``; rank 0 runs the training).
        world_size: processes in the group.
        init_method: where the ranks meet (``env://`` under ``torchrun``).
        backend: ``gloo``, ``nccl`` or ``None`` (``nccl`` when CUDA is available).
        timeout_s: the longest wait in one collective (rank 0 may take a while between steps:
            rollouts run meanwhile).
    """
    if rank == 0:
        raise ConfigError("rank 0 runs the training loop, not an update worker")
    collective = Collective(
        rank=rank,
        world_size=world_size,
        init_method=init_method,
        backend=resolve_backend(backend),
        timeout_s=timeout_s,
    )
    engine: Updater | None = None
    try:
        while True:
            op, part = collective.receive()
            if op == "stop":
                return
            if op == "release":
                engine = None
            elif op == "build":
                built = part["spec"].build(rank=rank)
                _load_state(built, part["state"])
                built.collective = collective
                engine = built
            elif op == "step" and engine is not None:
                engine.train_part(part)
            elif op == "call" and engine is not None:
                run_call(engine, *part)
            else:
                raise FulmenError(f"update worker {rank}: unexpected message {op!r}")
    finally:
        collective.close()


def run_torchrun_rank(config: DataParallelConfig | None) -> None:
    """Serve as one of ``torchrun``'s ranks other than 0 (what ``fulmen train`` does there).

    Raises:
        ConfigError: not under ``torchrun``, on rank 0, or ``config.world_size`` differs from
            ``WORLD_SIZE``.
    """
    launched = torchrun_rank()
    if launched is None or launched[0] == 0:
        raise ConfigError("run_torchrun_rank is for torchrun's ranks other than 0")
    rank, world = launched
    _check_world(config, world)
    run_update_worker(
        rank,
        world,
        "env://",
        backend=config.backend if config else None,
        timeout_s=config.timeout_s if config else 600.0,
    )


def _check_world(config: DataParallelConfig | None, world: int) -> None:
    if config is not None and config.world_size != world:
        raise ConfigError(
            f"algorithm.data_parallel.world_size={config.world_size} but torchrun started "
            f"{world} processes (WORLD_SIZE); leave world_size out or make them equal"
        )


class UpdateWorkers:
    """Rank 0's handle on the other ranks: hand them an engine, then release or stop them.

    ``spawned`` are processes this one started (stopped on ``close``); under ``torchrun`` it
    is empty and ``close`` only releases the ranks, which wait for the next stage.
    """

    def __init__(
        self,
        collective: Collective,
        *,
        spawned: list[subprocess.Popen[bytes]] | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.collective = collective
        self.spawned = spawned or []
        self._scratch = scratch
        self._engine: Updater | None = None

    @property
    def world_size(self) -> int:
        """Processes taking each update, this one included."""
        return self.collective.world_size

    def attach(
        self, engine: Updater, spec: UpdaterSpec, *, config: DataParallelConfig | None = None
    ) -> None:
        """Give every rank a copy of ``engine`` (weights and optimizer state as they are now).

        From then on the engine's updates run on every rank. With ``config.strategy`` ``fsdp``
        every rank then shards the policy (``parallel.sharding.shard``), loading a sharded
        checkpoint ``engine`` was asked to resume from.

        Raises:
            ConfigError: ``engine`` resumes from a sharded checkpoint but the strategy is not
                ``fsdp``.
        """
        resume = engine.resume_shards
        check_sharded_resume(resume, config)
        message = {"spec": spec, "state": _state(engine)}
        self.collective.share([message] * self.world_size, op="build")
        engine.collective = self.collective
        self._engine = engine
        if config is not None and config.strategy == "fsdp":
            everywhere(engine, shard, config.param_dtype, str(resume) if resume else None)
            engine.resume_shards = None

    def close(self, *, failed: bool = False) -> None:
        """Release (``torchrun``) or stop and join (spawned) the other ranks.

        After a failure mid-step the others may be stuck in a collective: spawned workers are
        then killed rather than told to stop.
        """
        if self._engine is not None:
            self._engine.collective = None
            self._engine = None
        if not self.spawned:
            if not failed:
                self.collective.share([None] * self.world_size, op="release")
            return
        if not failed:
            with contextlib.suppress(Exception):
                self.collective.share([None] * self.world_size, op="stop")
        deadline = time.monotonic() + (0 if failed else _JOIN_TIMEOUT_S)
        for process in self.spawned:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.collective.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


_torchrun_leader: UpdateWorkers | None = None


def open_update_workers(
    config: DataParallelConfig | None, *, python: str | None = None
) -> UpdateWorkers | None:
    """Rank 0's ``UpdateWorkers``, or ``None`` when the update runs in this process alone.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) the group is the torchrun ranks, joined once per
    process; otherwise ``config`` (``algorithm.data_parallel``) makes this process spawn the
    other ranks on this machine, on ``python`` (``None``: this interpreter).

    Raises:
        ConfigError: ``config.world_size`` differs from ``torchrun``'s, or this is not rank 0.
    """
    global _torchrun_leader
    launched = torchrun_rank()
    if launched is not None:
        rank, world = launched
        if rank != 0:
            raise ConfigError(f"only rank 0 runs the training loop; this is rank {rank}")
        _check_world(config, world)
        if _torchrun_leader is None:
            backend = resolve_backend(config.backend if config else None)
            timeout = config.timeout_s if config else 600.0
            collective = Collective(
                rank=0, world_size=world, init_method="env://", backend=backend, timeout_s=timeout
            )
            _torchrun_leader = UpdateWorkers(collective)
            atexit.register(_stop_torchrun_ranks, _torchrun_leader)
        return _torchrun_leader
    if config is None:
        return None
    from fulmen.algorithms.parallel.spawn import spawn_local_ranks

    collective, spawned, scratch = spawn_local_ranks(config, python=python)
    return UpdateWorkers(collective, spawned=spawned, scratch=scratch)


def _stop_torchrun_ranks(leader: UpdateWorkers) -> None:
    with contextlib.suppress(Exception):
        leader.collective.share([None] * leader.world_size, op="stop")
    leader.collective.close()
