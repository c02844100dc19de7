"""Command agents through the real runner and gateway: the task in, calls recorded, the reward out.

The agent is a standalone Python script (standard library only, run by an interpreter other
users may run: under root each rollout runs as a user of its own) that calls the gateway over
HTTP as any program would; the upstream is scripted so the answers are exact.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from fulmen.agent.command import CommandAgent, CommandAgentConfig, CommandResult
from fulmen.agent.command.sandbox import interpreter_for
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.tracing import rewards_from_spans, semconv
from fulmen.types import RolloutCreate, Span
from tests.agent.conftest import FAST

gateway = pytest.importorskip("fulmen.gateway")
upstream = pytest.importorskip("tests.gateway.scripted_upstream")

AGENTS = Path(__file__).parent / "agents"
PY = interpreter_for(61000)  # one that a rollout's own user may run, too


@asynccontextmanager
async def serving_gateway(store: Store) -> AsyncIterator[tuple[str, Any]]:
    """A gateway on 127.0.0.1 in front of an upstream that answers 2+2 right and 3+3 wrong."""

    def reply(body: dict[str, Any]) -> Any:
        question = body["messages"][-1]["content"]
        return upstream.Reply(content={"2+2": "4", "3+3": "7"}.get(question, "?"))

    script = upstream.Script(reply_for=reply)
    async with upstream.serve_app(upstream.create_upstream_app(script)) as upstream_root:
        config = gateway.GatewayConfig(flush_interval_s=0.01, connect_retries=0)
        app = gateway.create_app(store, [f"{upstream_root}/v1"], config=config)
        async with upstream.serve_app(app) as url:
            yield url, app.state.gateway


def command_spans(spans: list[Span]) -> list[dict[str, Any]]:
    return [s.attributes for s in spans if s.name == semconv.SPAN_COMMAND]


async def run_all(store: Store, agent: CommandAgent, tasks: list[Any]) -> list[Any]:
    rollouts = await store.enqueue([RolloutCreate(input=t) for t in tasks])
    async with serving_gateway(store) as (url, gw):
        runner = Runner(store, agent, concurrency=2, gateway_url=url, **FAST)
        await runner.run(until_idle=True)
        await gw.flush()
    return rollouts


async def test_the_task_goes_in_calls_are_recorded_and_the_verifier_scores(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FULMEN_SECRET_OF_RUNNER", "not for agents")
    config = CommandAgentConfig(
        command=[PY, str(AGENTS / "chat_agent.py"), "${task.q}", "--id=${rollout_id}"],
        stdin="${task}",
        env={"EXTRA": "model ${model} at ${anthropic_base_url}"},
        verifier={"command": [PY, str(AGENTS / "verify.py")]},
    )
    tasks = [{"q": "2+2", "expect": "4"}, {"q": "3+3", "expect": "6"}]
    rollouts = await run_all(store, CommandAgent(config), tasks)
    for rollout, task, reward in zip(rollouts, tasks, [1.0, 0.0], strict=True):
        done = await store.get_rollout(rollout.rollout_id)
        assert done.status == "succeeded", done.error
        calls = (await store.query_llm_calls(rollout.rollout_id)).items
        assert len(calls) == 1 and calls[0].is_token_level and calls[0].prompt_token_ids
        spans = (await store.query_spans(rollout.rollout_id)).items
        assert rewards_from_spans(spans) == {"reward": reward}
        agent_run, verifier_run = command_spans(spans)
        assert agent_run[semconv.COMMAND_ROLE] == "command"
        assert agent_run[semconv.COMMAND_STATUS] == "exited"
        assert agent_run[semconv.COMMAND_EXIT_CODE] == 0
        assert agent_run[semconv.COMMAND_DURATION_S] > 0
        assert verifier_run[semconv.COMMAND_EXIT_CODE] == (0 if reward else 1)
        seen = json.loads(agent_run[semconv.COMMAND_STDERR])
        assert agent_run[semconv.COMMAND_STDOUT].strip() == {"2+2": "4", "3+3": "7"}[task["q"]]
        assert seen["argv"] == [task["q"], f"--id={rollout.rollout_id}"]
        assert json.loads(seen["stdin"]) == task
        assert seen["FULMEN_ROLLOUT_ID"] == rollout.rollout_id
        assert seen["FULMEN_SECRET_OF_RUNNER"] is None  # the runner's environment stays out
        assert seen["cwd"].endswith("/work") and seen["HOME"].endswith("/home")
        assert seen["ANTHROPIC_BASE_URL"].endswith(f"/attempt/{seen['FULMEN_ATTEMPT_ID']}")
        assert seen["EXTRA"] == f"model policy at {seen['ANTHROPIC_BASE_URL']}"


async def test_the_command_posts_its_own_reward(store: Store) -> None:
    config = CommandAgentConfig(command=[PY, str(AGENTS / "chat_agent.py")])
    [rollout] = await run_all(store, CommandAgent(config), [{"q": "2+2", "post_reward": 0.75}])
    assert (await store.get_rollout(rollout.rollout_id)).status == "succeeded"
    [reward] = await store.list_rewards(rollout.rollout_id)
    assert reward.values == {"reward": 0.75}


def scored(result: CommandResult) -> dict[str, float]:
    """A reward function: the answer file against the task, and the exit status."""
    answer = (result.workdir / "answer.txt").read_text()
    return {"correct": float(answer == result.task["expect"]), "exit": float(result.exit_code)}


@pytest.mark.parametrize("source", ["verifier_json", "reward_function"])
async def test_named_rewards_from_a_json_verifier_or_a_function(store: Store, source: str) -> None:
    command = [PY, str(AGENTS / "chat_agent.py")]
    config = (
        CommandAgentConfig(
            command=command,
            verifier={"command": [PY, str(AGENTS / "verify.py"), "json"], "reward": "json"},
        )
        if source == "verifier_json"
        else CommandAgentConfig(
            command=command, reward_function="tests.agent.command.test_command_agent:scored"
        )
    )
    [rollout] = await run_all(store, CommandAgent(config), [{"q": "2+2", "expect": "4"}])
    spans = (await store.query_spans(rollout.rollout_id)).items
    expected = {"correct": 1.0, "agent_exit": 0.0} if source == "verifier_json" else None
    assert rewards_from_spans(spans) == (expected or {"correct": 1.0, "exit": 0.0})


def test_config_errors_are_caught_when_the_config_is_read(tmp_path: Path) -> None:
    from pydantic import ValidationError

    for bad, message in [
        ({"command": ["x", "${task_field}"]}, "unknown template variable ${task_field}"),
        ({"command": "x", "files": {"/etc/passwd": "x"}}, "must be relative"),
        ({"command": "x", "files": {"../up": "x"}}, "without '..'"),
        ({"command": "x", "stdin": "price $5"}, "write '$$' for a dollar"),
        ({"command": "x", "env": {"A=B": "1"}}, "is not valid"),
        ({"command": []}, "at least 1 item"),
        ({"command": "x", "workdir_template": str(tmp_path / "none")}, "is not a directory"),
        (
            {"command": "x", "verifier": {"command": "v"}, "reward_function": "m:f"},
            "not both",
        ),
    ]:
        with pytest.raises(ValidationError, match=message.replace("$", r"\$").replace("(", r"\(")):
            CommandAgentConfig.model_validate(bad)
    # A string command is split as a shell would, without running a shell.
    config = CommandAgentConfig(command="node agent.js --task '${task.q}'")
    assert config.command == ["node", "agent.js", "--task", "${task.q}"]


async def test_a_program_that_lives_under_tmp_runs_in_the_private_tmp(store: Store) -> None:
    """A checkout under /tmp (as CI's may be) stays readable although /tmp is private."""
    # Not pytest's tmp_path: its folder is closed to other users, and rollouts run as their own.
    checkout = Path(tempfile.mkdtemp(prefix="fulmen-checkout-", dir="/tmp"))
    os.chmod(checkout, 0o755)
    script = checkout / "agent.py"
    script.write_text((AGENTS / "chat_agent.py").read_text())
    script.chmod(0o644)
    config = CommandAgentConfig(
        command=[PY, str(script)], verifier={"command": [PY, str(AGENTS / "verify.py")]}
    )
    try:
        tasks = [{"q": "2+2", "expect": "4"}]
        [rollout] = await run_all(store, CommandAgent(config), tasks)
    finally:
        shutil.rmtree(checkout)
    done = await store.get_rollout(rollout.rollout_id)
    assert done.status == "succeeded", done.error
    spans = (await store.query_spans(rollout.rollout_id)).items
    [agent_run, _] = command_spans(spans)
    assert agent_run[semconv.COMMAND_EXIT_CODE] == 0, agent_run[semconv.COMMAND_STDERR]
    assert rewards_from_spans(spans) == {"reward": 1.0}


@pytest.mark.skipif(os.geteuid() != 0, reason="rollouts get users of their own under root only")
async def test_a_checkout_the_rollouts_users_cannot_read_fails_loudly(store: Store) -> None:
    """A script under a folder only root may enter: every attempt fails with the folder named.

    Before the check such rollouts ended ``succeeded`` with no call and no reward (the command
    exited on its first read). Running them as the root runner's own user instead is refused:
    such rollouts could read every file of the machine.
    """
    checkout = Path(tempfile.mkdtemp(prefix="fulmen-private-", dir="/tmp"))  # mode 0700
    shutil.copy(AGENTS / "chat_agent.py", checkout / "agent.py")
    tasks = [{"q": "2+2", "post_reward": 1.0}]
    try:
        config = CommandAgentConfig(command=[PY, "${config_dir}/agent.py"], config_dir=checkout)
        [rollout] = await run_all(store, CommandAgent(config), tasks)
        done = await store.get_rollout(rollout.rollout_id)
        assert done.status == "failed"
        assert f"the folder {checkout} (mode 700) is not searchable" in (done.error or "")
        assert "chmod o+rx" in (done.error or "")
        assert (await store.query_llm_calls(rollout.rollout_id)).items == []

        as_runner = config.model_copy(
            update={"sandbox": config.sandbox.model_copy(update={"user": "runner"})}
        )
        [rollout] = await run_all(store, CommandAgent(as_runner), tasks)
    finally:
        shutil.rmtree(checkout)
    done = await store.get_rollout(rollout.rollout_id)
    assert done.status == "failed"
    assert "sandbox.user: runner would run every rollout as root" in (done.error or "")
    assert (await store.query_llm_calls(rollout.rollout_id)).items == []


@pytest.mark.skipif(
    shutil.which("bwrap") is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)
async def test_every_rollout_sees_its_directory_at_the_same_path(store: Store) -> None:
    """Identical agents send identical prompts, so the engine's prefix cache serves them all."""
    prompts = {}
    for backend in ("bwrap", "process"):
        box = {"backend": backend, "network": "gateway" if backend == "bwrap" else "host"}
        config = CommandAgentConfig(command=[PY, str(AGENTS / "paths_agent.py")], sandbox=box)
        rollouts = await run_all(store, CommandAgent(config), [{"n": 1}, {"n": 2}])
        prompts[backend] = []
        for rollout in rollouts:
            [call] = (await store.query_llm_calls(rollout.rollout_id)).items
            prompts[backend].append(call.request["messages"][0]["content"])
    first, second = prompts["bwrap"]
    assert (
        first
        == second
        == ("cwd /home/rollout/work; home /home/rollout/home; task /home/rollout/task.json")
    )
    assert prompts["process"][0] != prompts["process"][1]  # the machine's own paths differ
