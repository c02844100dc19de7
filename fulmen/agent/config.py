"""``RunnerConfig``: every option of a runner, documented once; the CLI flags derive from it."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
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
        gateway_api_key: the gateway's token (if it requires one). The runner keeps it; each
            attempt's agent gets a key minted from it that is valid for that attempt only.
        modes: claim only rollouts of these modes (default: all).
        poll_interval: seconds between claims while the queue is empty.
        heartbeat_interval: seconds between heartbeats; keep it well below the rollouts'
            ``heartbeat_timeout_s``.
        sync_isolation: where sync agents run: ``process`` (killable on timeout; the agent
            must be importable as ``module:object``) or ``thread`` (cannot be killed: a timed-out
            thread is abandoned while the store marks the attempt timed out).
        async_isolation: where async agents run: ``thread`` (default: each attempt in a thread
            with its own event loop, so an agent that blocks or ignores cancellation cannot
            freeze the runner and is abandoned at its timeout) or ``loop`` (the runner's own
            event loop: no thread per attempt, but a blocking agent stalls every rollout;
            for agents that share loop-bound objects created in ``setup``).
        shutdown_grace_s: on stop (SIGTERM), how long running rollouts may take to finish
            before they are stopped and released back to the queue.
        span_batch_size / span_interval: spans per store write, and the longest wait before a
            partial batch is written.
        store_retry_max_delay: the longest pause between retries while the store is down or
            answers 5xx (exponential backoff with full jitter up to this cap).
        store_retry_s: how long the runner keeps retrying the store (claims, resources, span
            writes) through network errors and 5xx before it gives up and exits; ``None``
            (default) retries for as long as it runs, logging once a minute. A 4xx that is the
            runner's own fault (unauthorized, invalid request) still fails at once.
        report_deadline_s: how long to keep retrying an attempt's final report.
        span_buffer_max: spans held in memory while the store is away; beyond this they are
            appended to a spill file and replayed, in order, when the store is back.
        spill_dir: where that spill file goes (``None``: a new directory under the system's
            temporary directory; the CLI passes ``$FULMEN_SPILL_DIR``).
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
    async_isolation: Literal["thread", "loop"] = "thread"
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    span_batch_size: int = Field(default=256, ge=1)
    span_interval: float = Field(default=0.2, gt=0)
    store_retry_max_delay: float = Field(default=30.0, gt=0)
    store_retry_s: float | None = Field(default=None, gt=0)
    report_deadline_s: float = Field(default=300.0, gt=0)
    span_buffer_max: int = Field(default=10_000, ge=1)
    spill_dir: Path | None = None
    frameworks: list[str] | None = None
