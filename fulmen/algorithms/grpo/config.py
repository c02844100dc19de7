"""GRPO's configuration, each option documented once.

``GRPOAlgorithmConfig`` is the loop (``algorithm: grpo``); ``GRPOConfig`` the updater.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fulmen.algorithms.compute import ComputeSettings
from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.losses import GAP_BOUNDS, MismatchCorrection, check_loss_names
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.section import AlgorithmSection
from fulmen.algorithms.source import StoreSource
from fulmen.algorithms.transitions import check_transitions
from fulmen.transitions.trajectory import TransitionOptions

if TYPE_CHECKING:
    from fulmen.algorithms.update_memory import UpdateShape

__all__ = [
    "AsyncSettings",
    "DynamicSampling",
    "EngineMismatch",
    "GRPOAlgorithmConfig",
    "GRPOConfig",
    "LoraSettings",
]


class EngineMismatch(BaseModel):
    """``grpo.mismatch``: the gap between the engine's sampling numerics and the trainer's.

    The engine records each token's logprob as it sampled it; the trainer recomputes it. The
    built-in engine runs the trainer's own code in float32 (gap about 1e-6); vLLM's kernels,
    bfloat16 or an autocast update do not, so the ratio ``exp(trainer - engine)`` drifts from
    1 even on-policy. Every step logs the gap (``mismatch/*``, ``docs/engine-mismatch.md``);
    a correction changes the loss of fresh tokens (stale ones keep ``is_cap``'s).

    Attributes:
        correction: ``"auto"`` (default): ``"tis"`` where the gap is not ~1e-6, that is when
            the run's engine samples in bfloat16 (``engine.dtype``) or the update computes in
            it (``dtype``, ``autocast``), and ``epochs`` is 1; ``"none"`` otherwise (both in
            float32: the built-in engine's and vLLM's default). ``"none"``: the ratio is taken
            against the engine's logprobs and the clip range absorbs the gap. ``"tis"``: the
            ratio against the trainer's
            logprobs before the update, the loss weighted by ``min(exp(trainer - engine),
            cap)`` (truncated importance sampling). ``"mask_tokens"`` / ``"mask_sequences"``:
            the same ratio, weight 0 for a token (or every token of a sequence, judged by its
            geometric-mean ratio) whose ratio is outside ``bounds``. Needs ``epochs: 1``.
        cap: the truncation of ``"tis"`` (also when ``"auto"`` chooses it); ``None``
            (default): 2.0.
        bounds: the ratios a token (sequence) may have under masking; also the range
            ``mismatch/outside_fraction`` counts tokens outside of, with any correction.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    correction: MismatchCorrection | Literal["auto"] = "auto"
    cap: float | None = Field(default=None, ge=1, le=1e6, allow_inf_nan=False)
    bounds: tuple[float, float] = GAP_BOUNDS

    @property
    def truncation(self) -> float:
        """The cap ``"tis"`` truncates the weight at."""
        return 2.0 if self.cap is None else self.cap

    @model_validator(mode="after")
    def _sensible(self) -> EngineMismatch:
        low, high = self.bounds
        if not (0 < low < 1 < high < 1e6):
            raise ValueError(
                f"mismatch.bounds must be (low, high) with 0 < low < 1 < high; got {self.bounds}"
            )
        if self.cap is not None and self.correction not in ("tis", "auto"):
            raise ValueError(
                f"mismatch.cap applies to correction 'tis' only; correction is {self.correction!r}"
            )
        return self

    @property
    def applied(self) -> MismatchCorrection:
        """The correction the update applies (``"auto"`` not resolved for an engine: ``"none"``)."""
        return "none" if self.correction == "auto" else self.correction

    def resolved(self, *, low_precision: bool, epochs: int) -> EngineMismatch:
        """Return these settings with ``"auto"`` chosen: ``"tis"`` or ``"none"`` (docstring above).

        ``low_precision``: the engine samples, or the update computes, in bfloat16.
        """
        if self.correction != "auto":
            return self
        chosen = "tis" if low_precision and epochs == 1 else "none"
        return self.model_copy(update={"correction": chosen})


class GRPOConfig(ComputeSettings):
    """How the engine turns transitions into one policy update.

    Attributes:
        finetune: ``"lora"`` trains an adapter (the reference is the base without it);
            ``"full"`` trains every weight (the reference is a frozen copy, only with KL).
        lora: adapter shape for ``finetune="lora"``.
        dtype: parameter dtype of the policy (logits are always taken in float32).
        learning_rate / weight_decay / betas: AdamW settings.
        max_grad_norm: global gradient-norm clip; ``None`` disables clipping.
        advantage: ``"rollout"`` (group-relative over rollout rewards, broadcast to the
            rollout's tokens, weighted by credit) or ``"transition"`` (group-relative over
            credited transition rewards, each rollout weighted equally in the statistics).
        normalize_std: divide advantages by the group's standard deviation.
        anchor_weight: ω of anchor-state credit: each call's advantage gains ω times its
            step-level advantage among the calls of its group that acted from the same state
            (the same prompt token ids); 0 (default) is plain GRPO
            (``fulmen.algorithms.grpo.anchors``, ``docs/credit-and-advantages.md``). Refused
            with ``transitions.merge: true``, where it would only repeat the rollout level.
        min_abs_advantage: a token whose advantage is at most this in magnitude is trained
            with advantage 0, and a batch where no token's advantage exceeds it takes no
            optimizer step, even with ``kl_coef`` > 0 (a step without signal would only move
            the weights through AdamW's moments, and KL alone would pull the policy towards
            the reference). In advantage units: with ``normalize_std`` off and rewards far
            below 1, lower it; 0 skips only exact zeros.
        policy_loss: name in ``losses.POLICY_LOSSES``.
        clip_low / clip_high: ratio clip range ``[1 - clip_low, 1 + clip_high]``.
        kl_coef: weight of the KL penalty to the reference; 0 turns the reference off.
        kl_estimator: name in ``losses.KL_ESTIMATORS``.
        loss_normalization: ``"token"`` (every trained token of the batch weighs the same) or
            ``"rollout"`` (every rollout's tokens sum to the same weight).
        micro_batch_tokens: padded tokens per forward pass (rows x longest row), the memory knob.
            A longer sequence forms a micro-batch of its own.
        epochs: optimizer steps over the same batch (1 = strictly on-policy).
        max_seq_len: longer sequences (prompt plus completion) are dropped, counted, and
            logged with their lengths each step. ``None`` (default): the model's context
            (``max_position_embeddings``: 32,768 for Gemma 3 270M), so whatever the engine
            could serve can train (``fulmen.algorithms.sequence_lengths``).
        skip_truncated: drop transitions whose last call hit its token limit.
        skip_zero_advantage: do not run the model on sequences whose every token has zero
            advantage (they add nothing to the loss when ``kl_coef`` is 0; still normalized).
            With ``kl_coef`` > 0 they are trained for the KL term. Whatever this option, a
            batch with no advantage anywhere takes no step (``min_abs_advantage``).
        temperature: the temperature the behaviour policy sampled at. The engines record
            logprobs of ``log_softmax(logits / temperature)`` (vLLM's processed logprobs) and
            the policy's logprobs are computed the same way, so on-policy ratios are 1.
            ``TrainConfig`` sets it from ``rollouts.train_sampling.temperature``.
        logit_chunk_tokens: LM-head rows computed at once (bounds the vocab-sized activations).
        gradient_checkpointing: recompute decoder activations in backward to save memory:
            ``true`` for every micro-batch, ``false`` never, ``None`` (default) for a
            micro-batch over ``micro_batch_tokens`` (one long sequence), where a 30k-token
            sequence would otherwise hold every layer's activations at once.
        seed: seed of the adapter's initialization (the global torch RNG is left alone).
        is_cap: truncated importance sampling of *stale* tokens (sampled by an older policy
            than the one being trained): their ratio is taken against the current policy's
            logprobs before the update and the loss is weighted by
            ``min(exp(logp_current - logp_behaviour), is_cap)``; fresh tokens keep the plain
            ratio against the behaviour logprobs (weight exactly 1). ``None``: stale tokens
            get the plain ratio too. Needs ``epochs: 1``. ``algorithm.async.is_cap`` sets it.
        mismatch: the engine-trainer logprob gap: what is logged and corrected
            (``EngineMismatch``).
        device / autocast: where the update runs and in which precision its matmuls
            (``ComputeSettings``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    finetune: Literal["lora", "full"] = "lora"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    dtype: Literal["float32", "bfloat16"] = "float32"
    learning_rate: float = Field(default=1e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    advantage: Literal["rollout", "transition"] = "rollout"
    normalize_std: bool = True
    anchor_weight: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    min_abs_advantage: float = Field(default=1e-6, ge=0, allow_inf_nan=False)
    policy_loss: str = "clipped"
    clip_low: float = Field(default=0.2, ge=0, lt=1)
    clip_high: float = Field(default=0.28, ge=0)
    kl_coef: float = Field(default=0.0, ge=0)
    kl_estimator: str = "k3"
    loss_normalization: Literal["token", "rollout"] = "token"
    micro_batch_tokens: int = Field(default=4096, ge=1)
    epochs: int = Field(default=1, ge=1)
    max_seq_len: int | None = Field(default=None, ge=2)
    skip_truncated: bool = False
    skip_zero_advantage: bool = True
    temperature: float = Field(default=1.0, gt=0)
    logit_chunk_tokens: int = Field(default=256, ge=1)
    gradient_checkpointing: bool | None = None
    seed: int = 0
    is_cap: float | None = Field(default=None, gt=0)
    mismatch: EngineMismatch = Field(default_factory=EngineMismatch)

    @model_validator(mode="after")
    def _known_names(self) -> GRPOConfig:
        check_loss_names(self.policy_loss, self.kl_estimator)
        # the current policy's logprobs before the update are taken from the one pass
        if self.is_cap is not None and self.epochs != 1:
            raise ValueError(f"is_cap (stale-token correction) needs epochs 1; got {self.epochs}")
        if self.mismatch.correction not in ("none", "auto") and self.epochs != 1:
            raise ValueError(
                f"mismatch.correction {self.mismatch.correction!r} needs epochs 1; "
                f"got {self.epochs}"
            )
        return self

    def for_engine(self, engine_dtype: str) -> GRPOConfig:
        """Return these settings with ``mismatch.correction: auto`` chosen for the run's engine.

        ``engine_dtype`` is the precision the engine samples in (``engine.dtype``).
        """
        low = engine_dtype != "float32" or self.dtype != "float32" or self.autocast is not None
        mismatch = self.mismatch.resolved(low_precision=low, epochs=self.epochs)
        return self if mismatch is self.mismatch else self.model_copy(update={"mismatch": mismatch})


class AsyncSettings(BaseModel):
    """``algorithm.async``: collect the next steps' rollouts while the current update runs.

    Attributes:
        max_staleness: a transition sampled by a policy more than this many updates older
            than the one being trained is dropped (and counted); ``1`` lets the rollouts
            collected during an update train the next step.
        is_cap: truncation ``C`` of the importance weight of stale-but-allowed tokens,
            ``min(exp(logp_current - logp_behaviour), C)`` (``GRPOConfig.is_cap``).
        prefetch_steps: steps of rollouts kept running or waiting beyond the one being
            trained (``tasks_per_step`` groups each); at most ``max_staleness``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_staleness: int = Field(default=1, ge=1)
    is_cap: float = Field(default=2.0, gt=0)
    prefetch_steps: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _no_wasted_rollouts(self) -> AsyncSettings:
        if self.prefetch_steps > self.max_staleness:
            raise ValueError(
                f"algorithm.async.prefetch_steps={self.prefetch_steps} exceeds max_staleness="
                f"{self.max_staleness}: the extra rollouts would be too stale to train"
            )
        return self


class DynamicSampling(BaseModel):
    """``algorithm.dynamic_sampling``: keep a step's groups informative where rewards are sparse.

    A group whose rewards all came out equal (every rollout solved the task, or none did) has
    no advantage to learn from: GRPO trains nothing on it. Three remedies, each optional and
    each counted in the step's ``sampling/*`` metrics (``docs/sparse-rewards.md``):

    Attributes:
        extra_samples: first, run this many more rollouts of a task whose group had equal
            rewards (more samples where a group has no signal); they join its group.
        redraw: drop the groups still without signal and draw other tasks in their place,
            until ``tasks_per_step`` groups have signal or ``max_redraws`` extra draws were
            made (DAPO's dynamic sampling); ``False``: keep them (they train nothing).
        max_redraws: extra draws per step at most: the cost bound of ``redraw``. A step runs
            at most ``(1 + max_redraws) * tasks_per_step`` groups, plus the extra samples.
        skip_flat_for: an online difficulty filter: a task whose group had equal rewards is
            skipped (another drawn in its place) when it comes up again within this many
            steps; ``0``: never skipped. The memory lasts for the stage's process (a resumed
            run relearns it). Without ``redraw`` a task comes up again only in a later epoch
            of the training tasks (``dynamic_sampling.filter_reach``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    extra_samples: int = Field(default=0, ge=0, le=64)
    redraw: bool = True
    max_redraws: int = Field(default=2, ge=0, le=16)
    skip_flat_for: int = Field(default=0, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _no_dead_options(self) -> DynamicSampling:
        if not self.redraw and "max_redraws" in self.model_fields_set:
            raise ValueError(
                "algorithm.dynamic_sampling.max_redraws has no effect with redraw: false"
            )
        if not self.redraw and not self.extra_samples and not self.skip_flat_for:
            raise ValueError(
                "algorithm.dynamic_sampling with redraw: false, extra_samples: 0 and "
                "skip_flat_for: 0 does nothing; leave it out"
            )
        return self


class GRPOAlgorithmConfig(AlgorithmSection):
    """``algorithm: grpo`` (the default): the on-policy loop around the updater.

    Attributes:
        name: ``grpo``.
        steps: policy updates to run.
        tasks_per_step: distinct tasks sampled for each step.
        group_size: rollouts per task (the GRPO group).
        transitions: how call records become transitions (``fulmen.transitions``'s options:
            ``merge``, ``agents``, ``credit``, ``gamma``, ``missing_reward``).
        grpo: the updater's settings (``GRPOConfig``).
        checkpoint_every: save a resumable checkpoint every this many steps (and at the end).
        max_minutes: stop starting new steps once this much wall time has passed in this run
            (then validate and checkpoint as after the last step); ``None``: no limit.
        source: learn off-policy from a store's finished rollouts (kept production traffic)
            instead of sampling: each of the ``steps`` updates is one GRPO step over every
            token-level call the source keeps, its importance ratio taken against the
            logprobs recorded when the call was served (clipped); ``fulmen train`` fills it
            from ``data.from_store`` (``docs/offline.md``).
        data_parallel: take each update on ``world_size`` processes (``DataParallelConfig``,
            ``docs/data-parallel.md``); ``None``: this process alone (unless under ``torchrun``).
        async: (``async_`` in Python) train asynchronously with bounded staleness
            (``AsyncSettings``, ``docs/async.md``); ``None``: each step waits for its own
            rollouts, which its policy sampled.
        adapters: one LoRA adapter per role: adapter name -> the agent names (``fnmatch``
            patterns, first match wins) whose calls it serves and learns from
            (``fulmen.algorithms.grpo.roles``, ``docs/roles.md``). Calls of other agents are
            served by the base model and not trained. ``None``: one adapter serves and learns
            from every call ``transitions.agents`` selects.
        dynamic_sampling: replace or enlarge the groups whose rewards are all equal
            (``DynamicSampling``); ``None``: every step trains the groups it drew.
        max_failed_steps: stop the run (an error naming the first failure) after this many
            steps in a row in which no rollout produced a reward (every rollout failed, or
            those that succeeded gave none: a command agent that crashed, an agent that
            returned ``None``): the agent or its reward code is broken and nothing can be
            learned; ``None``: never stop for that.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True
    )

    behaviour_temperature: ClassVar[str | None] = "grpo"

    name: Literal["grpo"] = "grpo"
    steps: int = Field(default=20, ge=1)
    tasks_per_step: int = Field(default=4, ge=1)
    group_size: int = Field(default=4, ge=2)
    transitions: TransitionOptions = Field(default_factory=TransitionOptions)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    checkpoint_every: int = Field(default=1, ge=1)
    max_minutes: float | None = Field(default=None, gt=0)
    source: StoreSource | None = None
    data_parallel: DataParallelConfig | None = None
    async_: AsyncSettings | None = Field(default=None, alias="async")
    adapters: dict[str, list[str]] | None = None
    max_failed_steps: int | None = Field(default=3, ge=1)
    dynamic_sampling: DynamicSampling | None = None

    @model_validator(mode="after")
    def _no_dead_options(self) -> GRPOAlgorithmConfig:
        check_transitions(self.transitions)
        if self.adapters is not None:
            self._check_adapters()
        if self.source is not None:
            dead = {"tasks_per_step", "group_size"} & self.model_fields_set
            if dead:
                raise ValueError(
                    f"algorithm {', '.join(sorted(dead))} has no effect with a source store "
                    "(offline steps train on the rollouts it holds, grouped by their task)"
                )
        if self.async_ is not None and self.source is not None:
            raise ValueError("algorithm.async has no effect with a source store (no sampling)")
        if self.dynamic_sampling is not None and self.source is not None:
            raise ValueError(
                "algorithm.dynamic_sampling has no effect with a source store (no sampling)"
            )
        if self.dynamic_sampling is not None and self.async_ is not None:
            raise ValueError(
                "algorithm.dynamic_sampling does not work with algorithm.async yet (its groups "
                "are launched ahead of the step that trains them)"
            )
        grpo = self.update_config(seed=0)  # validates the nested settings now, not at step 1
        if self.async_ is not None and grpo.finetune != "lora":
            # full weights reload in place: a running rollout would mix two policies
            raise ValueError("algorithm.async needs grpo.finetune 'lora'")
        options = self.transition_options()
        if options.credit == "per_call" and grpo.advantage == "rollout":
            raise ValueError(
                "algorithm.transitions.credit 'per_call' has no effect with grpo.advantage "
                "'rollout' (set grpo.advantage: transition)"
            )
        if grpo.anchor_weight > 0 and options.merge:
            # A merged transition is grouped by its first call's prompt, which every rollout of
            # the task shares, and carries the rollout's reward: its step group is its GRPO group
            # and the step level repeats the rollout level (the advantage times 1 + ω).
            raise ValueError(
                "algorithm.grpo.anchor_weight does not work with transitions.merge: true (a "
                "merged rollout is one sequence from the task's first prompt, shared by every "
                "rollout of the group, so the step-level advantage equals the rollout-level "
                "one); set merge: false so each call is compared with the calls made from its "
                "own state"
            )
        return self

    def update_config(self, *, seed: int) -> GRPOConfig:
        """Return ``grpo`` completed for this run, checked for dead options (see ``for_engine``).

        ``seed`` is the run's seed, used unless ``grpo.seed`` is set; with ``async`` the
        staleness correction's cap is ``async.is_cap``.
        """
        given = self.grpo.model_fields_set
        update: dict[str, object] = {}
        if "seed" not in given:
            update["seed"] = seed
        if "is_cap" in given:
            raise ValueError("algorithm.grpo.is_cap is set by algorithm.async.is_cap")
        if self.async_ is not None:
            if self.grpo.epochs != 1:
                raise ValueError("algorithm.async needs grpo.epochs 1 (one pass per step)")
            update["is_cap"] = self.async_.is_cap
        if self.grpo.finetune == "full" and "lora" in given:
            raise ValueError("algorithm.grpo.lora has no effect with finetune 'full'")
        if self.grpo.kl_coef == 0 and "kl_estimator" in given:
            raise ValueError("algorithm.grpo.kl_estimator has no effect with kl_coef 0")
        return self.grpo.model_copy(update=update)

    def planned(self) -> tuple[int, str]:
        """Return how many steps the stage runs, and the option that sets it."""
        return self.steps, "steps"

    def trains_full_weights(self) -> bool:
        """Say whether ``grpo.finetune`` is ``full``."""
        return self.grpo.finetune == "full"

    def runs_async(self) -> bool:
        """Say whether ``async`` is set."""
        return self.async_ is not None

    def data_parallel_settings(self) -> DataParallelConfig | None:
        """Return ``data_parallel``."""
        return self.data_parallel

    def max_seq_len_settings(self) -> tuple[str, int | None]:
        """Return ``grpo.max_seq_len``."""
        return "grpo.max_seq_len", self.grpo.max_seq_len

    def update_shape(self) -> UpdateShape:
        """Return ``grpo``'s update shape; full fine-tuning with KL keeps a reference copy."""
        from fulmen.algorithms.update_memory import UpdateShape

        grpo = self.grpo  # what the shape reads does not depend on the run's seed
        copy = grpo.finetune == "full" and grpo.kl_coef > 0
        return UpdateShape.of("grpo", grpo, reference_copy=copy, parallel=self.data_parallel)

    def _check_adapters(self) -> None:
        from fulmen.algorithms.grpo.roles import check_adapters

        assert self.adapters is not None
        check_adapters(self.adapters)
        given = self.transitions.model_fields_set
        if "agents" in given:
            raise ValueError(
                "algorithm.adapters names the trained agents: leave out algorithm.transitions."
                "agents"
            )
        if "names" in given and self.transitions.names != "call":
            raise ValueError(
                "algorithm.adapters trains each call into the adapter its x-fulmen-agent header "
                "routed it to: algorithm.transitions.names must be 'call' (or left out)"
            )
        unsupported = {
            "source": self.source,
            "data_parallel": self.data_parallel,
            "async": self.async_,
        }
        for option, value in unsupported.items():
            if value is not None:
                raise ValueError(f"algorithm.adapters does not work with algorithm.{option} yet")
        if self.grpo.finetune != "lora":
            raise ValueError("algorithm.adapters needs grpo.finetune 'lora'")

    def transition_options(self) -> TransitionOptions:
        """Build the ``TransitionOptions`` from ``transitions``.

        With ``adapters`` the trained agents are those some adapter names, by the name each
        call carried to the gateway (``names: call``): that name routed it to its adapter.
        """
        options = self.transitions
        if self.adapters is not None:
            patterns = tuple(p for agents in self.adapters.values() for p in agents)
            options = options.model_copy(update={"agents": patterns, "names": "call"})
        return options
