"""``algorithm: sft``'s run function: rejection-sampling rounds, or one round on a store.

A round gets its attempts (sampled now with the served policy, or read from ``source.store``),
keeps those whose reward reaches the threshold, builds the examples (``dataset``), measures the
mean logprob of the kept completions, fine-tunes (``SFTUpdater``), measures it again, publishes
the new policy — a LoRA adapter hot-loaded into the engine, or with ``finetune: full`` the whole
model, which the engine reloads as its weights — and checkpoints, then logs the round's
metrics: kept fraction, loss, logprob before/after, retokenized examples. The rounds are the
steps of the loop every weight-updating algorithm shares (``fulmen.algorithms.step_loop``:
serving, log line, checkpoint, validation on ``validation.every``). A killed run resumes
after its last finished round; a stage that follows another starts from the weights and
adapter that one published.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.sft.config import SFTAlgorithmConfig
from fulmen.algorithms.sft.dataset import SFTExample, build_dataset
from fulmen.algorithms.step_loop import Sample, Schedule, StepLoop
from fulmen.transitions.trajectory import AttemptRecords
from fulmen.types import Mode

__all__ = ["SFTRounds", "run_sft"]

logger = logging.getLogger("fulmen.train")


async def run_sft(config: SFTAlgorithmConfig, context: AlgorithmContext) -> list[dict[str, float]]:
    """Run the configured SFT rounds from the stage's saved progress.

    Returns the metrics of each round run now.
    """
    engine = await asyncio.to_thread(_build_engine, config, context)
    tokenizer = await asyncio.to_thread(_load_tokenizer, context)
    rounds = SFTRounds(config, context, engine, tokenizer)
    return await rounds.run_on_ranks(config.data_parallel)  # the steps run on every rank


class SFTRounds(StepLoop[SFTAlgorithmConfig]):
    """SFT's rounds as the shared loop's steps: each one's kept attempts are its batch."""

    def __init__(
        self, config: SFTAlgorithmConfig, context: AlgorithmContext, engine: Any, tokenizer: Any
    ) -> None:
        rounds, _ = config.planned()
        schedule = Schedule(rounds, unit="round", digits=3)
        super().__init__(config, context, updater=engine, schedule=schedule)
        self.tokenizer = tokenizer

    async def sample(self, step: int) -> Sample:
        """Get the round's attempts (sampled now, or the store's) and keep the good ones."""
        config, context = self.config, self.context
        metrics: dict[str, float] = {}
        if config.source is not None:
            attempts = await context.rollouts.read_source(config.source)
        else:
            attempts, rewards = await _sample(config, context, step)
            metrics.update(reward_metrics("reward", rewards, context.run.success_threshold))
            metrics["task/success"] = metrics.pop("reward/success")
        examples, stats = build_dataset(
            attempts,
            options=config.transition_options(),
            min_reward=config.kept_reward(context.run.success_threshold),
            max_seq_len=self.updater.max_seq_len,
            tokenizer=self.tokenizer,
        )
        metrics.update(stats.as_metrics())
        if stats.retokenized:
            logger.info(
                "sft round %d: %d of %d examples were tokenized from text (a teacher's calls)",
                step + 1,
                stats.retokenized,
                stats.examples,
            )
        return Sample(examples, metrics)

    async def update(self, step: int, batch: Any) -> dict[str, float]:
        """Fine-tune on the round's examples (with their mean logprob before and after)."""
        return await asyncio.to_thread(_fit, self.updater, batch, step)


def _build_engine(config: SFTAlgorithmConfig, context: AlgorithmContext) -> Any:
    from fulmen.algorithms.policy import load_adapter_weights, load_stage_policy
    from fulmen.algorithms.sft.updater import SFTUpdater

    settings = config.sft
    if settings.seed is None:
        settings = settings.model_copy(update={"seed": context.run.seed})
    progress, policy = context.progress, context.policy
    if policy.weights is not None:
        logger.info("sft starts from the full weights %s", policy.weights)
    model = load_stage_policy(
        context.run.model_path,
        dtype=settings.dtype,
        finetune=settings.finetune,
        weights=policy.weights,
        adapter=policy.adapter,
    )
    engine = SFTUpdater(model, config=settings)
    if progress.checkpoint is not None:
        logger.info("resuming sft after round %d from %s", progress.step, progress.checkpoint)
        engine.load_checkpoint(progress.checkpoint)
    elif policy.adapter is not None and settings.finetune == "lora":
        logger.info("sft starts from the adapter %s", policy.adapter)
        load_adapter_weights(engine.model, policy.adapter)
    return engine


def _load_tokenizer(context: AlgorithmContext) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(context.run.model_path), local_files_only=True)


async def _sample(
    config: SFTAlgorithmConfig, context: AlgorithmContext, index: int
) -> tuple[list[AttemptRecords], list[float]]:
    """Run one rejection-sampling round's rollouts with the served policy."""
    count = config.tasks_per_round or len(context.tasks.train)
    version = await context.rollouts.publish(metadata={"round": index})
    rollouts = await context.rollouts.run(
        context.tasks.batch(index, count),
        mode=Mode.TRAIN,
        version=version,
        tag=f"r{index}",
        group_size=config.attempts_per_task,
    )
    rewards = await context.rollouts.rewards(rollouts)
    return await context.rollouts.attempts(rollouts), rewards


def _fit(engine: Any, examples: list[SFTExample], index: int) -> dict[str, float]:
    """Fine-tune on the round's examples, with the mean logprob of them before and after."""
    if not examples:
        logger.warning("sft round %d kept no example: nothing to train on", index + 1)
        return {"sft/updated": 0.0}
    before = engine.mean_logprob(examples)
    metrics = engine.train(examples, round_index=index)
    after = engine.mean_logprob(examples)
    metrics.update(
        {
            "sft/updated": 1.0,
            "sft/logprob_before": before,
            "sft/logprob_after": after,
            "sft/logprob_gain": after - before,
        }
    )
    return metrics
