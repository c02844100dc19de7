"""A/B testing two prompt versions on the same tasks through the normal runner path.

``run_ab`` publishes two resources versions that differ only in the prompt (the run's ``llm``
plus prompt A, or plus prompt B), runs every task once on each as a validation rollout
(``fulmen.prompts.run_tasks``: enqueued in the store, claimed by the stack's runner, rewards
read back from the store) and compares the rewards task by task
(``fulmen.debugging.stats.compare_paired``). A rollout that fails counts as reward 0.0, as in
prompt scoring, and is counted in the result. Validation sampling (greedy by default) makes a
task's reward depend on the prompt alone.

A prompt is named by a file (``.json`` or ``.yaml``: a ``PromptTemplate``'s fields), by
``module:attribute`` (a ``PromptTemplate`` an agent ships) or by a prompt version in a store
(``NAME``, ``VERSION`` or ``NAME@VERSION``, as ``fulmen prompts`` names them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fulmen.debugging.stats import PairedComparison, compare_paired
from fulmen.errors import ConfigError
from fulmen.types import PromptTemplate

if TYPE_CHECKING:
    from fulmen.agent.rollouts import RolloutSettings
    from fulmen.prompts import PromptVersion
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.stack import TrainingStack
    from fulmen.types import LLMResource, Resource

__all__ = [
    "ABResult",
    "ab_from_config",
    "config_stack",
    "llm_resource",
    "format_ab",
    "is_store_ref",
    "load_prompt_file",
    "resolve_prompt",
    "run_ab",
    "run_sides",
]


@dataclass(frozen=True)
class ABResult:
    """Both prompts' rewards on the same tasks and their paired comparison (``B - A``).

    Attributes:
        labels: how A and B were named.
        task_ids: the tasks, in order; ``rewards_a[i]`` and ``rewards_b[i]`` are task ``i``'s.
        failed_a / failed_b: rollouts that failed (counted as 0.0).
        comparison: means, difference, confidence interval and tests.
    """

    labels: tuple[str, str]
    task_ids: tuple[str, ...]
    rewards_a: tuple[float, ...]
    rewards_b: tuple[float, ...]
    failed_a: int
    failed_b: int
    comparison: PairedComparison


def is_store_ref(ref: str) -> bool:
    """Tell whether ``ref`` names a prompt version in a store (not a file, not an import)."""
    return not Path(ref).is_file() and ":" not in ref


def load_prompt_file(path: Path) -> PromptTemplate:
    """Read a ``PromptTemplate`` from a ``.json`` or ``.yaml`` file; ``ConfigError`` names it."""
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(path.read_text())  # YAML reads JSON too
        return PromptTemplate.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"cannot read a prompt from {path}: {exc}") from exc


def resolve_prompt(ref: str, versions: Sequence[PromptVersion] = ()) -> PromptTemplate:
    """Return the prompt ``ref`` names (see the module docstring); store refs need ``versions``."""
    from fulmen.prompts import find_prompt_version, import_prompt

    if Path(ref).is_file():
        return load_prompt_file(Path(ref))
    if ":" in ref:
        return import_prompt(ref, option="--prompt")
    return find_prompt_version(versions, ref).prompt


async def run_ab(
    stack: TrainingStack,
    prompts: tuple[PromptTemplate, PromptTemplate],
    tasks: Sequence[tuple[str, Any]],
    *,
    labels: tuple[str, str],
    model: str,
    rollouts: RolloutSettings,
    name: str = "prompt",
    id_prefix: str = "ab",
) -> ABResult:
    """Run ``tasks`` with prompt A and with prompt B on ``stack`` and compare them pairwise.

    Args:
        stack: a started stack (store, engine, gateway, runner).
        prompts: prompt A and prompt B.
        tasks: ``(task_id, task)`` pairs; at least two.
        labels: how to name A and B in the report.
        model: the model name the ``llm`` resource asks for.
        rollouts: the run's sampling and timeout settings.
        name: the resource name the agent receives the prompt by.
        id_prefix: rollout ids are ``{id_prefix}-a-t{i}`` and ``{id_prefix}-b-t{i}``.
    """
    if name == "llm":
        raise ConfigError("--name 'llm' is the model resource; name the prompt otherwise")
    llm = llm_resource(stack, model, rollouts)
    sides = ({"llm": llm, name: prompts[0]}, {"llm": llm, name: prompts[1]})
    return await run_sides(
        stack, sides, tasks, labels=labels, rollouts=rollouts, id_prefix=id_prefix
    )


def llm_resource(stack: TrainingStack, model: str, rollouts: RolloutSettings) -> LLMResource:
    """Return an A/B side's ``llm``: ``model`` on the stack's engine, the run's sampling."""
    from fulmen.types import LLMResource

    return LLMResource(
        base_url=stack.engine_url,
        model=model,
        sampling={"default": rollouts.val_sampling, "train": rollouts.train_sampling},
    )


