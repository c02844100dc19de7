"""OpenEnv: an environment server stepped by the model, its rewards as per-call rewards.

A task is one episode: where the server is (a URL, or a command started for the rollout as a
local process on a free loopback port), the ``reset`` arguments with the episode's seed, and
how a reply becomes an action. ``OpenEnvAgent`` connects with OpenEnv's own client
(``GenericEnvClient``, a WebSocket session with its own environment instance), resets, and
then for each step: the observation is the next user message of one growing chat, the model's
reply is the action, and the step's reward is emitted for that call (``emit_reward`` with the
call's response id), so ``credit: per_call`` and PPO's critic see each step's reward. The
rollout's return is the sum of the rewards.

The held-out split uses other episode seeds than the training split.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, cast

from fulmen.agent.api import Agent
from fulmen.environments.chat import chat_client, send_chat
from fulmen.environments.libraries import require
from fulmen.errors import ConfigError
from fulmen.process_group import listens_on, stop_process_group
from fulmen.tls import tls_context
from fulmen.tracing.emitters import emit_reward

if TYPE_CHECKING:
    from fulmen.agent.context import LLM
    from fulmen.environments.config import OpenEnvConfig

__all__ = ["OpenEnvAgent", "local_server", "observation_text", "openenv_tasks"]


def openenv_tasks(config: OpenEnvConfig, split: Literal["train", "val"]) -> list[dict[str, Any]]:
    """One task per episode seed; the held-out seeds are never training seeds."""
    require("openenv.core", extra="openenv")  # fails here, not in every rollout
    spec = config.model_dump(
        include={
            "url",
            "command",
            "action_field",
            "action",
            "observation_field",
            "max_steps",
            "startup_timeout_s",
        }
    )
    return [
        {
            "id": f"{split}-{i}",
            "openenv": {**spec, "reset": {**config.reset, "seed": seed}},
            "agent": {"system_prompt": config.system_prompt},
        }
        for i, seed in enumerate(config.episode_seeds(split))
    ]


def observation_text(observation: Any, field: str | None) -> str:
    """Return what the model is shown of an observation: one field, or all of it as JSON.

    >>> observation_text({"prompt": "Guess", "step": 1}, "prompt")
    'Guess'
    >>> observation_text({"step": 1}, None)
    '{"step": 1}'
    """
    if field is not None:
        if not isinstance(observation, dict) or field not in observation:
            keys = (
                sorted(cast("dict[str, Any]", observation)) if isinstance(observation, dict) else []
            )
            raise ConfigError(f"the observation has no field {field!r} (it has: {keys})")
        value = cast("dict[str, Any]", observation)[field]
        return value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(observation, default=str)


@contextlib.asynccontextmanager
async def local_server(command: list[str], *, timeout_s: float) -> AsyncIterator[str]:
    """Start ``command`` in its own session; yield its URL; stop its process group.

    ``{port}`` in an argument becomes a free loopback port, ``{python}`` this interpreter.

    The server is up once ``GET /health`` answers 200 from a socket its own process group
    holds; one that exits or does not answer in ``timeout_s`` is a ``ConfigError`` with the end
    of its output. A port another process takes between its pick and the server's bind gives
    a fresh one, up to three times.
    """
    deadline = time.monotonic() + timeout_s
    for _ in range(3):
        started = await _start_server(command, deadline=deadline, timeout_s=timeout_s)
        if started is None:
            continue
        proc, url = started
        try:
            yield url
        finally:
            await asyncio.to_thread(stop_process_group, proc, 5.0)
            if proc.stdout is not None:
                proc.stdout.close()
        return
    raise ConfigError(f"openenv server {command} lost its port to another process 3 times")


async def _start_server(
    command: list[str], *, deadline: float, timeout_s: float
) -> tuple[subprocess.Popen[bytes], str] | None:
    """Start ``command`` on a free port; its process and URL once healthy.

    ``None`` when another process took the port first (this server is then stopped).
    """
    import httpx

    from fulmen.engines.launcher import free_port

    port = free_port()
    argv = [arg.replace("{port}", str(port)).replace("{python}", sys.executable) for arg in command]
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as exc:
        raise ConfigError(f"openenv.command {argv[0]!r} cannot start: {exc}") from exc
    url = f"http://127.0.0.1:{port}"
    ours = False
    try:
        async with httpx.AsyncClient(timeout=2.0, verify=tls_context()) as http:
            while True:
                if proc.poll() is not None:
                    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                    if "address already in use" in output.lower():
                        return None
                    raise ConfigError(
                        f"openenv server {argv} exited with {proc.returncode}: {output[-2000:]}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/health")).status_code == 200:
                        ours = await asyncio.to_thread(listens_on, proc, port)
                        if not ours:
                            return None
                        return proc, url
                if time.monotonic() > deadline:
                    raise ConfigError(f"openenv server {argv} did not answer in {timeout_s} s")
                await asyncio.sleep(0.1)
    finally:
        if not ours:
            await asyncio.to_thread(stop_process_group, proc, 5.0)
            if proc.stdout is not None:
                proc.stdout.close()


class OpenEnvAgent(Agent):
    """The built-in OpenEnv agent: one chat, one model call and one step per turn."""

    async def training_rollout(self, task: dict[str, Any], llm: LLM) -> float:  # type: ignore[override]  # by name
        """Run one episode; each step's reward goes to its call, the sum is returned."""
        spec = cast("dict[str, Any]", task["openenv"])
        command = cast("list[str] | None", spec.get("command"))
        if command is None:
            return await self._episode(str(spec["url"]), spec, task, llm)
        async with local_server(command, timeout_s=float(spec["startup_timeout_s"])) as url:
            return await self._episode(url, spec, task, llm)

    async def _episode(
        self, url: str, spec: dict[str, Any], task: dict[str, Any], llm: LLM
    ) -> float:
        client_module = require("openenv.core", extra="openenv")
        system = cast("dict[str, Any]", task.get("agent") or {}).get("system_prompt")
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": str(system)})
        field = cast("str | None", spec.get("observation_field"))
        total = 0.0
        async with (
            client_module.GenericEnvClient(base_url=url) as env,
            chat_client(llm) as http,
        ):
            result = await env.reset(**dict(spec.get("reset") or {}))
            for _ in range(int(spec["max_steps"])):
                if result.done:
                    break
                messages.append(
                    {"role": "user", "content": observation_text(result.observation, field)}
                )
                reply = await send_chat(http, llm, messages)
                messages.append({"role": "assistant", "content": reply.text})
                action = {**dict(spec.get("action") or {}), str(spec["action_field"]): reply.text}
                result = await env.step(action)
                reward = float(result.reward or 0.0)
                emit_reward(reward, response_id=reply.response_id)
                total += reward
        return total
