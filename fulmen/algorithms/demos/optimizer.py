"""``run_demos``: bootstrap few-shot demonstrations from successful runs and keep the best set.

1. **Parent.** The prompt the run carries under ``config.prompt`` (or, when it carries none,
   ``config.initial``) is published; its version is the parent of every candidate.
2. **Search tasks.** ``val_tasks`` training tasks, drawn with the seed, score the candidates;
   they never serve as demonstrations.
3. **Pool.** Successful rollouts of the source tasks that the store already holds (earlier
   runs and stages, either mode) are turned into demonstrations; when there are fewer than
   ``pool``, source tasks are run through the normal runner path with the parent prompt,
   ``collect_batch`` at a time, up to ``collect_rollouts``. A demonstration is the task's input
   fields and the model's own recorded turns, through ``tidy`` when set
   (``fulmen.algorithms.demos.extraction``).
4. **Search.** Candidate 0 is the parent unchanged; the others show ``demos`` demonstrations
   drawn at random from the pool, in random order (``search.draw_candidates``). Each candidate
   is published as a prompt version with lineage (optimizer ``demos``, parent, step = its
   index) and scored by validation rollouts on the search tasks; its ``PromptScore`` is stored.
5. **Winner.** The best-scoring candidate (the earliest on a tie, so the parent wins ties) is
   published as the new prompt version, its lineage naming the parent and its score; a last
   snapshot stores that score for the new version.

Progress is saved after each candidate (``SearchState``), so a killed search resumes with the
same pool and scores only the candidates it had not finished.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.demos.config import DemosConfig
from fulmen.algorithms.demos.extraction import demonstration_from, unique_by_task
from fulmen.algorithms.demos.search import draw_candidates, split_tasks
from fulmen.algorithms.demos.state import ScoredCandidate, SearchState
from fulmen.errors import ConfigError
from fulmen.types import PROMPT_SCORES_KEY, Mode, PromptScore, PromptTemplate, Rollout
from fulmen.types.limits import JsonData
from fulmen.types.prompt import Demonstration, PromptLineage

__all__ = ["run_demos"]

logger = logging.getLogger("fulmen.train")

_READ_CHUNK = 64  # stored rollouts read at a time while the pool is not full


async def run_demos(config: DemosConfig, context: AlgorithmContext) -> list[dict[str, float]]:
    """Run the demonstrations search (see the module docstring); returns per-candidate metrics."""
    state = SearchState.load(context.run.run_dir)
    if state is None:
        state = await _start(config, context)
    plan: list[tuple[int, ...]] = [()]
    if state.pool:
        plan += draw_candidates(len(state.pool), **_draw_args(config, context))
    else:
        logger.warning(
            "demos: no training rollout reached reward %s in %d tries; the prompt stays as it is",
            _threshold(config, context),
            state.collect_rollouts,
        )
    history: list[dict[str, float]] = []
    search = [(i, context.tasks.train[i]) for i in state.search_tasks]
    for index in range(len(state.candidates), len(plan)):
        started = time.perf_counter()
        picks = plan[index]
        version = state.parent_version
        if index > 0:
            version = await context.rollouts.publish(
                {config.prompt: _candidate(state, picks, step=index)},
                metadata={"demos_candidate": index, **_unrecorded_scores(state)},
            )
        rollouts = await context.rollouts.run(
            search, mode=Mode.VAL, version=version, tag=f"c{index}"
        )
        instances = await _instances(context, rollouts)
        scored = ScoredCandidate(
            index=index,
            picks=picks,
            version=version,
            score=statistics.fmean(instances.values()) if instances else 0.0,
            instances=instances,
        )
        state.candidates.append(scored)
        state.save(context.run.run_dir)
        metrics = {
            "demos/candidate": float(index),
            "demos/score": scored.score,
            "demos/best_score": state.best().score,
            "demos/pool": float(len(state.pool)),
            "time/candidate_s": time.perf_counter() - started,
        }
        context.progress.log(index + 1, metrics)
        context.progress.save(index + 1)
        history.append(metrics)
        logger.info("demos: candidate %d (v%d) scored %.3f", index, version, scored.score)
    await _publish_winner(config, context, state)
    return history


# -- the start of a search: parent, search tasks, pool ----------------------------------------


async def _start(config: DemosConfig, context: AlgorithmContext) -> SearchState:
    parent = _parent_prompt(config, context)
    seed = _seed(config, context)
    search_tasks, sources = split_tasks(
        len(context.tasks.train), search=config.val_tasks, seed=seed
    )
    parent_version = await context.rollouts.publish({config.prompt: parent})
    state = SearchState(
        run_id=f"demos-v{parent_version}-seed{seed}",
        prompt_name=config.prompt,
        parent_version=parent_version,
        parent=parent,
        search_tasks=search_tasks,
        pool=[],
    )
    await _collect(config, context, state, sources)
    state.save(context.run.run_dir)
    context.progress.log(
        0,
        {"demos/pool": float(len(state.pool)), "demos/collect_rollouts": state.collect_rollouts},
    )
    return state


def _parent_prompt(config: DemosConfig, context: AlgorithmContext) -> PromptTemplate:
    carried = context.rollouts.resources.get(config.prompt)
    if isinstance(carried, PromptTemplate):
        return carried
    if config.initial is None:
        raise ConfigError(
            f"algorithm demos: the run carries no prompt named {config.prompt!r} (carried: "
            f"{sorted(context.rollouts.resources)}); set algorithm.initial to the agent's default "
            "prompt as 'module:attribute'"
        )
    return config.initial_prompt()


async def _collect(
    config: DemosConfig, context: AlgorithmContext, state: SearchState, sources: list[int]
) -> None:
    """Fill the pool: stored successful rollouts first, then new training rollouts."""
    fields = state.parent.field_names()
    threshold = _threshold(config, context)
    allowed = {context.tasks.task_id(i, context.tasks.train[i]): i for i in sources}
    # Search rollouts of training tasks are validation-mode runs: both modes may teach.
    stored = [
        *await context.rollouts.succeeded(Mode.TRAIN),
        *await context.rollouts.succeeded(Mode.VAL),
    ]
    # Same id and same input: a validation task numbered like a training task is not one.
    usable = [
        r
        for r in stored
        if r.task_id in allowed and r.input == context.tasks.train[allowed[r.task_id]]
    ]
    tidy = config.tidy_function()
    pool: list[Demonstration] = []
    for start in range(0, len(usable), _READ_CHUNK):
        if len(pool) >= config.pool:
            break
        found = await _demonstrations(context, usable[start : start + _READ_CHUNK], fields, tidy)
        pool = unique_by_task([*pool, *(d for d, reward in found if reward >= threshold)])
    done = [d.metadata.get("task_id") for d in pool]
    pending = [i for i in sources if context.tasks.task_id(i, context.tasks.train[i]) not in done]
    batch_number = 0
    while len(pool) < config.pool and pending and state.collect_rollouts < config.collect_rollouts:
        room = config.collect_rollouts - state.collect_rollouts
        size = min(config.collect_batch, room)
        batch, pending = pending[:size], pending[size:]
        rollouts = await context.rollouts.run(
            [(i, context.tasks.train[i]) for i in batch],
            mode=Mode.VAL if config.collect_mode == "val" else Mode.TRAIN,
            version=state.parent_version,
            tag=f"demos-collect{batch_number}",
        )
        batch_number += 1
        state.collect_rollouts += len(rollouts)
        found = await _demonstrations(context, rollouts, fields, tidy)
        pool = unique_by_task([*pool, *(d for d, reward in found if reward >= threshold)])
    state.pool = pool[: config.pool]


async def _demonstrations(
    context: AlgorithmContext,
    rollouts: Sequence[Rollout],
    fields: Sequence[str],
    tidy: Callable[[str], str] | None,
) -> list[tuple[Demonstration, float]]:
    """Return the demonstration and reward of each succeeded rollout that yields one."""
    inputs = {r.rollout_id: r.input for r in rollouts}
    out: list[tuple[Demonstration, float]] = []
    for records in await context.rollouts.attempts(rollouts):
        reward = records.final_reward
        if reward is None:
            continue
        task = inputs[records.rollout_id]
        demo = demonstration_from(records, task, fields, reward=reward, tidy=tidy)
        if demo is not None:
            out.append((demo, reward))
    return out


# -- candidates and the winner ----------------------------------------------------------------


def _candidate(state: SearchState, picks: tuple[int, ...], *, step: int) -> PromptTemplate:
    """Build the parent with the demonstrations ``picks`` (pool indices) and its lineage."""
    chosen = [state.pool[i] for i in picks]
    lineage = PromptLineage(
        parent=state.parent_version,
        optimizer="demos",
        step=step,
        run_id=state.run_id,
        details={
            "pool_indices": list(picks),
            "source_rollouts": [d.metadata.get("rollout_id") for d in chosen],
        },
    )
    data = state.parent.model_dump()
    data.update(demos=[d.model_dump() for d in chosen], lineage=lineage.model_dump())
    return PromptTemplate.model_validate(data)


async def _instances(context: AlgorithmContext, rollouts: Sequence[Rollout]) -> dict[str, float]:
    rewards = await context.rollouts.rewards(rollouts)
    return {r.task_id or r.rollout_id: reward for r, reward in zip(rollouts, rewards, strict=True)}


def _unrecorded_scores(state: SearchState) -> dict[str, JsonData]:
    """Metadata holding the ``PromptScore`` of every candidate not stored yet (marks them)."""
    pending = [c for c in state.candidates if not c.is_recorded]
    for candidate in pending:
        candidate.is_recorded = True
    if not pending:
        return {}
    return {PROMPT_SCORES_KEY: [_score(state, c).model_dump(mode="json") for c in pending]}


def _score(state: SearchState, candidate: ScoredCandidate) -> PromptScore:
    return PromptScore(
        version=candidate.version,
        name=state.prompt_name,
        score=candidate.score,
        instances=candidate.instances,
        split="val",  # the search's validation set (training tasks held apart)
        run_id=state.run_id,
    )


async def _publish_winner(
    config: DemosConfig, context: AlgorithmContext, state: SearchState
) -> None:
    best = state.best()
    base = state.candidates[0].score
    details: dict[str, JsonData] = {
        "validation_score": best.score,
        "parent_score": base,
        "candidate": best.index,
        "candidate_version": best.version,
        "candidates": len(state.candidates),
        "search_tasks": len(state.search_tasks),
    }
    winner = _candidate(state, best.picks, step=best.index) if best.picks else state.parent
    lineage = PromptLineage(
        parent=state.parent_version,
        optimizer="demos",
        step=best.index,
        run_id=state.run_id,
        details={**(winner.lineage.details if winner.lineage else {}), **details},
    )
    final = winner.model_copy(update={"lineage": lineage})
    version = await context.rollouts.publish(
        {config.prompt: final}, metadata={"demos_winner": best.index, **_unrecorded_scores(state)}
    )
    # The published version shows the winning demonstrations: it carries their measured score.
    own = _score(state, best).model_copy(update={"version": version})
    await context.rollouts.publish(metadata={PROMPT_SCORES_KEY: [own.model_dump(mode="json")]})
    state.save(context.run.run_dir)
    logger.info(
        "demos: candidate %d wins with %.3f (the unchanged prompt scored %.3f); published v%d",
        best.index,
        best.score,
        base,
        version,
    )


def _threshold(config: DemosConfig, context: AlgorithmContext) -> float:
    return context.run.success_threshold if config.threshold is None else config.threshold


def _seed(config: DemosConfig, context: AlgorithmContext) -> int:
    return context.run.seed if config.seed is None else config.seed


def _draw_args(config: DemosConfig, context: AlgorithmContext) -> dict[str, Any]:
    return {
        "demos": config.demos,
        "count": config.candidates - 1,
        "seed": _seed(config, context),
    }
