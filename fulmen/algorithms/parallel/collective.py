"""The process group of a data-parallel update: messages from rank 0, summed gradients.

``Collective`` wraps one ``torch.distributed`` process group (gloo on CPU, NCCL on GPUs). Rank 0
leads: it sends every other rank its part of each step (``share``, one ``scatter_object_list``),
and every rank then sums its gradients and loss statistics with the others (``sum_gradients``,
``sum_values``), so each applies the same optimizer step and the weights stay identical.
``split_indices`` (and ``split_samples``) divide a step's samples into balanced parts without
splitting a rollout; ``sum_fields`` sums a step's totals over the ranks.
Torch is imported here, never by ``import fulmen``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from fulmen.algorithms.batching import TokenSample
from fulmen.errors import ConfigError
from fulmen.settings import launcher_variable

__all__ = ["MESSAGE_TIMEOUT", "Collective", "resolve_backend", "split_indices", "split_samples"]

_Totals = TypeVar("_Totals")

#: How long a worker waits for rank 0's next message (a rank that dies is noticed sooner:
#: torchrun stops the others, and locally spawned ranks exit with their parent).
MESSAGE_TIMEOUT = datetime.timedelta(days=7)


def resolve_backend(backend: str | None) -> str:
    """Return ``backend``, or ``nccl`` when CUDA is available and ``gloo`` otherwise.

    Raises:
        ConfigError: ``nccl`` was asked for without a CUDA device.
    """
    if backend is None:
        return "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("algorithm.data_parallel.backend 'nccl' needs CUDA; use 'gloo' on CPU")
    return backend


class Collective:
    """One rank's handle on the data-parallel process group.

    Args:
        rank / world_size: this process's place in the group.
        init_method: how the ranks meet (``env://`` under ``torchrun``, ``file://...`` or
            ``tcp://host:port``).
        backend: ``gloo`` or ``nccl`` (``resolve_backend``).
        timeout_s: the longest wait in one gradient or loss collective. Messages from rank 0
            travel on a second (gloo) group that waits up to ``MESSAGE_TIMEOUT``: a worker
            idles there while rank 0 runs a step's rollouts, or validation.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        init_method: str,
        backend: str = "gloo",
        timeout_s: float = 600.0,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is outside a world of {world_size}")
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = torch.device("cpu")
        if backend == "nccl":  # one GPU per rank; object collectives use the current device
            local = int(launcher_variable("LOCAL_RANK") or rank) % torch.cuda.device_count()
            self.device = torch.device("cuda", local)
            torch.cuda.set_device(self.device)
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        messages = dist.new_group(backend="gloo", timeout=MESSAGE_TIMEOUT)
        if not isinstance(messages, dist.ProcessGroup):  # typed as a union with an int sentinel
            raise ConfigError(f"rank {rank} is not in the data-parallel message group")
        self._messages = messages

    @property
    def is_leader(self) -> bool:
        """Whether this is rank 0, which runs the training loop and sends the others work."""
        return self.rank == 0

    def share(self, parts: Sequence[Any], *, op: str = "step") -> Any:
        """Send ``(op, parts[r])`` to each rank ``r``; return rank 0's own part (leader only).

        ``op`` tells a worker what to do with its part (``update_workers``): ``step`` (train
        on it), ``build``, ``release`` or ``stop``.
        """
        if len(parts) != self.world_size:
            raise ConfigError(f"{len(parts)} parts for a world of {self.world_size}")
        received: list[Any] = [None]
        dist.scatter_object_list(
            received, [(op, part) for part in parts], src=0, group=self._messages
        )
        return received[0][1]

    def receive(self) -> tuple[str, Any]:
        """Wait for this rank's ``(op, part)`` of rank 0's next ``share`` (workers only)."""
        received: list[Any] = [None]
        dist.scatter_object_list(received, None, src=0, group=self._messages)
        return received[0]

    def sum_gradients(self, parameters: Sequence[torch.Tensor]) -> None:
        """Replace each parameter's gradient with its sum over the ranks, in one all-reduce.

        A rank whose part of the batch was empty (or whose samples never reached a
        parameter) contributes zeros, so every rank ends with the same gradients.
        """
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.reshape(-1).to(self.device) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for param, grad in zip(parameters, grads, strict=True):
            n = grad.numel()
            summed = flat[offset : offset + n].view_as(param)
            param.grad = summed.to(device=param.device, dtype=param.dtype, copy=True)
            offset += n

    def sum_values(self, values: Sequence[float]) -> list[float]:
        """Sum a list of numbers over the ranks (float64), every rank getting the result."""
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return [float(v) for v in tensor.cpu()]

    def sum_fields(self, totals: _Totals, *, maxima: Sequence[str] = ()) -> _Totals:
        """Return a copy of the dataclass ``totals`` with each field summed over the ranks.

        A step's totals (token counts, loss sums) add up over the ranks' parts; the fields
        named in ``maxima`` are the largest over the ranks instead. Every rank gets the result.
        """
        fields = [f.name for f in dataclasses.fields(totals)]  # type: ignore[arg-type]
        names = [n for n in fields if n not in maxima]
        values = self.sum_values([float(getattr(totals, n)) for n in names])
        merged = {n: type(getattr(totals, n))(v) for n, v in zip(names, values, strict=True)}
        merged.update({n: self.max_value(getattr(totals, n)) for n in maxima})
        return dataclasses.replace(totals, **merged)  # type: ignore[type-var]

    def max_value(self, value: float) -> float:
        """Return the largest of one number over the ranks, every rank getting the result."""
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor.item())

    def close(self) -> None:
        """Leave the process group (once every rank is done with it)."""
        if dist.is_initialized():
            dist.destroy_process_group()


def split_indices(
    sizes: Sequence[int], world_size: int, *, keys: Sequence[Hashable] | None = None
) -> list[list[int]]:
    """Divide items of ``sizes`` tokens into ``world_size`` parts of indices, keeping keys whole.

    Units (the items sharing a key; each item its own without ``keys``) go, largest first, to
    the part with the fewest tokens so far, so the ranks get similar work; each part keeps the
    batch's order.
    """
    units: dict[Hashable, list[int]] = {}
    for index in range(len(sizes)):
        units.setdefault(keys[index] if keys is not None else index, []).append(index)
    size = {k: sum(sizes[i] for i in members) for k, members in units.items()}
    loads = [0] * world_size
    owner: dict[int, int] = {}
    for unit in sorted(units, key=lambda k: (-size[k], units[k][0])):
        rank = loads.index(min(loads))
        loads[rank] += size[unit]
        for index in units[unit]:
            owner[index] = rank
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for index in range(len(sizes)):
        parts[owner[index]].append(index)
    return parts


def split_samples(
    samples: Sequence[TokenSample],
    world_size: int,
    *,
    key: Callable[[int, TokenSample], Hashable] = lambda _, s: s.rollout,
) -> list[list[TokenSample]]:
    """Divide ``samples`` into ``world_size`` balanced parts, never splitting a ``key``.

    The parts of ``split_indices`` (by default a rollout's samples stay together). Loss
    weights are already global (``TokenSample.norm``), so the parts' losses add up to the
    batch's.
    """
    keys = [key(i, s) for i, s in enumerate(samples)]
    parts = split_indices([len(s) for s in samples], world_size, keys=keys)
    return [[samples[i] for i in part] for part in parts]
