"""The ``release:`` section of the gateway's config: a canary release and its promotion gate.

``capture:`` turns production calls into sessions; ``release:`` sends each session to the
incumbent or the candidate model (``fulmen.gateway.release``), and ``release.gate`` lets the
gateway promote or roll back the candidate from the sessions' rewards (``fulmen.release``).
See ``docs/releases.md``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fulmen.types.releases import ReleaseCreate

__all__ = ["GateConfig", "ReleaseConfig"]


class GateConfig(BaseModel):
    """When the gateway promotes or rolls back the candidate on its own.

    Every ``window_s`` the gate compares the arms' rewards over the release's sessions so far
    (Welch's t-test, two-sided) and records the window as an event of the release. It promotes
    after ``windows`` consecutive windows in which the candidate was better at level
    ``alpha`` and its mean at least ``min_ratio`` times the incumbent's; it rolls back after
    ``rollback_windows`` consecutive windows in which the candidate was worse at ``alpha``.

    Attributes:
        window_s: seconds between evaluations.
        windows: consecutive better windows needed to promote.
        rollback_windows: consecutive worse windows needed to roll back.
        min_ratio: the candidate's mean reward over the incumbent's must reach this to promote
            (not consulted when the incumbent's mean is not positive: the ratio is undefined
            there and the difference decides alone).
        alpha: the test's significance level.
        min_sessions: sessions with a reward each arm needs before a window can decide.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    windows: int = Field(default=3, ge=1, le=1000)
    rollback_windows: int = Field(default=1, ge=1, le=1000)
    min_ratio: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_sessions: int = Field(default=30, ge=2)


class ReleaseConfig(ReleaseCreate):
    """A canary release served by the gateway to its production sessions.

    Its definition (``ReleaseCreate``: what the store keeps) and how the gateway serves it.

    Attributes:
        name: the release's name in the store (``fulmen release status NAME``).
        incumbent / candidate: what each arm serves: a model name the upstreams answer to
            (``incumbent: gemma-3-270m``), or a model version of the store
            (``candidate: {run_id: RUN, version: 3}``, served under ``RUN-v3`` unless
            ``model`` names it otherwise); the two reach different models.
        share: the fraction of sessions sent to the candidate.
        seed: the seed of the hash that assigns sessions to arms.
        serve_versions: make every token-level upstream serve the arms that are adapter
            versions of the store (``POST /v1/load_lora_adapter``) when the gateway starts.
        poll_s: how often the gateway re-reads the release from the store, so a promotion or
            rollback made elsewhere (``fulmen release promote``, another gateway's gate)
            reaches its traffic.
        gate: promote or roll back automatically (``GateConfig``); ``None``: only by hand.
    """

    serve_versions: bool = True
    poll_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    gate: GateConfig | None = None

    @field_validator("incumbent", "candidate", mode="before")
    @classmethod
    def _arm(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"model": value}
        if isinstance(value, dict) and "model" not in value and "run_id" in value:
            return {**value, "model": f"{value['run_id']}-v{value.get('version')}"}
        return value
