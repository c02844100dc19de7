"""``SearchState``: a demonstrations search as saved in the stage directory, to resume it.

The pool of demonstrations, the tasks that score candidates and every scored candidate are
written atomically after each candidate, so a killed search resumes with the same pool and
does not score a finished candidate again. The store holds the same facts for inspection
(each candidate is a prompt version with lineage, each score a ``PromptScore``); this file is
the search's own bookkeeping.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fulmen.types import PromptTemplate
from fulmen.types.limits import FiniteFloat
from fulmen.types.prompt import Demonstration

__all__ = ["ScoredCandidate", "SearchState"]

_FILE = "demos-search.json"


class ScoredCandidate(BaseModel):
    """One evaluated candidate.

    Attributes:
        index: its position in the search (0 is the unchanged prompt).
        picks: the pool indices of its demonstrations, in prompt order (empty for candidate 0).
        version: the resources version it was published as.
        score: its mean reward over the search tasks.
        instances: its reward per search task id.
        is_recorded: its ``PromptScore`` is in the store already.
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    picks: tuple[int, ...]
    version: int
    score: FiniteFloat
    instances: dict[str, FiniteFloat]
    is_recorded: bool = False


class SearchState(BaseModel):
    """What a search has done so far (see the module docstring).

    Attributes:
        run_id: names this search in the lineage and scores it stores.
        prompt_name: the resource name of the prompt being searched.
        parent_version: the resources version holding the prompt the search started from.
        parent: that prompt.
        search_tasks: indices (into the training tasks) of the tasks that score candidates.
        pool: the collected demonstrations.
        collect_rollouts: training rollouts run to fill the pool.
        candidates: the candidates scored so far, in search order.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    prompt_name: str
    parent_version: int
    parent: PromptTemplate
    search_tasks: list[int]
    pool: list[Demonstration]
    collect_rollouts: int = 0
    candidates: list[ScoredCandidate] = Field(default_factory=list)

    @staticmethod
    def path_in(directory: Path) -> Path:
        """Where the state of a search run in ``directory`` is kept."""
        return directory / _FILE

    @classmethod
    def load(cls, directory: Path) -> SearchState | None:
        """Read the saved state in ``directory``; ``None`` when there is none."""
        path = cls.path_in(directory)
        if not path.exists():
            return None
        return cls.model_validate_json(path.read_text(encoding="utf-8"))

    def save(self, directory: Path) -> None:
        """Write the state atomically (temporary file + rename)."""
        path = self.path_in(directory)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        os.replace(tmp, path)

    def best(self) -> ScoredCandidate:
        """Return the best-scoring candidate; the earliest one on a tie (0 when it ties)."""
        if not self.candidates:
            raise ValueError(f"search {self.run_id} has no scored candidate yet")
        return max(self.candidates, key=lambda c: (c.score, -c.index))
