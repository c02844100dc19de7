"""PPO's configuration, each option documented once.

``PPOAlgorithmConfig`` (``algorithm: ppo``) is the loop; ``PPOConfig`` the update: the value
head, GAE and the two clipped losses.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fulmen.algorithms.lora import LoraUpdateSettings
from fulmen.algorithms.losses import check_loss_names
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.transitions import PolicyRoutedSection
from fulmen.transitions.trajectory import TransitionOptions

__all__ = ["PPOAlgorithmConfig", "PPOConfig"]


class PPOConfig(LoraUpdateSettings):
    """How the policy and its value head are updated on a batch of calls (``docs/ppo.md``).

    PPO trains a LoRA adapter and a value head: a linear layer on the policy's last hidden
    state at the last prompt token of each call, sharing the adapted trunk, so the value loss
    also trains the adapter. The KL reference is the model with the adapter disabled.

    Attributes:
        gamma: the discount from one call of a rollout to the next (1: none).
        gae_lambda: λ of generalized advantage estimation: 0 is the one-step TD error
            ``r_k + gamma V_{k+1} - V_k``, 1 the Monte Carlo return minus ``V_k``.
        normalize_advantages: shift and scale the step's call advantages to mean 0, std 1
            (over the batch's calls; a batch of one call keeps its own; the value targets are
            the unnormalized returns).
        value_coef: weight of the value loss in the step's loss.
        value_clip: ε_v of PPO2's clipped value loss: a value that moved more than ε_v from
            its value before the step is also scored at the clipped value, and the larger of
            the two errors counts (``docs/ppo.md``); ``None``: the plain squared error.
        value_learning_rate: the value head's AdamW learning rate (``None``: ``learning_rate``);
            a freshly initialized head learns slowly at a LoRA learning rate.
        policy_loss: name in ``fulmen.algorithms.losses.POLICY_LOSSES``.
        clip_low / clip_high: ratio clip range ``[1 - clip_low, 1 + clip_high]``.
        kl_coef: weight of a KL penalty to the base model (the adapter disabled); 0: none.
        kl_estimator: name in ``fulmen.algorithms.losses.KL_ESTIMATORS``.
        loss_normalization: ``"token"`` (every trained token of the batch weighs the same) or
            ``"rollout"`` (every rollout's tokens sum to the same weight) for the policy loss;
            the value loss is the mean over the batch's calls.
        epochs: optimizer steps over the same batch (advantages and the clipping's old values
            stay those of the rollouts).
        lora: adapter shape.
        dtype: parameter dtype of the policy (logits and values are taken in float32).
        learning_rate / weight_decay / betas: AdamW settings.
        max_grad_norm: global gradient-norm clip (adapter and value head together); ``None``
            disables clipping.
        micro_batch_tokens: padded tokens per forward pass (rows x longest row).
        max_seq_len: a rollout with a longer call is dropped whole (its returns need every
            call's value) and counted. ``None`` (default): the model's context
            (``max_position_embeddings``), as GRPO's.
        temperature: the temperature the rollouts were sampled at (set from
            ``rollouts.train_sampling.temperature``, as GRPO's).
        logit_chunk_tokens: LM-head rows computed at once (bounds the vocab-sized activations).
        gradient_checkpointing: recompute decoder activations in backward to save memory.
        seed: seed of the adapter's initialization (default: the run's); the value head
            starts at zero.
        device / autocast: where the update runs and in which precision its matmuls
            (``ComputeSettings``).
    """

    gamma: float = Field(default=1.0, ge=0, le=1)
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    normalize_advantages: bool = True
    value_coef: float = Field(default=0.1, ge=0, allow_inf_nan=False)
    value_clip: float | None = Field(default=0.2, gt=0, allow_inf_nan=False)
    value_learning_rate: float | None = Field(default=None, gt=0)
    policy_loss: str = "clipped"
    clip_low: float = Field(default=0.2, ge=0, lt=1)
    clip_high: float = Field(default=0.2, ge=0)
    kl_coef: float = Field(default=0.0, ge=0)
    kl_estimator: str = "k3"
    loss_normalization: Literal["token", "rollout"] = "token"
    epochs: int = Field(default=2, ge=1)
    temperature: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _known_names(self) -> PPOConfig:
        check_loss_names(self.policy_loss, self.kl_estimator)
        if self.kl_coef == 0 and "kl_estimator" in self.model_fields_set:
            raise ValueError("algorithm.ppo.kl_estimator has no effect with kl_coef 0")
        return self


class PPOAlgorithmConfig(PolicyRoutedSection):
    """``algorithm: ppo``: proximal policy optimization with a learned value function.

    Each step runs ``group_size`` rollouts (1 by default: PPO needs no groups) of each of
    ``tasks_per_step`` tasks with the served policy, turns each rollout's calls into steps of
    an episode (per call: the reward the agent emitted for it, and the final reward on the
    last call, ``fulmen.algorithms.ppo.rewards``), scores them with the value head, computes
    GAE advantages and returns over each rollout's calls in order, takes ``ppo.epochs``
    optimizer steps on the clipped policy loss plus the clipped value loss, and hot-loads the
    adapter.

    Attributes:
        name: ``ppo``.
        steps: updates to run.
        tasks_per_step: distinct tasks sampled for each step.
        group_size: rollouts per task (1: each rollout's baseline is the value head's).
        transitions: how call records become calls (``fulmen.transitions``'s options:
            ``agents`` selects whose calls are the episode's steps, ``calls`` and ``air``
            apply); PPO credits calls itself, so ``credit``, ``gamma`` and ``gamma_role`` are
            refused, and so is ``merge`` (each call is one step of GAE).
        ppo: the update's settings (``PPOConfig``).
        untrained_agents: which model serves the calls of agents ``transitions.agents`` does
            not select: ``policy`` (default; the trained adapter serves every agent, as GRPO
            without ``adapters``) or ``base`` (the base model, so an agent that is not trained,
            e.g. a checker, keeps its behaviour while the policy changes; the gateway routes by
            each call's ``x-fulmen-agent`` header, ``LLMResource.agent_models``). ``base``
            needs ``transitions.agents`` and reads agent names from the header alone
            (``transitions.names: call``).
        checkpoint_every: save a resumable checkpoint every this many steps (and at the end).
        max_minutes: stop starting new steps once this much wall time has passed in the loop
            (the last step is checkpointed and validated as after ``steps``); ``None``: no
            limit.
        data_parallel: take each update on ``world_size`` processes, each on some of the
            step's rollouts (``DataParallelConfig``: ``replicate`` or ``fsdp``,
            ``docs/data-parallel.md``); ``None``: this process alone (unless under ``torchrun``).
    """

    behaviour_temperature: ClassVar[str | None] = "ppo"

    name: Literal["ppo"] = "ppo"
    steps: int = Field(default=20, ge=1)
    tasks_per_step: int = Field(default=8, ge=1)
    group_size: int = Field(default=1, ge=1)
    transitions: TransitionOptions = Field(default_factory=TransitionOptions)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    untrained_agents: Literal["policy", "base"] = "policy"
    checkpoint_every: int = Field(default=1, ge=1)
    max_minutes: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    data_parallel: DataParallelConfig | None = None

    @model_validator(mode="after")
    def _no_dead_options(self) -> PPOAlgorithmConfig:
        given = {"credit", "gamma", "gamma_role"} & self.transitions.model_fields_set
        if given:
            raise ValueError(
                f"algorithm.transitions.{', '.join(sorted(given))} has no effect with ppo: each "
                "call's reward is the one emitted for it (the final reward on the last call) "
                "and GAE credits earlier calls (algorithm.ppo.gamma, algorithm.ppo.gae_lambda)"
            )
        if self.transitions.merge:
            raise ValueError(
                "algorithm.transitions.merge does not work with ppo: each call is one step of "
                "GAE with its own value; set merge: false"
            )
        return self

    def update_settings(self) -> PPOConfig:
        """Return ``ppo`` as written (the run's seed not completed)."""
        return self.ppo
