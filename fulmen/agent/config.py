"""``RunnerConfig``: every option of a runner, documented once; the CLI flags derive from it."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types import Mode

__all__ = ["RunnerConfig", "default_worker_id"]


def default_worker_id() -> str:
    """``host-pid-random``: unique per runner, readable in the store's worker list."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class RunnerConfig(BaseModel):
    """How a runner claims and runs rollouts.

    Attributes:
        worker_id: the id the store knows this runner by (default: host-pid-random).
        concurrency: how many rollouts run at once.
        gateway_url: the gateway's base URL; the ``llm`` resource then points at
            ``{gateway_url}/rollout/{r}/attempt/{a}/v1`` (without it, at the upstream itself,
            and calls are not recorded).
        gateway_api_key: the key agents send to the gateway (if it requires one).
        modes: claim only rollouts of these modes (default: all).
        poll_interval: seconds between claims while the queue is empty.
        heartbeat_interval: seconds between heartbeats; keep it well below the rollouts'
            ``heartbeat_timeout_s``.
        sync_isolation: where sync agents run: ``process`` (killable on timeout; the agent
            must be importable as ``module:object``) or ``thread`` (cannot be killed: a timed-out
            thread is abandoned while the store marks the attempt timed out).
        shutdown_grace_s: on stop (SIGTERM), how long running rollouts may take to finish
            before they are stopped and released back to the queue.
        span_batch_size / span_interval: spans per store write, and the longest wait before a
            partial batch is written.
        store_retry_max_delay: the longest pause between retries while the store is down.
        report_deadline_s: how long to keep retrying an attempt's final report.
        frameworks: OpenInference instrumentations to activate on the runner's provider
            (``fulmen.tracing.instrumentation.FRAMEWORKS``); ``None`` activates those whose
            framework the agent module imported, ``[]`` none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    worker_id: str = Field(default_factory=default_worker_id, min_length=1)
    concurrency: int = Field(default=4, ge=1, le=10_000)
    gateway_url: str | None = None
    gateway_api_key: str | None = None
    modes: list[Mode] | None = None
    poll_interval: float = Field(default=0.5, gt=0)
    heartbeat_interval: float = Field(default=5.0, gt=0)
    sync_isolation: Literal["process", "thread"] = "process"
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    span_batch_size: int = Field(default=256, ge=1)
    span_interval: float = Field(default=0.2, gt=0)
    store_retry_max_delay: float = Field(default=2.0, gt=0)
    report_deadline_s: float = Field(default=300.0, gt=0)
    frameworks: list[str] | None = None
