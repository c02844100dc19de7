"""The VERL translation report: what happens to each key of a 0.x VERL config.

``KeyReport`` is one key's fate (``honoured``, ``translated`` or ``refused``, and whether the
refusal blocks); ``VerlTranslation`` the whole report with the fulmen options it yields;
``Walk`` collects both while ``fulmen.compat.agentlightning.verl_config``'s rules look at the
flattened config.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

__all__ = ["ACTOR", "MODEL", "ROLLOUT", "KeyReport", "Status", "VerlTranslation", "Walk"]

Status = Literal["honoured", "translated", "refused"]

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"


class KeyReport(BaseModel):
    """What happens to one VERL key.

    Attributes:
        key: the dotted VERL key (``actor_rollout_ref.actor.optim.lr``).
        value: its value in the config.
        status: ``honoured``, ``translated`` or ``refused``.
        fulmen: the fulmen option it sets or matches, if any.
        note: the rule, or why it is refused and what to do instead.
        blocking: a refusal that changes what is learned (``agl.VERL`` raises).
    """

    key: str
    value: JsonValue
    status: Status
    fulmen: str | None = None
    note: str = ""
    blocking: bool = False


class VerlTranslation(BaseModel):
    """Return the report of a whole config and the fulmen options it yields.

    Attributes:
        entries: one report per leaf key, in the config's order.
        overrides: fulmen config path → value (``algorithm.grpo.learning_rate``).
        total_epochs: ``trainer.total_epochs``, turned into ``algorithm.steps`` once the
            number of training tasks is known (``steps_for``).
        notes: differences that belong to no single key (how calls are sampled).
    """

    entries: list[KeyReport] = Field(default_factory=list)
    overrides: dict[str, Any] = Field(default_factory=dict)
    total_epochs: int | None = None
    notes: list[str] = Field(default_factory=list)

    def blocking(self) -> list[KeyReport]:
        """Return the refusals that change what is learned."""
        return [e for e in self.entries if e.blocking]

    def counts(self) -> dict[str, int]:
        """How many keys are honoured, translated and refused."""
        out = {"honoured": 0, "translated": 0, "refused": 0}
        for entry in self.entries:
            out[entry.status] += 1
        return out

    def steps_for(self, train_tasks: int) -> int | None:
        """``algorithm.steps`` for ``total_epochs`` passes over ``train_tasks`` tasks."""
        if self.total_epochs is None:
            return None
        per_step = int(self.overrides.get("algorithm.tasks_per_step", 4))
        return self.total_epochs * max(1, math.ceil(train_tasks / per_step))

    def render(self) -> str:
        """Return the report as a fixed-width table, one line per key, then the counts."""
        width = max((len(e.key) for e in self.entries), default=10)
        lines = [f"{'VERL key':<{width}}  {'status':<10}  fulmen / note"]
        for e in self.entries:
            status = "REFUSED!" if e.blocking else e.status
            target = f"{e.fulmen}: " if e.fulmen else ""
            lines.append(f"{e.key:<{width}}  {status:<10}  {target}{e.note}")
        counts = self.counts()
        lines.append(
            f"{counts['honoured']} honoured, {counts['translated']} translated, "
            f"{counts['refused']} refused ({len(self.blocking())} blocking)"
        )
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


class Walk:
    """Collects entries and overrides while the rules look at the flattened config."""

    def __init__(self, flat: dict[str, Any]) -> None:
        self.flat = flat
        self.result = VerlTranslation()

    def add(
        self,
        key: str,
        status: Status,
        note: str,
        fulmen: str | None = None,
        *,
        value: Any = None,
        blocking: bool = False,
    ) -> None:
        """Report ``key``; a translated key with a value also sets ``fulmen`` to it."""
        if fulmen is not None and status == "translated" and value is not None:
            self.result.overrides[fulmen] = value
        self.result.entries.append(
            KeyReport(
                key=key,
                value=_json(self.flat[key]),
                status=status,
                fulmen=fulmen,
                note=note,
                blocking=blocking,
            )
        )

    def get(self, key: str, default: Any = None) -> Any:
        """Return another key's value (rules that read two keys)."""
        return self.flat.get(key, default)


def _json(value: Any) -> JsonValue:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return str(value)
