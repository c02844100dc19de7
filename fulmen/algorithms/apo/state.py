"""``APOState``: an optimization as saved in the stage directory, to resume it after a kill.

Written atomically after every step that cost model calls or rollouts (a critique and its
edits, a candidate's validation), so a killed run repeats no finished round and, within the
interrupted round, no beam prompt already critiqued and no candidate already scored. The store
holds the same facts for inspection (every candidate is a prompt version with lineage, every
score a ``PromptScore``); this file is the optimizer's own bookkeeping.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types import PromptScore, PromptTemplate
from fulmen.types.limits import FiniteFloat

__all__ = ["APOState", "Candidate", "RoundProgress"]

_FILE = "apo-state.json"


class Candidate(BaseModel):
    """A prompt version the optimizer published, and its validation score once measured.

    Attributes:
        version: the resources version holding it.
        prompt: the prompt itself.
        round: the round that made it (0 for the starting prompt).
        score: its mean validation reward, ``None`` until measured.
        instances: its reward per validation task id.
        is_recorded: its ``PromptScore`` is stored in the store already.
    """

    model_config = ConfigDict(extra="forbid")

    version: int
    prompt: PromptTemplate
    round: int
    score: FiniteFloat | None = None
    instances: dict[str, FiniteFloat] = Field(default_factory=dict)
    is_recorded: bool = False


class RoundProgress(BaseModel):
    """The unfinished round: which beam prompts were critiqued, which candidates were made."""

    model_config = ConfigDict(extra="forbid")

    round: int
    expanded: list[int] = Field(default_factory=list)
    candidates: list[Candidate] = Field(default_factory=list)


class APOState(BaseModel):
    """What an optimization has done so far (see the module docstring).

    Attributes:
        run_id: names this optimization in the lineage and scores it stores.
        prompt_name: the resource name of the prompt being optimized.
        rounds_done: rounds finished (their selection made and stored).
        beam: the prompts kept by the last selection.
        pending: the round under way, if any.
        rollouts: rollouts run so far (training and validation).
        elapsed_s: wall time spent in earlier processes of this optimization.
        invalid_edits: edits refused (unchanged, duplicate, or not a valid template).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    prompt_name: str
    rounds_done: int = 0
    beam: list[Candidate]
    pending: RoundProgress | None = None
    rollouts: int = 0
    elapsed_s: float = 0.0
    invalid_edits: int = 0

    @classmethod
    def load(cls, directory: Path) -> APOState | None:
        """Read the saved state in ``directory``; ``None`` when there is none."""
        path = directory / _FILE
        if not path.exists():
            return None
        return cls.model_validate_json(path.read_text(encoding="utf-8"))

    def save(self, directory: Path) -> None:
        """Write the state atomically (temporary file + rename)."""
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / (_FILE + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, directory / _FILE)

    def unrecorded_scores(self) -> list[PromptScore]:
        """Return the scores not stored yet, and mark them stored."""
        pool = [*self.beam, *(self.pending.candidates if self.pending else [])]
        out: list[PromptScore] = []
        for candidate in pool:
            if candidate.score is None or candidate.is_recorded:
                continue
            candidate.is_recorded = True
            out.append(
                PromptScore(
                    version=candidate.version,
                    name=self.prompt_name,
                    score=candidate.score,
                    instances=candidate.instances,
                    run_id=self.run_id,
                )
            )
        return out
