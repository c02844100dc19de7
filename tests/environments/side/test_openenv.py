"""OpenEnv through fulmen (run in .venvs/openenv): an environment server stepped by the model.

The server is ``openenv_guess`` (written and served with OpenEnv's own API). A scripted model
proves the loop and the local-process mode: the server is started for the rollout, each reply
is stepped, the episode ends when the environment says so, and the return is the sum of the
environment's step rewards. A GRPO run on the tiny model against the running server stores
every call at token level with the environment's reward of its step as that call's reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("openenv.core")

from fulmen.agent.context import LLM
from fulmen.environments.config import EnvironmentAdapter, OpenEnvConfig
from fulmen.environments.openenv import OpenEnvAgent, openenv_tasks
from fulmen.process_group import stop_process_group
from tests.environments.side.openenv_guess import MAX_STEPS, step_reward, target_of
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

ROOT = Path(__file__).parents[3]
SERVER = ["{python}", "-m", "tests.environments.side.openenv_guess", "--port", "{port}"]


def _config(**raw: Any) -> OpenEnvConfig:
    config = EnvironmentAdapter.validate_python({"library": "openenv", **raw})
    assert isinstance(config, OpenEnvConfig)
    return config


def test_held_out_episodes_use_other_seeds() -> None:
    config = _config(url="http://127.0.0.1:1", train_size=20, val_size=5)
    train, val = openenv_tasks(config, "train"), openenv_tasks(config, "val")
    seeds = {t["openenv"]["reset"]["seed"] for t in train + val}
    assert len(seeds) == 25


def test_local_server_is_stepped_until_done_and_returns_the_summed_rewards() -> None:
    config = _config(command=SERVER, observation_field="prompt", train_size=1, val_size=0)
    (task,) = openenv_tasks(config, "train")
    target = target_of(task["openenv"]["reset"]["seed"])
    guesses = [(target % 10) + 1, target, 3]  # a miss, then the number: the episode ends
    script = Script(replies=__import__("collections").deque(Reply(content=f"{g}") for g in guesses))

    async def run() -> float:
        async with serve_app(create_upstream_app(script)) as url:
            llm = LLM(name="llm", base_url=f"{url}/v1", model="tiny-model", api_key="k")
            return await OpenEnvAgent().training_rollout(task, llm)

    total = asyncio.run(run())
    assert len(script.requests) == 2  # done after the right guess
    assert total == pytest.approx(step_reward(str(guesses[0]), target) + 1.0)
    # One growing chat: the first observation, the reply, the next observation.
    messages = script.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "Guess my number between 1 and 10."


@pytest.fixture(scope="module")
def guess_server() -> Iterator[str]:
    """The guessing environment, started once for the module at a fixed loopback URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [a.replace("{port}", str(port)).replace("{python}", sys.executable) for a in SERVER]
    proc = subprocess.Popen(argv, cwd=ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, "the OpenEnv server exited"
            time.sleep(0.1)
        yield url
    finally:
        stop_process_group(proc, 5.0)


@pytest.mark.slow
def test_grpo_on_the_tiny_model_with_the_environments_step_rewards(
    tmp_path: Path, guess_server: str
) -> None:
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.trainer import Trainer
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import RolloutQuery, RolloutStatus

    example = ROOT / "examples" / "openenv" / "config.yaml"
    overrides = [
        f"run_dir={tmp_path}",
        "model=tiny",
        f"environment.url={guess_server}",
        "environment.command=null",
        "environment.train_size=8",
        "environment.val_size=0",
        "validation=null",
        "algorithm.steps=1",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=4",
        "rollouts.concurrency=8",
        "engine.max_batch=8",
    ]
    config = load_config(example, overrides=overrides)
    Trainer(config).fit()
    (step,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "time/step_s" in r]
    assert step["rollouts/finished"] == 8 and step["updated"] == 1.0

    async def check() -> None:
        async with open_store(f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None) as s:
            async for rollout in iter_rollouts(s, RolloutQuery(limit=100)):
                assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
                records = await load_attempt(s, rollout.rollout_id)
                target = target_of(rollout.input["openenv"]["reset"]["seed"])
                replies = [
                    c.response["choices"][0]["message"]["content"] or "" for c in records.calls
                ]
                assert 1 <= len(replies) <= MAX_STEPS
                assert all(c.is_token_level and c.choices[0].token_ids for c in records.calls)
                expected = [step_reward(r, target) for r in replies]
                signals = __import__("fulmen.transitions.signals", fromlist=["x"]).read_signals(
                    records.calls, records.spans
                )
                assert list(signals.call_rewards) == pytest.approx(expected)
                assert records.final_reward == pytest.approx(sum(expected))

    asyncio.run(check())
