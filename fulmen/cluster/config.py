"""``ClusterConfig``: the ``cluster:`` section of a training config (where the fleet runs).

Without the section everything runs on this machine as before. With ``cluster: {backend:
ray}`` the store service, the runners and the inference-engine replicas are Ray actors with
resource requests (``docs/cluster.md``). Like the rest of the training config, an option that
has no effect is an error, never silently ignored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ClusterConfig"]


class ClusterConfig(BaseModel):
    """Where and how many of the run's services run on a Ray cluster.

    Attributes:
        backend: ``ray`` (the only back-end so far).
        address: the cluster to join: ``auto`` (the one ``ray start`` started on this machine)
            or its GCS address ``HOST:PORT``. Ray Client (``ray://``) is refused: the trainer
            must run on a node of the cluster, because the store service is placed on its node.
        namespace: Ray namespace of the run's actors (default: one per run,
            ``fulmen-<run id>``).
        runners: runner actors; each runs ``rollouts.concurrency`` rollouts at once.
        runner_cpus: CPUs each runner actor asks Ray for.
        engine_replicas: inference-engine replicas; the gateway spreads rollouts over them and
            every replica gets each new adapter or weights before the next step's rollouts.
        engine_cpus: CPUs each engine replica asks Ray for (the built-in engine also uses this
            many torch threads, rounded down, at least one).
        engine_gpus: GPUs each engine replica asks Ray for.
        store_cpus: CPUs the store service actor asks Ray for (only when the run's store is not
            already an ``http://`` service, which is then used as it is).
        max_restarts: how often Ray restarts a runner or engine replica whose process died
            (``-1``: always).
        spread: place runners and replicas on as many nodes as possible (Ray's ``SPREAD``
            strategy) rather than packing them.
        start_timeout_s: how long to wait for every actor to be ready.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["ray"]
    address: str = Field(default="auto", min_length=1)
    namespace: str | None = Field(default=None, min_length=1)
    runners: int = Field(default=1, ge=1)
    runner_cpus: float = Field(default=1.0, gt=0)
    engine_replicas: int = Field(default=1, ge=1)
    engine_cpus: float = Field(default=1.0, gt=0)
    engine_gpus: float = Field(default=0.0, ge=0)
    store_cpus: float = Field(default=0.5, ge=0)
    max_restarts: int = Field(default=-1, ge=-1)
    spread: bool = True
    start_timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("address")
    @classmethod
    def _gcs_address(cls, value: str) -> str:
        if value == "auto":
            return value
        if value.startswith("ray://"):
            raise ValueError(
                f"cluster.address {value!r}: Ray Client is not supported; run fulmen train on "
                "a node of the cluster and give its GCS address HOST:PORT (or auto)"
            )
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"cluster.address must be auto or HOST:PORT, got {value!r}")
        return value

    def engine_options_set(self) -> list[str]:
        """Return the engine options given explicitly (for the training config's checks)."""
        return [name for name in _ENGINE_OPTIONS if name in self.model_fields_set]


#: The engine options: they have no effect where no engine is started.
_ENGINE_OPTIONS = ("engine_replicas", "engine_cpus", "engine_gpus")
