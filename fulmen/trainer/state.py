"""``RunState``: what a run directory says about progress, so a killed run resumes exactly.

``state.json`` holds the run's id, the stage being run (its index in the config's plan), the
steps of that stage already completed and checkpointed, the steps of the earlier stages (so the
metrics stream numbers steps across stages), what the engine serves as training left it
(``ServedFiles``: the full weights, the adapter, each role's adapter; only the trainer's
``PolicyServer`` changes it), the resources other than ``llm`` the latest publish carried
(prompt templates), how often the run was started, and what the run is (its agent, model and
data, its settings and their version: ``fulmen.trainer.identity``). It is written atomically
(temporary file + rename) after each checkpoint, so a crash leaves either the previous state or
the new one. A ``state.json`` written before stages existed reads as stage 0; one written before
runs had ids gets a new id.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from fulmen.types import Resource

__all__ = ["RunState", "ServedFiles"]

_STATE_FILE = "state.json"
_RESOURCES: TypeAdapter[dict[str, Resource]] = TypeAdapter(dict[str, Resource])


@dataclass(frozen=True)
class ServedFiles:
    """What the engine serves as training left it, relative to the run directory.

    A value: the ``PolicyServer`` replaces it whole when it serves something new, and the
    state saves it with the step it belongs to.

    Attributes:
        weights: the full-weight model directory served as the base (a full fine-tune's);
            ``None``: the original base weights.
        adapter: the policy adapter served on top; ``None``: none.
        role_adapters: with one adapter per role, each role's adapter.
    """

    weights: str | None = None
    adapter: str | None = None
    role_adapters: dict[str, str] = field(default_factory=dict[str, str])


class RunState:
    """The progress record of one run directory (see the module docstring).

    Attributes:
        run_id: made once when the run directory is first used and kept across restarts;
            rollout ids start with it, so runs sharing one store never reuse each other's.
        stage: index of the stage being run (``len(plan)`` once every stage is done).
        step: steps of ``stage`` completed and checkpointed.
        step_offset: steps of the stages before ``stage`` (metrics number steps after them).
        generation: how many times the run was started (rollout ids carry it).
        checkpoint: the stage's last checkpoint, relative to the run directory.
        validated_step: the step of the stage at which its closing validation finished
            (``None``: not yet); a run killed during that validation runs it on restart.
        served: what the engine serves as training left it (``ServedFiles``).
        resources: the carried resources other than ``llm`` (prompt templates).
        identity: the run's agent, model and data (``RunIdentity`` as JSON); ``None``: not
            recorded yet (a new run, or one started before runs recorded it).
        settings: the config the run last started with, as JSON (``run_settings``).
        config_version: how many different settings the run has started with (1: the first).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / _STATE_FILE
        data: dict[str, Any] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
        self.run_id: str = str(data.get("run_id") or secrets.token_hex(4))
        self.stage: int = int(data.get("stage", 0))
        self.step: int = int(data.get("step", 0))
        self.step_offset: int = int(data.get("step_offset", 0))
        self.generation: int = int(data.get("generation", 0))
        self.checkpoint: str | None = data.get("checkpoint")
        validated = data.get("validated_step")
        self.validated_step: int | None = None if validated is None else int(validated)
        self.served = ServedFiles(
            weights=data.get("weights"),
            adapter=data.get("adapter"),
            role_adapters={
                str(k): str(v) for k, v in dict(data.get("role_adapters") or {}).items()
            },
        )
        self.resources: dict[str, Resource] = _RESOURCES.validate_python(data.get("resources", {}))
        self.identity: dict[str, Any] | None = data.get("identity")
        self.settings: dict[str, Any] | None = data.get("settings")
        self.config_version: int = int(data.get("config_version", 1))

    @property
    def exists(self) -> bool:
        """Whether the run directory holds a run (its ``state.json`` was written)."""
        return self.path.exists()

    def run_step(self, step: int) -> int:
        """Return ``step`` of the current stage numbered in the run's metrics stream."""
        return self.step_offset + step

    def save(self) -> None:
        """Write the state atomically."""
        tmp = self.path.with_suffix(".tmp")
        payload = {
            "run_id": self.run_id,
            "stage": self.stage,
            "step": self.step,
            "step_offset": self.step_offset,
            "generation": self.generation,
            "checkpoint": self.checkpoint,
            "validated_step": self.validated_step,
            "adapter": self.served.adapter,
            "role_adapters": self.served.role_adapters,
            "weights": self.served.weights,
            "resources": _RESOURCES.dump_python(self.resources, mode="json"),
            "identity": self.identity,
            "settings": self.settings,
            "config_version": self.config_version,
        }
        tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)

    def finish_stage(self) -> None:
        """Move on to the next stage and save.

        Its steps count after this one's; the weights, the adapter and the resources carry
        over; the checkpoint belongs to the finished stage and is dropped.
        """
        self.stage += 1
        self.step_offset += self.step
        self.step = 0
        self.checkpoint = None
        self.validated_step = None
        self.save()
