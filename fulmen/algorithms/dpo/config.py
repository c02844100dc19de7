"""DPO's configuration, each option documented once.

``DPOAlgorithmConfig`` (``algorithm: dpo``) says where the preference pairs come from;
``DPOConfig`` how the policy is updated on them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fulmen.algorithms.lora import LoraUpdateSettings
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.source import StoreSource
from fulmen.algorithms.transitions import PolicyRoutedSection
from fulmen.transitions.trajectory import TransitionOptions

__all__ = ["DPOAlgorithmConfig", "DPOConfig"]


class DPOConfig(LoraUpdateSettings):
    """How the policy is updated on preference pairs (the DPO loss, ``docs/dpo.md``).

    DPO trains a LoRA adapter; its reference is the same model with the adapter disabled (the
    base weights), so no second copy of the model is held. Full fine-tuning is not offered:
    its reference would be that second copy.

    Attributes:
        beta: β, the strength of the implicit KL to the reference: the loss is
            ``-log sigmoid(β Δ)``, ``Δ = (log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) -
            log π_ref(y_l|x))``.
        label_smoothing: ε, the assumed share of flipped preferences (conservative DPO): the
            loss becomes ``(1 - ε) · that + ε · the same with chosen and rejected swapped``;
            0 (default) is plain DPO.
        lora: adapter shape.
        dtype: parameter dtype of the policy (logits are always taken in float32).
        learning_rate / weight_decay / betas: AdamW settings.
        max_grad_norm: global gradient-norm clip; ``None`` disables clipping.
        micro_batch_tokens: padded tokens per forward pass (rows x longest row), the memory
            knob; a pair's two sequences always share a micro-batch.
        max_seq_len: pairs with a longer sequence are dropped and counted. ``None``
            (default): the model's context (``max_position_embeddings``), as GRPO's.
        logit_chunk_tokens: LM-head rows computed at once (bounds the vocab-sized activations).
        gradient_checkpointing: recompute decoder activations in backward to save memory.
        seed: seed of the adapter's initialization (default: the run's seed).
        device / autocast: where the update runs and in which precision its matmuls
            (``ComputeSettings``).
    """

    beta: float = Field(default=0.1, gt=0, allow_inf_nan=False)
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)


class DPOAlgorithmConfig(PolicyRoutedSection):
    """``algorithm: dpo``: direct preference optimization on the agent's own better runs.

    Each step runs ``group_size`` rollouts of each of ``tasks_per_step`` tasks with the served
    policy; in each task's group the best rollout's calls are preferred over the worst one's,
    call position by call position, when their rewards differ by at least ``min_margin`` and
    the two calls saw the same prompt token ids (``fulmen.algorithms.dpo.pairs``); one DPO
    update on the step's pairs follows and the adapter is hot-loaded. With ``source`` (filled
    from ``data.from_store``) the pairs come once from a store's finished rollouts, grouped by
    task, and each of the ``steps`` updates trains on all of them.

    Attributes:
        name: ``dpo``.
        steps: updates to run.
        tasks_per_step: distinct tasks sampled for each step.
        group_size: rollouts per task; a pair needs two of them.
        min_margin: a group gives pairs only when its best and worst rewards differ by at
            least this (0.5 suits 0/1 rewards; lower it for graded ones).
        transitions: how call records become the pairs' sequences (``fulmen.transitions``'s
            options; ``agents`` selects whose calls are trained; ``merge`` chains
            token-exact calls into one sequence).
        dpo: the update's settings (``DPOConfig``).
        untrained_agents: which model serves the calls of agents ``transitions.agents``
            leaves out: ``policy`` (default, the trained adapter) or ``base`` (the base model;
            routed by each call's header as with PPO, ``docs/ppo.md``).
        checkpoint_every: save a resumable checkpoint every this many steps (and at the end).
        max_minutes: stop starting new steps once this much wall time has passed in the loop
            (the last step is checkpointed and validated as after ``steps``); ``None``: no
            limit.
        source: learn from a store's finished rollouts instead of sampling
            (``docs/offline.md``).
        data_parallel: take each update on ``world_size`` processes, each on some of the
            step's pairs (``DataParallelConfig``: ``replicate`` or ``fsdp``,
            ``docs/data-parallel.md``); ``None``: this process alone (unless under ``torchrun``).
    """

    name: Literal["dpo"] = "dpo"
    steps: int = Field(default=20, ge=1)
    tasks_per_step: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=2)
    min_margin: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    transitions: TransitionOptions = Field(default_factory=TransitionOptions)
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    untrained_agents: Literal["policy", "base"] = "policy"
    checkpoint_every: int = Field(default=1, ge=1)
    max_minutes: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    source: StoreSource | None = None
    data_parallel: DataParallelConfig | None = None

    @model_validator(mode="after")
    def _no_dead_options(self) -> DPOAlgorithmConfig:
        if self.source is not None:
            dead = {"tasks_per_step", "group_size"} & self.model_fields_set
            if dead:
                raise ValueError(
                    f"algorithm {', '.join(sorted(dead))} has no effect with a source store "
                    "(offline steps train on the pairs of the rollouts it holds, by task)"
                )
        return self

    def update_settings(self) -> DPOConfig:
        """Return ``dpo`` as written (the run's seed not completed)."""
        return self.dpo
