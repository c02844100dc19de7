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

``python -m fulmen.compat.agentlightning verl-report CONFIG.json`` prints the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

__all__ = ["KeyReport", "VerlTranslation", "flatten", "translate_verl_config"]

Status = Literal["honoured", "translated", "refused"]

_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
_MODEL = "actor_rollout_ref.model"


class KeyReport(BaseModel):
    """What happens to one VERL key.

    Attributes:
        key: the dotted VERL key (``actor_rollout_ref.actor.optim.lr``).
        value: its value in the config.
        status: ``honoured``, ``translated`` or ``refused``.
        fulmen: the fulmen option it sets or matches, if any.
        note: the rule, or why it is refused and what to do instead.
        blocking: a refusal that changes what is learned (``agl.VERL`` raises).
    """

    key: str
    value: JsonValue
    status: Status
    fulmen: str | None = None
    note: str = ""
    blocking: bool = False


class VerlTranslation(BaseModel):
    """Return the report of a whole config and the fulmen options it yields.

    Attributes:
        entries: one report per leaf key, in the config's order.
        overrides: fulmen config path → value (``algorithm.grpo.learning_rate``).
        total_epochs: ``trainer.total_epochs``, turned into ``algorithm.steps`` once the
            number of training tasks is known (``steps_for``).
    """

    entries: list[KeyReport] = Field(default_factory=list)
    overrides: dict[str, Any] = Field(default_factory=dict)
    total_epochs: int | None = None

    def blocking(self) -> list[KeyReport]:
        """Return the refusals that change what is learned."""
        return [e for e in self.entries if e.blocking]

    def counts(self) -> dict[str, int]:
        """How many keys are honoured, translated and refused."""
        out = {"honoured": 0, "translated": 0, "refused": 0}
        for entry in self.entries:
            out[entry.status] += 1
        return out

    def steps_for(self, train_tasks: int) -> int | None:
        """``algorithm.steps`` for ``total_epochs`` passes over ``train_tasks`` tasks."""
        if self.total_epochs is None:
            return None
        per_step = int(self.overrides.get("algorithm.tasks_per_step", 4))
        return self.total_epochs * max(1, math.ceil(train_tasks / per_step))

    def render(self) -> str:
        """Return the report as a fixed-width table, one line per key, then the counts."""
        width = max((len(e.key) for e in self.entries), default=10)
        lines = [f"{'VERL key':<{width}}  {'status':<10}  fulmen / note"]
        for e in self.entries:
            status = "REFUSED!" if e.blocking else e.status
            target = f"{e.fulmen}: " if e.fulmen else ""
            lines.append(f"{e.key:<{width}}  {status:<10}  {target}{e.note}")
        counts = self.counts()
        lines.append(
            f"{counts['honoured']} honoured, {counts['translated']} translated, "
            f"{counts['refused']} refused ({len(self.blocking())} blocking)"
        )
        return "\n".join(lines)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts → ``{"a.b.c": leaf}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{path}."))  # pyright: ignore[reportUnknownArgumentType]
        else:
            out[path] = value
    return out


class _Walk:
    """Collects entries and overrides while the rules look at the flattened config."""

    def __init__(self, flat: dict[str, Any]) -> None:
        self.flat = flat
        self.result = VerlTranslation()

    def add(
        self,
        key: str,
        status: Status,
        note: str,
        fulmen: str | None = None,
        *,
        value: Any = None,
        blocking: bool = False,
    ) -> None:
        if fulmen is not None and status == "translated" and value is not None:
            self.result.overrides[fulmen] = value
        self.result.entries.append(
            KeyReport(
                key=key,
                value=_json(self.flat[key]),
                status=status,
                fulmen=fulmen,
                note=note,
                blocking=blocking,
            )
        )

    def get(self, key: str, default: Any = None) -> Any:
        return self.flat.get(key, default)


def _json(value: Any) -> JsonValue:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return str(value)


Rule = Callable[[_Walk, str, Any], None]


def _to(fulmen: str, note: str = "", convert: Callable[[Any], Any] = lambda v: v) -> Rule:
    def rule(walk: _Walk, key: str, value: Any) -> None:
        walk.add(key, "translated", note or "same value", fulmen, value=convert(value))

    return rule


