"""SFT's configuration, each option documented once.

``SFTAlgorithmConfig`` (``algorithm: sft``) says where the examples come from; ``SFTConfig`` how
the policy is fine-tuned on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.algorithms.compute import ComputeSettings
from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.section import AlgorithmSection
from fulmen.algorithms.source import StoreFilter, StoreSource
from fulmen.algorithms.transitions import check_transitions
from fulmen.transitions.trajectory import TransitionOptions

if TYPE_CHECKING:
    from fulmen.algorithms.update_memory import UpdateShape

__all__ = ["SFTAlgorithmConfig", "SFTConfig", "StoreFilter", "StoreSource"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SFTConfig(_Strict, ComputeSettings):
    """How the policy is fine-tuned on the selected completions (negative log-likelihood).

    Attributes:
        finetune: ``lora`` trains an adapter, hot-loaded into the engine after each round;
            ``full`` trains every weight in float32 and reloads the engine's weights after each
            round (an engine that can reload full weights: the built-in one).
        lora: adapter shape (``finetune: lora`` only).
        dtype: parameter dtype of the policy (logits are always taken in float32); full
            fine-tuning keeps float32 weights, so ``bfloat16`` is for LoRA only.
        learning_rate / weight_decay / betas: AdamW settings.
        max_grad_norm: global gradient-norm clip; ``None`` disables clipping.
        batch_size: sequences per optimizer step.
        epochs: passes over each round's examples.
        micro_batch_tokens: padded tokens per forward pass (rows x longest row), the memory knob.
        max_seq_len: longer sequences are dropped and counted. ``None`` (default): the
            model's context (``max_position_embeddings``), as GRPO's.
        logit_chunk_tokens: LM-head rows computed at once (bounds the vocab-sized activations).
        gradient_checkpointing: recompute decoder activations in backward to save memory.
        seed: seed of the adapter's initialization and of the example order (default: the
            run's seed).
        device / autocast: where the update runs and in which precision its matmuls
            (``ComputeSettings``).
    """

    finetune: Literal["lora", "full"] = "lora"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    dtype: Literal["float32", "bfloat16"] = "float32"
    learning_rate: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    batch_size: int = Field(default=8, ge=1)
    epochs: int = Field(default=1, ge=1)
    micro_batch_tokens: int = Field(default=4096, ge=1)
    max_seq_len: int | None = Field(default=None, ge=2)
    logit_chunk_tokens: int = Field(default=256, ge=1)
    gradient_checkpointing: bool = False
    seed: int | None = None

    @model_validator(mode="after")
    def _full_weights_in_float32(self) -> SFTConfig:
        if self.finetune == "full":
            if "lora" in self.model_fields_set:
                raise ValueError("sft.lora has no effect with finetune 'full'")
            if self.dtype != "float32":
                raise ValueError(
                    f"sft.dtype {self.dtype!r} with finetune 'full': full fine-tuning keeps "
                    "float32 weights (AdamW steps on bfloat16 weights lose small updates); "
                    "use dtype float32, or finetune lora"
                )
        return self


class SFTAlgorithmConfig(AlgorithmSection):
    """``algorithm: sft``: fine-tune on the completions of the agent's best runs.

    Without ``source`` it is rejection sampling: each round samples ``attempts_per_task``
    rollouts of ``tasks_per_round`` training tasks with the current policy, keeps the rollouts
    whose reward reaches ``min_reward``, fine-tunes on the completion tokens of their selected
    calls and hot-loads the adapter, for ``rounds`` rounds. With ``source`` it is one round on
    the finished rollouts of a store (a teacher's: calls recorded without token ids are
    tokenized once with the student's chat template and counted as ``sft/retokenized``).

    Attributes:
        name: ``sft``.
        rounds: rejection-sampling rounds.
        attempts_per_task: rollouts sampled per task in a round.
        tasks_per_round: tasks sampled per round (``None``: every training task).
        min_reward: a rollout is kept when its reward is at least this (``None``: the
            source filter's ``min_reward`` when it has one, else the run's
            ``success_threshold``).
        source: train on a store's finished rollouts instead of sampling.
        transitions: how call records become examples (``fulmen.transitions``'s options; ``agents``
            selects whose calls are trained; ``merge`` chains token-exact calls).
        sft: the fine-tuning settings (``SFTConfig``).
        data_parallel: take each optimizer step on ``world_size`` processes, each on some of
            the step's sequences (``DataParallelConfig``, ``docs/data-parallel.md``).
    """

    name: Literal["sft"] = "sft"
    rounds: int = Field(default=3, ge=1)
    attempts_per_task: int = Field(default=4, ge=1)
    tasks_per_round: int | None = Field(default=None, ge=1)
    min_reward: float | None = None
    source: StoreSource | None = None
    transitions: TransitionOptions = Field(default_factory=TransitionOptions)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    data_parallel: DataParallelConfig | None = None

    @model_validator(mode="after")
    def _no_dead_options(self) -> SFTAlgorithmConfig:
        check_transitions(self.transitions)
        if self.source is not None:
            if self.min_reward is not None and self.source.filter.min_reward is not None:
                raise ValueError(
                    f"algorithm.min_reward ({self.min_reward}) and the source filter's "
                    f"min_reward ({self.source.filter.min_reward}) both set the kept reward; "
                    "set one"
                )
            dead = {"rounds", "attempts_per_task", "tasks_per_round"} & self.model_fields_set
            if dead:
                raise ValueError(
                    f"algorithm {', '.join(sorted(dead))} has no effect with a source store "
                    "(one round over its rollouts; set sft.epochs for more passes)"
                )
        return self

    def kept_reward(self, success_threshold: float) -> float:
        """Return the reward a rollout needs to be trained on (see ``min_reward``)."""
        if self.min_reward is not None:
            return self.min_reward
        if self.source is not None and self.source.filter.min_reward is not None:
            return self.source.filter.min_reward
        return success_threshold

    def planned(self) -> tuple[int, str]:
        """Return how many rounds the stage runs (one over a source), and the option."""
        return (1, "source") if self.source is not None else (self.rounds, "rounds")

    def transition_options(self) -> TransitionOptions:
        """Return the ``TransitionOptions`` (``transitions``)."""
        return self.transitions

    def trains_full_weights(self) -> bool:
        """Say whether ``sft.finetune`` is ``full``."""
        return self.sft.finetune == "full"

    def data_parallel_settings(self) -> DataParallelConfig | None:
        """Return ``data_parallel``."""
        return self.data_parallel

    def max_seq_len_settings(self) -> tuple[str, int | None]:
        """Return ``sft.max_seq_len``."""
        return "sft.max_seq_len", self.sft.max_seq_len

    def update_shape(self) -> UpdateShape:
        """Return ``sft``'s update shape."""
        from fulmen.algorithms.update_memory import UpdateShape

        return UpdateShape.of("sft", self.sft, parallel=self.data_parallel)
