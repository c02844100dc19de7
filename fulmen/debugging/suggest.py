"""Which settings went with faster validation gain, across the finished runs of a store.

The method, simple on purpose so a reader can check every statement:

1. **Comparable runs**: finished (``succeeded``) runs whose configs name the same model and
   agent as the config asked about, with a validation before training (step 0) and after it.
2. **Outcome of a run**: its validation gain per training minute, ``(final - before) /
   minutes`` (``val/reward_mean`` of its first and last validation; minutes of GRPO/SFT steps;
   a run without step time uses its wall time between the two validations' records).
3. **Settings**: every config key (``key.path``) on which the comparable runs differ.
4. **A statement** about a key is made only when at least two of its values were each run at
   least ``min_runs`` times; it compares the best value's mean outcome with each other value's
   (Welch's standard error of the difference). A difference of at least two standard errors is
   reported as shown; a smaller one is listed as "not shown", never as a finding.
5. **The proposal**: the config asked about, with each *shown* best value set.

Every statement says how many runs it rests on. Runs differ in more than one key at once, so
a key's effect can be another key's: the report lists the keys that varied together.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fulmen.config_file import flatten
from fulmen.store.reading import read_run_metrics
from fulmen.store.roles import RunLog
from fulmen.types import RunStatus

__all__ = ["Outcome", "Statement", "outcomes", "suggest"]


@dataclass(frozen=True)
class Outcome:
    """One comparable run: its flattened config and its validation gain per training minute."""

    run_id: str
    config: Mapping[str, Any]
    gain_per_minute: float


@dataclass(frozen=True)
class Statement:
    """What the runs say about one setting.

    Attributes:
        key: the config key.
        best: its value with the highest mean outcome.
        means: each value's mean outcome and its number of runs, best first.
        shown: ``best`` beat every other value by at least two standard errors.
        weakest_margin: the smallest (difference / standard error) against another value.
    """

    key: str
    best: Any
    means: tuple[tuple[Any, float, int], ...]
    shown: bool
    weakest_margin: float

    def text(self) -> str:
        """Return the statement as a sentence, with the runs it rests on."""
        parts = ", ".join(f"{v!r}: {m:+.4f}/min over {n} runs" for v, m, n in self.means)
        verdict = "shown" if self.shown else "not shown"
        return (
            f"{self.key} = {self.best!r} went with the fastest validation gain ({parts}); "
            f"{verdict} (at least {self.weakest_margin:.1f} standard errors)"
        )


async def outcomes(store: RunLog, *, model: Any, agent: Any) -> list[Outcome]:
    """Return the comparable finished runs of ``store`` and their outcomes (module docstring)."""
    found: list[Outcome] = []
    offset: int | None = 0
    while offset is not None:
        page = await store.list_runs(limit=100, offset=offset)
        for run in page.items:
            if run.status is not RunStatus.SUCCEEDED:
                continue
            if run.config.get("model") != model or run.config.get("agent") != agent:
                continue
            outcome = await _outcome(store, run.run_id)
            if outcome is not None:
                found.append(Outcome(run.run_id, flatten(run.config), outcome))
        offset = page.next_cursor
    return found


async def _outcome(store: RunLog, run_id: str) -> float | None:
    validations: list[tuple[int, float]] = []
    minutes = 0.0
    for record in await read_run_metrics(store, run_id):
        value = record.values.get("val/reward_mean")
        if value is not None and math.isfinite(value):
            validations.append((record.step, value))
        minutes += record.values.get("time/step_s", 0.0) / 60
    if len(validations) < 2 or validations[0][0] != 0 or minutes <= 0:
        return None
    return (validations[-1][1] - validations[0][1]) / minutes


def suggest(
    runs: Sequence[Outcome], config: Mapping[str, Any], *, min_runs: int = 2
) -> tuple[list[Statement], dict[str, Any], list[str]]:
    """Return the statements, the proposed config (flattened) and the keys that varied.

    ``config`` is the (flattened) config asked about; the proposal sets each shown best value.
    """
    keys = sorted(
        {k for r in runs for k in r.config if len({repr(x.config.get(k)) for x in runs}) > 1}
        - {"run_dir", "seed", "store_url"}
    )
    statements: list[Statement] = []
    for key in keys:
        groups: dict[str, list[float]] = defaultdict(list)
        values: dict[str, Any] = {}
        for run in runs:
            value = run.config.get(key)
            groups[repr(value)].append(run.gain_per_minute)
            values[repr(value)] = value
        backed = {k: v for k, v in groups.items() if len(v) >= min_runs}
        if len(backed) < 2:
            continue
        ranked = sorted(backed, key=lambda k: statistics.fmean(backed[k]), reverse=True)
        best = ranked[0]
        margins = [_margin(backed[best], backed[other]) for other in ranked[1:]]
        statements.append(
            Statement(
                key=key,
                best=values[best],
                means=tuple(
                    (values[k], statistics.fmean(backed[k]), len(backed[k])) for k in ranked
                ),
                shown=min(margins) >= 2.0,
                weakest_margin=min(margins),
            )
        )
    proposal = dict(config)
    for statement in statements:
        if statement.shown:
            proposal[statement.key] = statement.best
    return statements, proposal, keys


def _margin(better: Sequence[float], other: Sequence[float]) -> float:
    """(mean difference) / (Welch's standard error); inf when neither group varies."""
    difference = statistics.fmean(better) - statistics.fmean(other)
    variance = statistics.variance(better) / len(better) + statistics.variance(other) / len(other)
    if variance <= 0:
        return math.inf if difference > 0 else 0.0
    return difference / math.sqrt(variance)