def _when(expected: Any, fulmen: str | None, note: str, refusal: str) -> Rule:
    """Honoured at ``expected`` (what fulmen does); any other value is a blocking refusal."""

    def rule(walk: _Walk, key: str, value: Any) -> None:
        if value == expected:
            walk.add(key, "honoured", note, fulmen)
        else:
            walk.add(key, "refused", refusal, fulmen, blocking=True)

    return rule


def _machinery(note: str) -> Rule:
    def rule(walk: _Walk, key: str, value: Any) -> None:
        walk.add(key, "refused", f"not applied: {note}")

    return rule


def _adv_estimator(walk: _Walk, key: str, value: Any) -> None:
    if value == "grpo":
        walk.add(key, "honoured", "fulmen trains with GRPO", "algorithm.name")
    else:
        walk.add(
            key, "refused", f"fulmen's RL algorithm is GRPO, not {value!r}; use "
            "adv_estimator: grpo (or fulmen's algorithm: dpo / sft for other methods)",
            "algorithm.name", blocking=True,
        )  # fmt: skip


def _response_length(walk: _Walk, key: str, value: Any) -> None:
    walk.add(
        key, "translated", "the rollouts' token budget in both modes",
        "rollouts.train_sampling.max_tokens", value=int(value),
    )  # fmt: skip
    walk.result.overrides["rollouts.val_sampling.max_tokens"] = int(value)
    prompt = walk.get("data.max_prompt_length")
    if prompt is not None:
        walk.result.overrides["algorithm.grpo.max_seq_len"] = int(prompt) + int(value)


def _prompt_length(walk: _Walk, key: str, value: Any) -> None:
    walk.add(
        key, "translated", "max_seq_len = max_prompt_length + max_response_length (longer "
        "sequences are dropped and counted, not truncated)", "algorithm.grpo.max_seq_len",
        value=int(value) + int(walk.get("data.max_response_length", 0) or 0),
    )  # fmt: skip


def _mini_batch(walk: _Walk, key: str, value: Any) -> None:
    batch = walk.get("data.train_batch_size")
    if batch is None or int(value) >= int(batch):
        walk.add(key, "honoured", "one update per step over the whole batch", "algorithm.steps")
    else:
        walk.add(
            key, "refused", f"{value} < train_batch_size {batch} takes several updates per "
            "step; fulmen takes one (set ppo_mini_batch_size = train_batch_size, or raise "
            "algorithm.grpo.epochs)", None, blocking=True,
        )  # fmt: skip


def _micro_batch(walk: _Walk, key: str, value: Any) -> None:
    length = int(walk.get("data.max_prompt_length", 0) or 0) + int(
        walk.get("data.max_response_length", 0) or 0
    )
    tokens = int(value) * length if length else 4096
    walk.add(
        key, "translated", "micro_batch_tokens = micro batch x (prompt + response length); "
        "memory only", "algorithm.grpo.micro_batch_tokens", value=tokens,
    )  # fmt: skip


def _use_kl_loss(walk: _Walk, key: str, value: Any) -> None:
    coef = float(walk.get(f"{_ACTOR}.kl_loss_coef", 0.0) or 0.0)
    walk.add(
        key, "translated", "KL to the reference in the loss, weighted by kl_loss_coef"
        if value else "no KL term", "algorithm.grpo.kl_coef", value=coef if value else 0.0,
    )  # fmt: skip


def _kl_coef(walk: _Walk, key: str, value: Any) -> None:
    used = bool(walk.get(f"{_ACTOR}.use_kl_loss", False))
    note = "read with use_kl_loss" if used else "unused: use_kl_loss is off (as in VERL)"
    walk.add(key, "honoured", note, "algorithm.grpo.kl_coef")


def _kl_type(walk: _Walk, key: str, value: Any) -> None:
    names = {"low_var_kl": "k3", "kl": "k1", "k1": "k1", "k3": "k3"}
    if value in names:
        walk.add(
            key, "translated", f"{value} is fulmen's {names[value]} estimator",
            "algorithm.grpo.kl_estimator", value=names[value],
        )  # fmt: skip
    else:
        walk.add(key, "refused", f"fulmen has the k1 and k3 KL estimators, not {value!r}",
                 "algorithm.grpo.kl_estimator", blocking=True)  # fmt: skip


