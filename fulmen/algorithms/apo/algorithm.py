"""``run_apo``: automatic prompt optimization with textual gradients and beam search.

1. **Start.** The prompt the run carries under ``config.prompt`` (or ``config.initial``) is
   published and scored on the scoring tasks (``score_tasks`` training tasks held apart from
   the minibatches; see ``tasks.py``); it is the first beam.
2. **Each round.** Every beam prompt runs ``minibatch`` training tasks through the normal
   runner path. For its low-reward rollouts the critic is shown the prompt, the inputs, the
   agent's calls and replies and the rewards, and writes a critique (the textual gradient);
   the editor rewrites the prompt from it ``branch`` times. Each valid, new rewrite is
   published as a prompt version whose lineage names its parent, the round, the critique and
   the edit (a diff), then scored on the scoring tasks.
3. **Selection.** Beam and candidates compete: ``beam`` keeps the ``beam_width`` best means,
   ``pareto`` every prompt best on some scoring task. The round's scores are stored and the
   best prompt is published, so it is what later rollouts and stages get.
4. **Stop** after ``rounds``, or before a round once ``max_rollouts`` or ``max_minutes`` is
   spent. The best prompt of the beam is published last.

The critic and editor are any OpenAI-compatible endpoints (the run's engine by default); their
calls are recorded as agents ``apo-critic`` and ``apo-editor`` and their cost is logged each
round. Progress is saved after every critique and every score (``APOState``).
"""

from __future__ import annotations

import difflib
import logging
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

from fulmen.algorithms.apo.client import OptimizerClient
from fulmen.algorithms.apo.config import APOConfig, OptimizerEndpoint
from fulmen.algorithms.apo.gradients import (
    critique_messages,
    edit_messages,
    edited_prompt,
    failed_rollout,
)
from fulmen.algorithms.apo.selection import Scored, select_beam, select_pareto
from fulmen.algorithms.apo.state import APOState, Candidate, RoundProgress
from fulmen.algorithms.apo.tasks import minibatch, split_tasks
from fulmen.algorithms.context import AlgorithmContext
from fulmen.errors import AgentFailed, ConfigError
from fulmen.types import (
    PROMPT_SCORES_KEY,
    Mode,
    PromptLineage,
    PromptTemplate,
    Rollout,
    RolloutStatus,
)
from fulmen.types.limits import JsonData

__all__ = ["APOOptimizer", "run_apo"]

logger = logging.getLogger("fulmen.train")


async def run_apo(config: APOConfig, context: AlgorithmContext) -> list[dict[str, float]]:
    """Run the optimization (see the module docstring); returns the metrics of each round."""
    if config.score_tasks is None and not context.tasks.val:
        raise ConfigError(
            "algorithm apo with score_tasks: null scores candidates on the validation tasks: "
            "set data.val and validation in the config, or give score_tasks a number"
        )
    critic = _client("apo-critic", config.critic, context)
    editor = _client("apo-editor", config.editor_endpoint(), context)
    try:
        return await APOOptimizer(config, context, critic=critic, editor=editor).run()
    finally:
        await critic.aclose()
        await editor.aclose()


def _client(agent: str, endpoint: OptimizerEndpoint, context: AlgorithmContext) -> OptimizerClient:
    """Build the client of ``endpoint``; without a ``base_url`` it is the run's own engine."""
    api_key = None
    if endpoint.api_key_env is not None:
        api_key = context.run.variable(endpoint.api_key_env)
        if not api_key:
            raise ConfigError(
                f"algorithm apo: {agent} reads its API key from ${endpoint.api_key_env}, "
                "which is not set"
            )
    own_engine = endpoint.base_url is None
    return OptimizerClient(
        agent,
        base_url=context.run.engine_url if own_engine else str(endpoint.base_url),
        model=(endpoint.model or context.run.engine_model) if own_engine else str(endpoint.model),
        api_key=api_key,
        sampling=endpoint.sampling,
        timeout_s=endpoint.timeout_s,
        record=context.rollouts.record_calls,
    )


def _text_key(prompt: PromptTemplate) -> str:
    """Return what makes two prompts the same prompt: everything but their lineage."""
    return prompt.model_copy(update={"lineage": None}).model_dump_json()


