"""0.x's VERL configuration translated onto fulmen's GRPO, with a report of every key.

0.x trained weights with ``agl.VERL(config)``, a nested dict of VERL overrides. fulmen trains
with its own GRPO (``algorithm: grpo``). ``translate_verl_config`` walks every leaf key of such
a config and says what happens to it:

``honoured``
    fulmen does what the key says: the same setting, or a value fulmen already behaves as
    (``use_kl_in_reward: false``, ``entropy_coeff: 0``).
``translated``
    the key becomes a fulmen option by a stated rule (``rollout.n`` → ``algorithm.group_size``).
``refused``
    fulmen cannot do it. A *blocking* refusal changes what is learned (another advantage
    estimator, an entropy bonus, several updates per step): ``agl.VERL`` raises, naming it. A
    non-blocking one only concerns machinery fulmen runs itself (FSDP offload, vLLM memory,
    loggers): reported, not applied.

The report ends with notes on what differs without being a key: the sampling of every call
(``VerlTranslation.notes``).

``python -m fulmen.compat.agentlightning verl-report CONFIG.json`` prints the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fulmen.compat.agentlightning.verl_report import ACTOR as _ACTOR
from fulmen.compat.agentlightning.verl_report import MODEL as _MODEL
from fulmen.compat.agentlightning.verl_report import ROLLOUT as _ROLLOUT
from fulmen.compat.agentlightning.verl_report import VerlTranslation, Walk
from fulmen.config_file import flatten

__all__ = ["translate_verl_config"]


Rule = Callable[[Walk, str, Any], None]


def _to(fulmen: str, note: str = "", convert: Callable[[Any], Any] = lambda v: v) -> Rule:
    def rule(walk: Walk, key: str, value: Any) -> None:
        walk.add(key, "translated", note or "same value", fulmen, value=convert(value))

    return rule


def _when(expected: Any, fulmen: str | None, note: str, refusal: str) -> Rule:
    """Honoured at ``expected`` (what fulmen does); any other value is a blocking refusal."""

    def rule(walk: Walk, key: str, value: Any) -> None:
        if value == expected:
            walk.add(key, "honoured", note, fulmen)
        else:
            walk.add(key, "refused", refusal, fulmen, blocking=True)

    return rule


def _machinery(note: str) -> Rule:
    def rule(walk: Walk, key: str, value: Any) -> None:
        walk.add(key, "refused", f"not applied: {note}")

    return rule


def _adv_estimator(walk: Walk, key: str, value: Any) -> None:
    if value == "grpo":
        walk.add(key, "honoured", "fulmen trains with GRPO", "algorithm.name")
    else:
        walk.add(
            key, "refused", f"fulmen's RL algorithm is GRPO, not {value!r}; use "
            "adv_estimator: grpo (or fulmen's algorithm: dpo / sft for other methods)",
            "algorithm.name", blocking=True,
        )  # fmt: skip


def _response_length(walk: Walk, key: str, value: Any) -> None:
    walk.add(
        key, "translated", "every call's max_tokens in both modes (replacing the agent's own; "
        "see the sampling note)", "rollouts.train_sampling.max_tokens", value=int(value),
    )  # fmt: skip
    walk.result.overrides["rollouts.val_sampling.max_tokens"] = int(value)
    prompt = walk.get("data.max_prompt_length")
    if prompt is not None:
        walk.result.overrides["algorithm.grpo.max_seq_len"] = int(prompt) + int(value)


def _prompt_length(walk: Walk, key: str, value: Any) -> None:
    walk.add(
        key, "translated", "max_seq_len = max_prompt_length + max_response_length (longer "
        "sequences are dropped and counted, not truncated)", "algorithm.grpo.max_seq_len",
        value=int(value) + int(walk.get("data.max_response_length", 0) or 0),
    )  # fmt: skip


def _mini_batch(walk: Walk, key: str, value: Any) -> None:
    batch = walk.get("data.train_batch_size")
    if batch is None or int(value) >= int(batch):
        walk.add(key, "honoured", "one update per step over the whole batch", "algorithm.steps")
    else:
        walk.add(
            key, "refused", f"{value} < train_batch_size {batch} takes several updates per "
            "step; fulmen takes one (set ppo_mini_batch_size = train_batch_size, or raise "
            "algorithm.grpo.epochs)", None, blocking=True,
        )  # fmt: skip


def _micro_batch(walk: Walk, key: str, value: Any) -> None:
    length = int(walk.get("data.max_prompt_length", 0) or 0) + int(
        walk.get("data.max_response_length", 0) or 0
    )
    tokens = int(value) * length if length else 4096
    walk.add(
        key, "translated", "micro_batch_tokens = micro batch x (prompt + response length); "
        "memory only", "algorithm.grpo.micro_batch_tokens", value=tokens,
    )  # fmt: skip


def _use_kl_loss(walk: Walk, key: str, value: Any) -> None:
    coef = float(walk.get(f"{_ACTOR}.kl_loss_coef", 0.0) or 0.0)
    walk.add(
        key, "translated", "KL to the reference in the loss, weighted by kl_loss_coef"
        if value else "no KL term", "algorithm.grpo.kl_coef", value=coef if value else 0.0,
    )  # fmt: skip


def _kl_coef(walk: Walk, key: str, value: Any) -> None:
    used = bool(walk.get(f"{_ACTOR}.use_kl_loss", False))
    note = "read with use_kl_loss" if used else "unused: use_kl_loss is off (as in VERL)"
    walk.add(key, "honoured", note, "algorithm.grpo.kl_coef")


def _kl_type(walk: Walk, key: str, value: Any) -> None:
    names = {"low_var_kl": "k3", "kl": "k1", "k1": "k1", "k3": "k3"}
    if value in names:
        walk.add(
            key, "translated", f"{value} is fulmen's {names[value]} estimator",
            "algorithm.grpo.kl_estimator", value=names[value],
        )  # fmt: skip
    else:
        walk.add(key, "refused", f"fulmen has the k1 and k3 KL estimators, not {value!r}",
                 "algorithm.grpo.kl_estimator", blocking=True)  # fmt: skip


def _loss_agg(walk: Walk, key: str, value: Any) -> None:
    if value == "token-mean":
        walk.add(key, "translated", "every trained token weighs the same",
                 "algorithm.grpo.loss_normalization", value="token")  # fmt: skip
    else:
        walk.add(key, "refused", f"fulmen normalizes per token or per rollout, not {value!r}",
                 "algorithm.grpo.loss_normalization", blocking=True)  # fmt: skip


def _top_p(walk: Walk, key: str, value: Any) -> None:
    if float(value) >= 1.0:
        walk.add(key, "honoured", "no nucleus truncation", "rollouts.train_sampling")
    else:
        note = "training rollouts sample the untruncated policy GRPO corrects for; remove top_p"
        walk.add(key, "refused", note, "rollouts.train_sampling", blocking=True)


def _lora_rank(walk: Walk, key: str, value: Any) -> None:
    if int(value) > 0:
        walk.add(key, "translated", "adapter rank", "algorithm.grpo.lora.r", value=int(value))
    else:
        walk.add(key, "translated", "rank 0: all weights train", "algorithm.grpo.finetune",
                 value="full")  # fmt: skip


def _gpus(walk: Walk, key: str, value: Any) -> None:
    if int(value) == 1:
        walk.add(key, "honoured", "one process takes the update, as fulmen does by default")
        return
    walk.add(key, "refused", "not applied: fulmen runs one updater process unless "
             "algorithm.data_parallel.world_size says more (the batch, hence what is learned, "
             "is the same)")  # fmt: skip


def _logger(walk: Walk, key: str, value: Any) -> None:
    loggers = list(value) if isinstance(value, list | tuple) else [value]  # pyright: ignore[reportUnknownArgumentType]
    if "tensorboard" in loggers:
        walk.add(key, "translated", "tensorboard: true; metrics.jsonl always",
                 "tensorboard", value=True)  # fmt: skip
    else:
        walk.add(key, "refused", "not applied: fulmen writes RUN_DIR/metrics.jsonl and the "
                 "run's record in the store (wandb is not built in)")  # fmt: skip


def _total_epochs(walk: Walk, key: str, value: Any) -> None:
    walk.result.total_epochs = int(value)
    walk.add(key, "translated", "steps = total_epochs x ceil(train tasks / train_batch_size), "
             "computed when fit knows the tasks", "algorithm.steps")  # fmt: skip


_ENGINE = _machinery("the inference engine is fulmen's (engine: in the fulmen config)")
_FSDP = _machinery("fulmen's updater places weights itself (memory only)")
_LOGGING = _machinery("fulmen names runs by run_dir and writes metrics.jsonl")

_RULES: dict[str, Rule] = {
    "algorithm.adv_estimator": _adv_estimator,
    "algorithm.use_kl_in_reward": _when(
        False,
        "algorithm.grpo.kl_coef",
        "no KL penalty in the reward",
        "fulmen puts KL in the loss, not the reward: use actor.use_kl_loss / kl_loss_coef",
    ),
    "algorithm.norm_adv_by_std_in_grpo": _to("algorithm.grpo.normalize_std", convert=bool),
    "data.train_batch_size": _to(
        "algorithm.tasks_per_step", "tasks per step (each run rollout.n times)", int
    ),
    "data.max_prompt_length": _prompt_length,
    "data.max_response_length": _response_length,
    "data.truncation": _machinery("the agent builds its prompts; long sequences are dropped"),
    "data.filter_overlong_prompts": _machinery("long sequences are dropped and counted"),
    "data.train_files": _machinery("tasks come from fit(train_dataset) or data.train"),
    "data.val_files": _machinery("tasks come from fit(val_dataset) or data.val"),
    f"{_ROLLOUT}.n": _to("algorithm.group_size", "rollouts per task (the GRPO group)", int),
    f"{_ROLLOUT}.temperature": _to("rollouts.train_sampling.temperature", convert=float),
    f"{_ROLLOUT}.top_p": _top_p,
    f"{_ROLLOUT}.val_kwargs.temperature": _to("rollouts.val_sampling.temperature", convert=float),
    f"{_ACTOR}.ppo_mini_batch_size": _mini_batch,
    f"{_ACTOR}.ppo_micro_batch_size_per_gpu": _micro_batch,
    f"{_ACTOR}.ppo_micro_batch_size": _micro_batch,
    f"{_ACTOR}.ppo_epochs": _to("algorithm.grpo.epochs", convert=int),
    f"{_ACTOR}.optim.lr": _to("algorithm.grpo.learning_rate", convert=float),
    f"{_ACTOR}.optim.weight_decay": _to("algorithm.grpo.weight_decay", convert=float),
    f"{_ACTOR}.optim.lr_warmup_steps_ratio": _when(
        0,
        None,
        "no warm-up: the learning rate is constant, as fulmen's",
        "fulmen's learning rate is constant from the first step: remove the warm-up "
        "(lr_warmup_steps_ratio: 0)",
    ),
    f"{_ACTOR}.optim.lr_warmup_steps": _when(
        -1,
        None,
        "no warm-up steps (VERL's default)",
        "fulmen's learning rate is constant from the first step: remove lr_warmup_steps",
    ),
    f"{_ACTOR}.grad_clip": _to("algorithm.grpo.max_grad_norm", convert=float),
    f"{_ACTOR}.use_kl_loss": _use_kl_loss,
    f"{_ACTOR}.kl_loss_coef": _kl_coef,
    f"{_ACTOR}.kl_loss_type": _kl_type,
    f"{_ACTOR}.entropy_coeff": _when(
        0, None, "no entropy bonus", "fulmen's GRPO loss has no entropy bonus; set 0"
    ),
    f"{_ACTOR}.clip_ratio_low": _to("algorithm.grpo.clip_low", convert=float),
    f"{_ACTOR}.clip_ratio_high": _to("algorithm.grpo.clip_high", convert=float),
    f"{_ACTOR}.loss_agg_mode": _loss_agg,
    f"{_MODEL}.path": _to("model", "the model fulmen loads (a local directory or a name)"),
    f"{_MODEL}.enable_gradient_checkpointing": _to(
        "algorithm.grpo.gradient_checkpointing", convert=bool
    ),
    f"{_MODEL}.lora_rank": _lora_rank,
    f"{_MODEL}.lora_alpha": _to("algorithm.grpo.lora.alpha", convert=float),
    f"{_MODEL}.use_remove_padding": _FSDP,
    "trainer.total_epochs": _total_epochs,
    "trainer.total_training_steps": _to("algorithm.steps", convert=int),
    "trainer.test_freq": _to("validation.every", "validate every this many steps", int),
    "trainer.save_freq": _to("algorithm.checkpoint_every", convert=int),
    "trainer.val_before_train": _when(
        True,
        "validation",
        "fulmen validates before training",
        "fulmen always validates before training when validation is set",
    ),
    "trainer.critic_warmup": _when(0, None, "GRPO has no critic", "GRPO has no critic; set 0"),
    "trainer.n_gpus_per_node": _gpus,
    "trainer.nnodes": _gpus,
    "trainer.logger": _logger,
    "trainer.project_name": _LOGGING,
    "trainer.experiment_name": _LOGGING,
    "trainer.default_local_dir": _to(
        "run_dir",
        "the run's directory (checkpoints, store, metrics); a second run resumes "
        "from it, as VERL's resume_mode auto did",
    ),
    "agentlightning.port": _machinery("fulmen's gateway picks its own port"),
}

# Whole VERL sections that only place or size the machinery.
_PREFIXES: dict[str, Rule] = {
    f"{_ROLLOUT}.": _ENGINE,
    f"{_ACTOR}.fsdp_config.": _FSDP,
    "actor_rollout_ref.ref.": _machinery("the reference is the base model without the adapter"),
    "critic.": _machinery("GRPO trains no critic"),
}


def _sampling_note(overrides: dict[str, Any]) -> str:
    """Say how the gateway samples each mode's calls, which VERL left to the agent's requests."""

    def fields(mode: str, temperature: float) -> str:
        shown = {"temperature": overrides.get(f"rollouts.{mode}_sampling.temperature", temperature)}
        tokens = overrides.get(f"rollouts.{mode}_sampling.max_tokens")
        if tokens is not None:
            shown["max_tokens"] = tokens
        return ", ".join(f"{k} {v}" for k, v in shown.items())

    return (
        "sampling: the gateway sends every training call with rollouts.train_sampling "
        f"({fields('train', 1.0)}) and every validation call with rollouts.val_sampling "
        f"({fields('val', 0.0)}), in place of the values the agent puts on its own calls; "
        "VERL's vLLM server used the agent's own temperature and max_tokens. Set "
        "rollouts.*_sampling in the fulmen config to change them"
    )


def translate_verl_config(config: Mapping[str, Any]) -> VerlTranslation:
    """Report every leaf key of a 0.x VERL config and collect the fulmen options it sets.

    A key the layer does not know is refused as blocking: its effect cannot be vouched for.
    """
    flat = flatten(config)
    walk = Walk(flat)
    for key, value in flat.items():
        rule = _RULES.get(key)
        if rule is None:
            rule = next((r for p, r in _PREFIXES.items() if key.startswith(p)), None)
        if rule is None:
            walk.add(key, "refused", "unknown to the compat layer: remove it, or set the "
                     "fulmen option it stands for in the fulmen config", blocking=True)  # fmt: skip
            continue
        rule(walk, key, value)
    walk.result.notes.append(_sampling_note(walk.result.overrides))
    if walk.get(f"{_MODEL}.lora_rank") is None and f"{_MODEL}.path" in flat:
        # VERL without lora_rank trains every weight; fulmen's default is an adapter.
        walk.result.overrides["algorithm.grpo.finetune"] = "full"
        for entry in walk.result.entries:
            if entry.key == f"{_MODEL}.path":
                entry.note += "; no lora_rank, so algorithm.grpo.finetune: full (as VERL)"
    return walk.result