def _loss_agg(walk: _Walk, key: str, value: Any) -> None:
    if value == "token-mean":
        walk.add(key, "translated", "every trained token weighs the same",
                 "algorithm.grpo.loss_normalization", value="token")  # fmt: skip
    else:
        walk.add(key, "refused", f"fulmen normalizes per token or per rollout, not {value!r}",
                 "algorithm.grpo.loss_normalization", blocking=True)  # fmt: skip


def _top_p(walk: _Walk, key: str, value: Any) -> None:
    if float(value) >= 1.0:
        walk.add(key, "honoured", "no nucleus truncation", "rollouts.train_sampling")
    else:
        note = "training rollouts sample the untruncated policy GRPO corrects for; remove top_p"
        walk.add(key, "refused", note, "rollouts.train_sampling", blocking=True)


def _lora_rank(walk: _Walk, key: str, value: Any) -> None:
    if int(value) > 0:
        walk.add(key, "translated", "adapter rank", "algorithm.grpo.lora.r", value=int(value))
    else:
        walk.add(key, "translated", "rank 0: all weights train", "algorithm.grpo.finetune",
                 value="full")  # fmt: skip


def _gpus(walk: _Walk, key: str, value: Any) -> None:
    if int(value) == 1:
        walk.add(key, "honoured", "one process takes the update, as fulmen does by default")
        return
    walk.add(key, "refused", "not applied: fulmen runs one updater process unless "
             "algorithm.data_parallel.world_size says more (the batch, hence what is learned, "
             "is the same)")  # fmt: skip


def _logger(walk: _Walk, key: str, value: Any) -> None:
    loggers = list(value) if isinstance(value, list | tuple) else [value]  # pyright: ignore[reportUnknownArgumentType]
    if "tensorboard" in loggers:
        walk.add(key, "translated", "tensorboard: true; metrics.jsonl always",
                 "tensorboard", value=True)  # fmt: skip
    else:
        walk.add(key, "refused", "not applied: fulmen writes RUN_DIR/metrics.jsonl and the "
                 "run's record in the store (wandb is not built in)")  # fmt: skip


def _total_epochs(walk: _Walk, key: str, value: Any) -> None:
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
    "trainer.default_local_dir": _machinery("checkpoints go under run_dir"),
    "agentlightning.port": _machinery("fulmen's gateway picks its own port"),
}

# Whole VERL sections that only place or size the machinery.
_PREFIXES: dict[str, Rule] = {
    f"{_ROLLOUT}.": _ENGINE,
    f"{_ACTOR}.fsdp_config.": _FSDP,
    "actor_rollout_ref.ref.": _machinery("the reference is the base model without the adapter"),
    "critic.": _machinery("GRPO trains no critic"),
}


def translate_verl_config(config: Mapping[str, Any]) -> VerlTranslation:
    """Report every leaf key of a 0.x VERL config and collect the fulmen options it sets.

    A key the layer does not know is refused as blocking: its effect cannot be vouched for.
    """
    flat = flatten(config)
    walk = _Walk(flat)
    for key, value in flat.items():
        rule = _RULES.get(key)
        if rule is None:
            rule = next((r for p, r in _PREFIXES.items() if key.startswith(p)), None)
        if rule is None:
            walk.add(key, "refused", "unknown to the compat layer: remove it, or set the "
                     "fulmen option it stands for in the fulmen config", blocking=True)  # fmt: skip
            continue
        rule(walk, key, value)
    if walk.get(f"{_MODEL}.lora_rank") is None and f"{_MODEL}.path" in flat:
        # VERL without lora_rank trains every weight; fulmen's default is an adapter.
        walk.result.overrides["algorithm.grpo.finetune"] = "full"
        for entry in walk.result.entries:
            if entry.key == f"{_MODEL}.path":
                entry.note += "; no lora_rank, so algorithm.grpo.finetune: full (as VERL)"
    return walk.result