class APOOptimizer:
    """The optimization loop over an ``AlgorithmContext`` and two model clients."""

    def __init__(
        self,
        config: APOConfig,
        context: AlgorithmContext,
        *,
        critic: OptimizerClient,
        editor: OptimizerClient,
    ) -> None:
        self.config = config
        self.context = context
        self.critic = critic
        self.editor = editor
        seed = context.run.seed if config.seed is None else config.seed
        self.seed = seed
        train = list(enumerate(context.tasks.train))
        if config.score_tasks is None:
            self.score_batch = list(enumerate(context.tasks.val))
            self.minibatch_pool = list(range(len(train)))
        else:
            scoring, self.minibatch_pool = split_tasks(
                len(train), score=config.score_tasks, seed=seed
            )
            self.score_batch = [train[i] for i in scoring]
        self.train = train
        self.threshold = (
            context.run.success_threshold if config.threshold is None else config.threshold
        )
        self._started = time.monotonic()

    async def run(self) -> list[dict[str, float]]:
        """Run the remaining rounds, publish the best prompt; returns each round's metrics."""
        state = APOState.load(self.context.run.run_dir) or await self._start()
        history: list[dict[str, float]] = []
        while state.rounds_done < self.config.rounds:
            if self._is_spent(state):
                break
            history.append(await self._round(state, state.rounds_done))
        await self._publish_best(state)
        return history

    def _elapsed(self, state: APOState) -> float:
        return state.elapsed_s + time.monotonic() - self._started

    def _save(self, state: APOState) -> None:
        now = time.monotonic()
        state.elapsed_s += now - self._started
        self._started = now
        state.save(self.context.run.run_dir)

    def _is_spent(self, state: APOState) -> bool:
        cap, minutes = self.config.max_rollouts, self.config.max_minutes
        if cap is not None and state.rollouts >= cap:
            logger.info("apo: stopping, %d rollouts run (max_rollouts %d)", state.rollouts, cap)
            return True
        spent = self._elapsed(state) / 60
        if minutes is not None and spent >= minutes:
            logger.info("apo: stopping, %.1f min spent (max_minutes %g)", spent, minutes)
            return True
        return False

    # -- start ------------------------------------------------------------------------------

    async def _start(self) -> APOState:
        name = self.config.prompt
        carried = self.context.rollouts.resources.get(name)
        prompt = carried if isinstance(carried, PromptTemplate) else self.config.initial_prompt()
        run_id = f"apo-{uuid.uuid4().hex[:8]}"
        version = await self.context.rollouts.publish(
            {name: prompt}, metadata={"apo": {"run": run_id, "role": "start"}}
        )
        state = APOState(
            run_id=run_id,
            prompt_name=name,
            beam=[Candidate(version=version, prompt=prompt, round=0)],
        )
        await self._score(state, state.beam[0])
        return state

    # -- one round --------------------------------------------------------------------------

    async def _round(self, state: APOState, index: int) -> dict[str, float]:
        started = time.perf_counter()
        if state.pending is None or state.pending.round != index:
            state.pending = RoundProgress(round=index)
        pending = state.pending
        picks = minibatch(
            self.minibatch_pool, round_index=index, size=self.config.minibatch, seed=self.seed
        )
        batch = [self.train[i] for i in picks]
        for member_index, member in enumerate(state.beam):
            if member_index in pending.expanded:
                continue
            await self._expand(state, pending, member_index, member, batch)
        for candidate in pending.candidates:
            if candidate.score is None:
                await self._score(state, candidate)
        pool = [*state.beam, *pending.candidates]
        scores = state.unrecorded_scores()
        kept = self._select(pool)
        state.beam = kept
        state.rounds_done = index + 1
        state.pending = None
        best = kept[0]
        apo_meta: dict[str, JsonData] = {
            "run": state.run_id,
            "round": index + 1,
            "role": "round",
            "beam": [c.version for c in kept],
            "candidates": [c.version for c in pending.candidates],
        }
        await self.context.rollouts.publish(
            {state.prompt_name: best.prompt},
            metadata={
                "apo": apo_meta,
                PROMPT_SCORES_KEY: [s.model_dump(mode="json") for s in scores],
            },
        )
        self._save(state)
        self.context.progress.save(index + 1)
        metrics = self._metrics(state, pending.candidates, started)
        self.context.progress.log(index + 1, metrics)
        logger.info(
            "apo round %d: %d candidates, best v%d scores %.3f; beam %s",
            index + 1,
            len(pending.candidates),
            best.version,
            best.score or 0.0,
            [c.version for c in kept],
        )
        return metrics

    async def _expand(
        self,
        state: APOState,
        pending: RoundProgress,
        member_index: int,
        member: Candidate,
        batch: Sequence[tuple[int, Any]],
    ) -> None:
        """Critique one beam prompt on its failures and add the editor's rewrites."""
        rollouts = await self.context.rollouts.run(
            batch,
            mode=Mode.TRAIN,
            version=member.version,
            tag=f"apo-r{pending.round}-b{member_index}",
        )
        state.rollouts += len(rollouts)
        rewards = await self.context.rollouts.rewards(rollouts)
        low = [(r, w) for r, w in zip(rollouts, rewards, strict=True) if w < self.threshold]
        low = low[: self.config.max_examples]
        if low:
            critique = await self.critic.complete(
                critique_messages(
                    member.prompt,
                    await self._failures(low),
                    max_chars=self.config.max_chars,
                )
            )
            pool = (*state.beam, *pending.candidates)
            known = {_text_key(c.prompt) for c in pool}
            for branch in range(self.config.branch):
                answer = await self.editor.complete(edit_messages(member.prompt, critique))
                edited, why = edited_prompt(member.prompt, answer)
                if edited is None or _text_key(edited) in known:
                    state.invalid_edits += 1
                    logger.info("apo: edit refused: %s", why or "a duplicate of another prompt")
                    continue
                known.add(_text_key(edited))
                candidate = await self._publish_candidate(
                    state, pending.round, member, edited, critique, branch, rewards
                )
                pending.candidates.append(candidate)
        else:
            logger.info("apo: beam prompt v%d solved its whole minibatch", member.version)
        pending.expanded.append(member_index)
        self._save(state)

    async def _failures(self, low: Sequence[tuple[Rollout, float]]) -> list[Any]:
        records = await self.context.rollouts.attempts([r for r, _ in low])
        by_id = {rec.rollout_id: rec for rec in records}
        return [
            failed_rollout(
                rollout.input,
                by_id[rollout.rollout_id].calls if rollout.rollout_id in by_id else (),
                reward,
                max_chars=self.config.max_chars,
            )
            for rollout, reward in low
        ]

    async def _publish_candidate(
        self,
        state: APOState,
        round_index: int,
        parent: Candidate,
        edited: PromptTemplate,
        critique: str,
        branch: int,
        rewards: Sequence[float],
    ) -> Candidate:
        before = parent.prompt.export_text().splitlines()
        after = edited.export_text().splitlines()
        diff = "\n".join(difflib.unified_diff(before, after, "parent", "candidate", lineterm=""))
        lineage = PromptLineage(
            parent=parent.version,
            optimizer="apo",
            step=round_index + 1,
            critique=critique,
            edit=diff,
            run_id=state.run_id,
            details={"branch": branch, "minibatch_reward": statistics.fmean(rewards)},
        )
        prompt = edited.model_copy(update={"lineage": lineage})
        version = await self.context.rollouts.publish(
            {state.prompt_name: prompt},
            metadata={"apo": {"run": state.run_id, "round": round_index + 1, "role": "candidate"}},
        )
        return Candidate(version=version, prompt=prompt, round=round_index + 1)

    async def _score(self, state: APOState, candidate: Candidate) -> None:
        rollouts = await self.context.rollouts.run(
            self.score_batch,
            mode=Mode.VAL,
            version=candidate.version,
            tag=f"apo-val-v{candidate.version}",
        )
        state.rollouts += len(rollouts)
        if rollouts and all(r.status is RolloutStatus.FAILED for r in rollouts):
            # A prompt scored 0 on rollouts that never ran would be compared, kept and
            # published as if measured; a broken agent must stop the run instead.
            error = (rollouts[0].error or "no error recorded").strip().splitlines()[-1]
            raise AgentFailed(
                f"APO: every one of the {len(rollouts)} rollouts scoring prompt version "
                f"{candidate.version} failed (the first: {error}); fix the agent, see "
                "`fulmen rollouts list --status failed`"
            )
        rewards = await self.context.rollouts.rewards(rollouts)
        candidate.instances = {
            self.context.tasks.task_id(index, task): reward
            for (index, task), reward in zip(self.score_batch, rewards, strict=True)
        }
        candidate.score = statistics.fmean(rewards) if rewards else 0.0
        self._save(state)

    def _select(self, pool: Sequence[Candidate]) -> list[Candidate]:
        scored = [Scored(c.version, c.score or 0.0, c.instances) for c in pool]
        if self.config.selection == "pareto":
            kept = select_pareto(scored, limit=self.config.pareto_max)
        else:
            kept = select_beam(scored, width=self.config.beam_width)
        by_version = {c.version: c for c in pool}
        return [by_version[s.key] for s in kept]

    def _metrics(
        self, state: APOState, candidates: Sequence[Candidate], started: float
    ) -> dict[str, float]:
        beam_scores = [c.score or 0.0 for c in state.beam]
        cand_scores = [c.score or 0.0 for c in candidates]
        return {
            "apo/best_score": max(beam_scores),
            "apo/beam_mean_score": statistics.fmean(beam_scores),
            "apo/beam_size": float(len(state.beam)),
            "apo/candidates": float(len(candidates)),
            "apo/candidate_best_score": max(cand_scores) if cand_scores else float("nan"),
            "apo/invalid_edits": float(state.invalid_edits),
            "apo/rollouts": float(state.rollouts),
            **self.critic.cost.metrics("apo-critic"),
            **self.editor.cost.metrics("apo-editor"),
            "time/round_s": time.perf_counter() - started,
        }

    async def _publish_best(self, state: APOState) -> None:
        best = state.beam[0]
        scores = state.unrecorded_scores()
        meta: dict[str, JsonData] = {"apo": {"run": state.run_id, "role": "winner"}}
        if scores:
            meta[PROMPT_SCORES_KEY] = [s.model_dump(mode="json") for s in scores]
        version = await self.context.rollouts.publish(
            {state.prompt_name: best.prompt}, metadata=meta
        )
        self._save(state)
        logger.info(
            "apo: best prompt v%d (validation %.3f) published as v%d",
            best.version,
            best.score or 0.0,
            version,
        )
