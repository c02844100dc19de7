"""verifiers (``verifiers.v1``): its environments run their own rollout loop against the gateway.

A task is one verifiers task: the ``[env]`` settings it came from and its ``TaskData`` as JSON
(the wire form verifiers itself ships to its env servers). ``VerifiersAgent`` loads the
environment once per settings, rebuilds the task and runs one episode
(``Env.run_episode``) inside ``Env.serving()``, with the model client (``ModelContext``)
pointed at the rollout's gateway URL: the harness program talks to verifiers' interception
server, which forwards every model call to the gateway, where it is recorded at token level.
Each rubric function (``@vf.reward``) becomes a named reward, and the rubric's weighted sum
(``Trace.reward``) is the primary one.

What cannot be honoured here is refused with the reason before anything starts: a runtime or
harness that needs a container runtime or a remote sandbox, a role that pins its own model or
client (its calls would bypass the gateway), a harness that runs model-written code
unsandboxed on this machine unless the config allows it. verifiers reads its endpoint key from
a process-wide environment variable, so the rollout's own key travels as ``x-api-key``.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import TYPE_CHECKING, Any, cast

from fulmen.agent.api import Agent
from fulmen.environments.libraries import require
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.agent.context import LLM
    from fulmen.environments.config import VerifiersConfig

__all__ = ["VerifiersAgent", "episode_rewards", "verifiers_tasks"]

#: An environment variable verifiers reads the (unneeded) endpoint key from: never set.
_NO_KEY_VARIABLE = "FULMEN_VERIFIERS_NO_KEY"


def _env_settings(config: VerifiersConfig, split: str) -> dict[str, Any]:
    """Return the ``[env]`` mapping of ``split`` (the agent's runtime: ``subprocess``)."""
    env = json.loads(json.dumps(config.env))
    if split == "val" and config.val_taskset is not None:
        env["taskset"] = {**env["taskset"], **config.val_taskset}
    agent = env.setdefault("agent", {})
    if isinstance(agent, dict):
        cast("dict[str, Any]", agent).setdefault("runtime", {"type": "subprocess"})
    return env


def _load_env(settings: dict[str, Any], *, allow_unsandboxed_code: bool) -> Any:
    """Load the verifiers environment of ``settings``; refuse what cannot be honoured here."""
    loaders = require("verifiers.v1.utils.loaders", extra="verifiers")
    try:
        resolved = loaders.resolve_env_config(settings)
        env = loaders.load_environment(resolved)
    except ConfigError:
        raise
    except Exception as exc:  # verifiers' own validation and plugin loading
        raise ConfigError(f"verifiers cannot load env {settings}: {exc}") from exc
    _refuse_unhonourable(env, allow_unsandboxed_code=allow_unsandboxed_code)
    return env


def _refuse_unhonourable(env: Any, *, allow_unsandboxed_code: bool) -> None:
    """``ConfigError`` with the reason for a role this integration cannot run as asked."""
    runtimes = require("verifiers.v1.runtimes", extra="verifiers")
    agent_fields = require("verifiers.v1.configs.agent", extra="verifiers").agent_config_fields
    task_cls = type(env.taskset).task_type()
    if getattr(task_cls, "NEEDS_CONTAINER", False):
        raise ConfigError(
            f"verifiers task {task_cls.__name__} needs a container (NEEDS_CONTAINER), and no "
            "container runtime runs here"
        )
    for name, spec in agent_fields(env.config).items():
        runtime = spec.runtime
        if not isinstance(runtime, runtimes.SubprocessConfig):
            raise ConfigError(
                f"verifiers role {name!r} runtime {runtime.type!r} needs a container runtime "
                "or a remote sandbox; only runtime: {type: subprocess} runs here"
            )
        if spec.client is not None or spec.model is not None:
            raise ConfigError(
                f"verifiers role {name!r} pins its own model or client: its calls would not "
                "reach the rollout's gateway, so they could be neither recorded nor trained"
            )
        harness = env._harnesses[name]  # the loaded harness of each role (verifiers' own)
        if getattr(harness, "NEEDS_CONTAINER", False):
            raise ConfigError(
                f"verifiers harness {harness.config.id!r} of role {name!r} needs a container"
            )
        if getattr(harness, "EXECUTES_CODE", False) and not allow_unsandboxed_code:
            raise ConfigError(
                f"verifiers harness {harness.config.id!r} of role {name!r} runs the model's "
                "commands unsandboxed on this machine (runtime subprocess); pick a chat harness "
                "(agent: {harness: {id: null}}) or set environment.allow_unsandboxed_code: true"
            )


def verifiers_tasks(config: VerifiersConfig, split: str) -> list[dict[str, Any]]:
    """Return the tasks of ``split``: ``val_size`` held out first, then ``train_size``.

    With ``val_taskset`` the held-out tasks come from that taskset instead, and a training task
    whose key (verifiers' ``Task.key``) is a held-out one is skipped: the splits never overlap.
    """
    allow = config.allow_unsandboxed_code
    val_settings = _env_settings(config, "val")
    val_env = _load_env(val_settings, allow_unsandboxed_code=allow)
    val = _take(_ordered(val_env.taskset, config), 0, config.val_size, set(), "val")
    if split == "val":
        return [_task(val_settings, t, f"val-{i}") for i, t in enumerate(val)]
    held_out = {t.key for t in val}
    if config.val_taskset is None:
        train_settings, train_env, skip = val_settings, val_env, config.val_size
    else:
        train_settings = _env_settings(config, "train")
        train_env = _load_env(train_settings, allow_unsandboxed_code=allow)
        skip = 0
    train = _take(_ordered(train_env.taskset, config), skip, config.train_size, held_out, "train")
    return [_task(train_settings, t, f"train-{i}") for i, t in enumerate(train)]


def _ordered(taskset: Any, config: VerifiersConfig) -> Any:
    if not config.shuffle:
        return taskset
    if not taskset.bounded:
        raise ConfigError("verifiers.shuffle: this taskset is infinite and cannot be shuffled")
    return taskset.shuffle(seed=config.seed)


def _take(taskset: Any, skip: int, want: int, exclude: set[str], split: str) -> list[Any]:
    found: list[Any] = []
    for position, task in enumerate(taskset):
        if len(found) == want:
            break
        if position < skip or task.key in exclude:
            continue
        exclude.add(task.key)
        found.append(task)
    if len(found) < want:
        raise ConfigError(
            f"verifiers taskset gave {len(found)} {split} tasks of the {want} asked "
            "(lower train_size/val_size)"
        )
    return found


def _task(settings: dict[str, Any], task: Any, task_id: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "verifiers": {
            "env": settings,
            "key": task.key,
            "data": task.data.model_dump(mode="json", exclude_none=True),
        },
    }


def episode_rewards(episode: Any) -> dict[str, float]:
    """Named rewards of a finished episode: each rubric function's score, and ``reward``.

    ``reward`` (the primary) is the rubric's weighted sum (``Trace.reward``), averaged over
    the episode's traces when several roles played; with several roles each score is named
    ``role/function``.
    """
    traces = list(episode.traces)
    if not traces:
        raise ConfigError("the verifiers episode ran no agent")
    several = len(traces) > 1
    named: dict[str, float] = {}
    for trace in traces:
        prefix = f"{trace.agent.name or 'agent'}/" if several else ""
        for name, reward in trace.rewards.items():
            if reward is not None:
                key = f"{prefix}{name}"
                named[f"rubric/{key}" if key == "reward" else key] = float(reward.score)
    named["reward"] = sum(float(t.reward) for t in traces) / len(traces)
    return named


class VerifiersAgent(Agent):
    """The built-in verifiers agent: one verifiers episode per rollout."""

    def __init__(self) -> None:
        # Loaded environments by event loop, then by settings: a verifiers env holds asyncio
        # locks bound to the loop that first used them, and the runner may run rollouts on
        # several loops (its loop threads).
        self._envs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    def _env(self, settings: dict[str, Any]) -> Any:
        envs = self._envs.setdefault(asyncio.get_running_loop(), {})
        key = json.dumps(settings, sort_keys=True)
        if key not in envs:
            # Refusals were checked when the tasks were made; unsandboxed code then too.
            envs[key] = _load_env(settings, allow_unsandboxed_code=True)
        return envs[key]

    async def training_rollout(self, task: dict[str, Any], llm: LLM) -> dict[str, float]:  # type: ignore[override]  # by name
        """Run the task's episode with the rollout's gateway as the model endpoint."""
        vf = require("verifiers.v1", extra="verifiers")
        spec = cast("dict[str, Any]", task["verifiers"])
        env = self._env(cast("dict[str, Any]", spec["env"]))
        task_cls = type(env.taskset).task_type()
        data = task_cls.data_type().model_validate(spec["data"])
        vf_task = task_cls(data, env.taskset.config.task)
        # verifiers sends its endpoint key (read from a process-wide variable) as the bearer;
        # the rollout's own key goes as x-api-key, which the gateway also reads.
        client = vf.EvalClientConfig(
            base_url=llm.base_url, api_key_var=_NO_KEY_VARIABLE, headers={"x-api-key": llm.api_key}
        )
        context = vf.ModelContext(model=llm.model, client=client)
        async with env.serving():
            episode = await env.run_episode(vf_task, context)
        if not episode.ok:
            errors = [e.message for e in episode.errors] + [
                e.message for t in episode.traces for e in t.errors
            ]
            raise RuntimeError(f"the verifiers episode failed: {'; '.join(errors)[:2000]}")
        return episode_rewards(episode)
