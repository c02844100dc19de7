"""Background jobs of the dashboard: long debugging runs a page starts and then polls.

A replay, a re-scoring or an A/B test takes seconds to minutes, longer than a request should
wait. ``Jobs.start(kind, work)`` runs ``work`` as an asyncio task and answers at once with a
``Job`` (its id, ``running``); ``GET /api/jobs/{id}`` shows it until it is ``done`` (with a
JSON result) or ``failed`` (with the error). At most one job of a kind runs at a time, so a page
clicked twice cannot pile up agent runs; the newest ``KEPT_JOBS`` finished jobs stay readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fulmen.errors import Conflict, FulmenError, NotFound

__all__ = ["KEPT_JOBS", "Job", "JobState", "Jobs"]

logger = logging.getLogger(__name__)

KEPT_JOBS = 32
JobState = Literal["running", "done", "failed"]


@dataclass
class Job:
    """One background job: what it runs, its state, and its result or error once finished."""

    job_id: str
    kind: str
    subject: str
    state: JobState = "running"
    result: Any = None
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    def view(self) -> dict[str, Any]:
        """Return the job as JSON-ready data (what ``GET /api/jobs/{id}`` answers)."""
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "subject": self.subject,
            "state": self.state,
            "result": self.result,
            "error": self.error,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


class Jobs:
    """The dashboard's background jobs, one running at a time per kind."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, kind: str, subject: str, work: Callable[[], Awaitable[Any]]) -> Job:
        """Run ``work()`` in the background as a job of ``kind``; its result must be JSON-ready.

        Raises ``Conflict`` when a job of ``kind`` is still running.
        """
        running = next(
            (j for j in self._jobs.values() if j.kind == kind and j.state == "running"), None
        )
        if running is not None:
            raise Conflict(
                f"a {kind} job ({running.subject}) is still running: wait for job {running.job_id}",
                detail={"job_id": running.job_id},
            )
        job = Job(job_id=uuid.uuid4().hex[:16], kind=kind, subject=subject)
        self._jobs[job.job_id] = job
        self._tasks[job.job_id] = asyncio.create_task(
            self._run(job, work), name=f"dashboard-{kind}"
        )
        self._forget_old()
        return job

    def get(self, job_id: str) -> Job:
        """Return the job ``job_id``; ``NotFound`` names it when it is unknown or forgotten."""
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r} (the dashboard keeps the last {KEPT_JOBS})")
        return job

    async def aclose(self) -> None:
        """Cancel the running jobs and wait for them to stop."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, job: Job, work: Callable[[], Awaitable[Any]]) -> None:
        try:
            job.result = await work()
            job.state = "done"
        except asyncio.CancelledError:
            job.state, job.error = "failed", "cancelled: the dashboard stopped"
            raise
        except FulmenError as exc:
            job.state, job.error = "failed", exc.message
        except Exception as exc:  # the user's agent or reward function: report, keep serving
            logger.warning("dashboard %s job %s failed", job.kind, job.job_id, exc_info=exc)
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.ended_at = time.time()
            self._tasks.pop(job.job_id, None)

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.state != "running"]
        for job in finished[: max(0, len(self._jobs) - KEPT_JOBS)]:
            del self._jobs[job.job_id]
