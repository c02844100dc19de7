"""``RolloutSettings``: how the runners run each rollout, as a training config's ``rollouts:``.

The runner's settings, kept with the runner; ``TrainConfig`` composes them, and the trainer's
stack, the cluster's runners, ``fulmen deploy``'s runner service and ``fulmen replay`` /
``fulmen ab`` read them: a training run's runners are configured by ``runner_options`` (in
this process) or ``runner_flags`` (a ``fulmen runner`` process), alike wherever they run.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = ["TRAINING_HEARTBEAT_S", "TRAINING_POLL_S", "RolloutSettings"]

#: How often a training run's runners send heartbeats and, with the queue empty, look for work:
#: a step waits on its slowest rollout, so a lost runner is found, and a new rollout claimed,
#: within seconds (a production runner keeps ``RunnerConfig``'s slower defaults).
TRAINING_HEARTBEAT_S = 2.0
TRAINING_POLL_S = 0.1


class RolloutSettings(BaseModel):
    """How each rollout is run by the runners.

    Attributes:
        concurrency: rollouts running at once in the trainer's runner.
        timeout_s: wall-clock limit of one attempt.
        max_attempts: attempts per rollout (timeouts and lost workers are retried).
        heartbeat_timeout_s: an attempt whose runner sent no heartbeat for this long is found
            lost (its machine died or was cut off) and retried; the trainer's runners beat
            every 2 s (``TRAINING_HEARTBEAT_S``), so keep it several times that.
        sync_isolation: where sync agents run (``process`` can be killed on timeout).
        train_sampling / val_sampling: request fields the gateway applies to every model call
            of train / validation rollouts (``temperature``, ``max_tokens``: it also caps an
            agent's ``max_completion_tokens``, ...). Train
            rollouts sample the behaviour policy, so ``train_sampling`` always carries
            ``temperature`` (> 0, the same as ``algorithm.grpo.temperature``; each is derived
            from the other) and ``top_p: 1.0``; fields that truncate or reshape the
            distribution (``top_p`` < 1, ``top_k``, ``min_p``, penalties, ``logit_bias``) are
            refused there, because the trainer's logprobs could not match them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=8, ge=1)
    timeout_s: float = Field(default=300.0, gt=0)
    max_attempts: int = Field(default=2, ge=1)
    heartbeat_timeout_s: float = Field(default=30.0, ge=6.0, le=86_400)
    sync_isolation: Literal["process", "thread"] = "thread"
    train_sampling: dict[str, JsonValue] = Field(default_factory=lambda: {"temperature": 1.0})
    val_sampling: dict[str, JsonValue] = Field(default_factory=lambda: {"temperature": 0.0})

    def runner_options(self) -> dict[str, Any]:
        """Return a training run's ``RunnerConfig`` fields from these settings."""
        return {
            "concurrency": self.concurrency,
            "sync_isolation": self.sync_isolation,
            "heartbeat_interval": TRAINING_HEARTBEAT_S,
            "poll_interval": TRAINING_POLL_S,
        }

    def runner_flags(self) -> list[str]:
        """Return the same settings as ``fulmen runner`` flags (a runner in its own process)."""
        return [
            "--concurrency", str(self.concurrency),
            "--sync-isolation", self.sync_isolation,
            "--heartbeat-interval", str(TRAINING_HEARTBEAT_S),
            "--poll-interval", str(TRAINING_POLL_S),
        ]  # fmt: skip
