"""A run's update health for the dashboard's run page: steps without an update, what it serves.

The steps that made no update come each with why, and the model version the run serves with
why that one.

The reasons come from the code that prints them while training (the algorithm's own,
``fulmen.algorithms.registry.no_update_reason``, as ``fulmen runs diagnose`` counts them), read
from the step's stored metrics: the algorithm a record names (a run with stages), else the
run's. The served version is what the end of the run decided (its ``end/*`` metrics,
``fulmen.trainer.best``): the version at ``end/served_step``, kept earlier by
``validation.keep_best`` or the final one. A run still training serves its
newest version (the engine loads each step's policy as it is taken); a run that ended without
an end-of-run decision (no closing validation) serves its last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fulmen.algorithms.registry import no_update_reason, recorded_algorithm
from fulmen.store.reading import read_run_metrics
from fulmen.types import ModelVersion, Run, RunMetrics, RunStatus

if TYPE_CHECKING:
    from fulmen.store.roles import RunLog

__all__ = ["run_health"]

#: The store URL the reasons name in the commands they suggest (the page shows the store).
_STORE = "STORE_URL"


async def run_health(store: RunLog, run_id: str) -> dict[str, Any]:
    """Return run ``run_id``'s training steps, those without an update and its served version.

    ``steps``: training steps that say whether they updated (the last record of each step: a
    resumed run may log a step twice); ``updated``: how many did; ``no_update``: ``[{step,
    reason}]`` in step order; ``served``: see ``_served`` (``None``: the run serves nothing
    yet). A run the store does not hold raises ``NotFound``.
    """
    run = await store.get_run(run_id)
    records = await read_run_metrics(store, run_id)
    by_step: dict[int, RunMetrics] = {}
    for record in records:
        if record.values.get("updated") is not None:
            by_step[record.step] = record
    algorithm = recorded_algorithm(run.config)
    idle = [
        {
            "step": step,
            "reason": no_update_reason(
                record.text.get("algorithm", algorithm), record.values, store_url=_STORE
            ),
        }
        for step, record in sorted(by_step.items())
        if record.values["updated"] == 0.0
    ]
    versions = await store.list_model_versions(run_id)
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "steps": len(by_step),
        "updated": len(by_step) - len(idle),
        "no_update": idle,
        "served": _served(run, records, versions),
    }


def _served(
    run: Run, records: Sequence[RunMetrics], versions: Sequence[ModelVersion]
) -> dict[str, Any] | None:
    """Return the version the run serves: ``{step, versions, reward_mean, why, ...}`` or ``None``.

    ``versions``: the run's model versions saved at that step (one per trained role; none for
    the model before training); ``reward_mean``: its validation score as the end of the run
    ranked it (``None`` without one); ``decided``: whether the end of the run chose it.
    """
    end = next((r.values for r in reversed(records) if "end/served_step" in r.values), None)
    if run.status is not RunStatus.RUNNING and end is not None:
        step = int(end["end/served_step"])
        return {
            "step": step,
            "versions": _at(versions, step),
            "reward_mean": end.get("end/served_reward_mean"),
            "final_reward_mean": end.get("end/final_reward_mean"),
            "best_step": int(end["end/best_step"]) if "end/best_step" in end else None,
            "kept_earlier": end.get("end/kept_earlier") == 1.0,
            "decided": True,
            "why": _why(end),
        }
    if not versions:
        return None
    step = max(v.step for v in versions)
    why = (
        "training: the engine serves the newest step's policy"
        if run.status is RunStatus.RUNNING
        else "the last version the run served (no end-of-run decision was recorded: the run "
        "ended without its closing validation)"
    )
    return {
        "step": step,
        "versions": _at(versions, step),
        "reward_mean": None,
        "final_reward_mean": None,
        "best_step": None,
        "kept_earlier": False,
        "decided": False,
        "why": why,
    }


def _at(versions: Sequence[ModelVersion], step: int) -> list[dict[str, Any]]:
    return [v.model_dump(mode="json") for v in versions if v.step == step]


def _name(step: float) -> str:
    return "the model before training" if step == 0 else f"step {step:.0f}"


def _why(end: Mapping[str, float]) -> str:
    """Say why the end of the run serves ``end/served_step``, as ``EndOfRun.notes`` does."""
    final = end.get("end/final_reward_mean")
    if "end/best_step" not in end or final is None:
        return "the final version: no earlier validation scored higher"
    best = end["end/best_step"]
    scores = f"{end.get('end/best_reward_mean', float('nan')):.3f} against the final {final:.3f}"
    if end.get("end/kept_earlier") == 1.0:
        return f"{_name(best)} validated best ({scores}): validation.keep_best serves it"
    if end.get("end/best_files_missing") == 1.0:
        return (
            f"{_name(best)} validated best ({scores}), but its files are gone: the final "
            "version is served"
        )
    return (
        f"{_name(best)} validated best ({scores}); validation.keep_best is off: the final "
        "version is served"
    )