async def run_sides(
    stack: TrainingStack,
    sides: tuple[Mapping[str, Resource], Mapping[str, Resource]],
    tasks: Sequence[tuple[str, Any]],
    *,
    labels: tuple[str, str],
    rollouts: RolloutSettings,
    id_prefix: str = "ab",
) -> ABResult:
    """Run ``tasks`` once with each side's resources as validation rollouts; compare pairwise.

    The sides differ in what is compared: a prompt (``run_ab``), or the model the ``llm``
    resource names (two model versions, ``fulmen.debugging.models_ab``).
    """
    from fulmen.prompts import run_tasks
    from fulmen.types import Mode, ResourcesCreate, RolloutConfig, RolloutStatus

    if len(tasks) < 2:
        raise ConfigError(f"an A/B test needs at least 2 tasks, got {len(tasks)}")
    versions = [
        (await stack.store.add_resources(ResourcesCreate(resources=dict(side)))).version
        for side in sides
    ]
    config = RolloutConfig(timeout_s=rollouts.timeout_s, max_attempts=rollouts.max_attempts)
    # Every attempt of both sides, run ``concurrency`` at a time, each within its timeout.
    waves = -(-2 * len(tasks) * rollouts.max_attempts // rollouts.concurrency)
    wait_s = waves * rollouts.timeout_s + 60
    outcome_a, outcome_b = await asyncio.gather(
        *(
            run_tasks(
                stack.store,
                tasks,
                version=version,
                mode=Mode.VAL,
                id_prefix=f"{id_prefix}-{side}",
                config=config,
                timeout_s=wait_s,
                on_wait=stack.check_runner,
            )
            for version, side in zip(versions, "ab", strict=True)
        )
    )
    rewards_a = tuple(o.reward for o in outcome_a)
    rewards_b = tuple(o.reward for o in outcome_b)
    return ABResult(
        labels=labels,
        task_ids=tuple(task_id for task_id, _ in tasks),
        rewards_a=rewards_a,
        rewards_b=rewards_b,
        failed_a=sum(o.rollout.status is not RolloutStatus.SUCCEEDED for o in outcome_a),
        failed_b=sum(o.rollout.status is not RolloutStatus.SUCCEEDED for o in outcome_b),
        comparison=compare_paired(rewards_a, rewards_b),
    )


async def ab_from_config(
    config: TrainConfig,
    prompts: tuple[PromptTemplate, PromptTemplate],
    *,
    labels: tuple[str, str],
    n: int,
    split: str = "val",
    name: str = "prompt",
) -> ABResult:
    """Run an A/B test of ``prompts`` on the first ``n`` tasks of a training config.

    Starts the config's engine (or uses its endpoint), a gateway and a runner of its agent
    around a private in-memory store, as ``fulmen dev`` does; ``split`` picks the validation
    tasks (``val``, the default, falling back to the training tasks when there are none) or
    the training tasks (``train``).
    """
    stack, tasks = config_stack(config, n=n, split=split, log_dir="ab")
    async with stack:
        return await run_ab(
            stack,
            prompts,
            tasks,
            labels=labels,
            model=config.model,
            rollouts=config.rollouts,
            name=name,
        )


def config_stack(
    config: TrainConfig, *, n: int, split: str, log_dir: str
) -> tuple[TrainingStack, list[tuple[str, Any]]]:
    """Return a stack for ``config``'s agent (not started) and the first ``n`` ``split`` tasks."""
    from fulmen.importing import put_first_on_sys_path
    from fulmen.trainer.data import config_tasks, task_id_of
    from fulmen.trainer.preflight import check_before_start
    from fulmen.trainer.stack import TrainingStack

    put_first_on_sys_path(config.python_path)
    check_before_start(config.agent, config.python_path)
    val, train = config.data.val, config.data.train
    which: Literal["train", "val"] = "val" if split == "val" and val is not None else "train"
    source = val if which == "val" else train
    if source is None:
        raise ConfigError("the config names no tasks (data.train / data.val) to A/B test on")
    chosen = config_tasks(config, source, which)[:n]
    tasks = [(task_id_of(t, i, config.data.task_id_key), t) for i, t in enumerate(chosen)]
    stack = TrainingStack(
        store_url="memory://",
        agent=config.agent,
        model=config.model,
        engine=config.engine,
        rollouts=config.rollouts,
        log_dir=Path(config.run_dir) / log_dir,
    )
    return stack, tasks


def format_ab(result: ABResult, *, alpha: float = 0.05) -> str:
    """Return the report as text; the verdict uses the permutation test at level ``alpha``."""
    c = result.comparison
    a, b = result.labels
    t_text = (
        "undefined (the differences do not vary)"
        if c.t_p is None or c.t_statistic is None
        else f"t = {c.t_statistic:.3f} ({c.n - 1} df), p = {c.t_p:.4g}"
    )
    kind = "exact" if c.permutation_exact else "Monte Carlo"
    if c.permutation_p < alpha and c.mean_difference != 0:
        better = "better" if c.mean_difference > 0 else "worse"
        verdict = f"B is {better} than A (permutation p < {alpha})"
    else:
        verdict = f"no significant difference at {alpha}"
    return "\n".join(
        [
            f"A/B on {c.n} tasks (each task once per prompt, validation sampling)",
            f"  A {a}: mean reward {c.mean_a:.4f} ({result.failed_a} rollouts failed)",
            f"  B {b}: mean reward {c.mean_b:.4f} ({result.failed_b} rollouts failed)",
            f"  difference B - A: {c.mean_difference:+.4f}, "
            f"95% CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}]",
            f"  paired t-test: {t_text}",
            f"  sign test: B higher on {c.wins}, lower on {c.losses}, tied on {c.ties} tasks; "
            f"exact p = {c.sign_p:.4g}",
            f"  permutation test ({kind}, sign flips): p = {c.permutation_p:.4g}",
            f"  verdict: {verdict}",
        ]
    )
