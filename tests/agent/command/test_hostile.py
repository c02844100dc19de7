"""A rollout touches only its own rollout: one test per attack of a hostile command agent.

Each attack (``agents/attacker.py``) runs as a rollout of the real runner, through a gateway
that holds a token (as under ``fulmen train``), beside a well-behaved canary rollout: the
canary's one call, its reward and the policy the upstream serves must come out unchanged, and
the attack must fail in the way the test names. Where an attack applies to both sandbox
backends it runs under both. ``docs/security.md`` states the threat model these tests check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.runner import Runner
from fulmen.asgi_disconnect import CancelOnDisconnect
from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import Store
from fulmen.tracing import rewards_from_spans, semconv
from fulmen.types import RolloutCreate
from tests.agent.command.test_command_agent import AGENTS, PY, command_spans
from tests.agent.conftest import FAST
from tests.gateway.scripted_upstream import serve_app

ATTACKER = str(AGENTS / "attacker.py")
TOKEN = "gateway-token-of-the-test"
is_root = os.geteuid() == 0
has_bwrap = shutil.which("bwrap") is not None or os.environ.get("CI") == "true"
BACKENDS = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not has_bwrap, reason="no bubblewrap")),
    "process",
]


@dataclass
class Engine:
    """The upstream's state: what it served, and every admin call that reached it."""

    policy: str = "policy-v1"
    calls: list[str] = field(default_factory=list)
    admin: list[str] = field(default_factory=list)
    slow_started: int = 0
    slow_cancelled: int = 0


def engine_app(engine: Engine, delay_s: float) -> Any:
    """An OpenAI-shaped upstream: ``2+2`` is 4, ``slow`` takes ``delay_s``; admin paths count."""

    async def chat(request: Request) -> Response:
        body = await request.json()
        question = body["messages"][-1]["content"]
        engine.calls.append(question)
        if question == "slow":
            engine.slow_started += 1
            try:
                await asyncio.sleep(delay_s)
            except asyncio.CancelledError:
                engine.slow_cancelled += 1
                raise
        content = {"2+2": "4"}.get(question, "?")
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "model": engine.policy,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        )

    async def admin(request: Request) -> Response:
        engine.admin.append(request.url.path)
        engine.policy = "attacker"
        return JSONResponse({"status": "ok"})

    routes = [Route("/v1/chat/completions", chat, methods=["POST"])]
    for path in ("load_lora_adapter", "unload_lora_adapter", "reload_weights"):
        routes.append(Route(f"/v1/{path}", admin, methods=["POST"]))
    routes.append(Route("/tokenize", admin, methods=["POST"]))
    return CancelOnDisconnect(Starlette(routes=routes))


@dataclass
class Ended:
    """One rollout as it ended: its status, error, command output, calls and rewards."""

    status: str
    error: str
    stdout: str
    calls: list[Any]
    rewards: list[dict[str, float]]


@contextlib.asynccontextmanager
async def guarded_gateway(
    store: Store, delay_s: float = 3.0
) -> AsyncIterator[tuple[str, Any, Engine]]:
    """A gateway with a token, as ``fulmen train`` runs it, before an ``Engine`` upstream."""
    engine = Engine()
    async with serve_app(engine_app(engine, delay_s)) as upstream:
        config = GatewayConfig(flush_interval_s=0.01, connect_retries=0)
        app = create_app(store, [f"{upstream}/v1"], token=TOKEN, config=config)
        async with serve_app(app) as url:
            yield url, app.state.gateway, engine


async def run_attack(
    store: Store,
    backend: str,
    attacks: list[list[str]],
    *,
    canary: list[str] | None = None,
    sandbox: dict[str, Any] | None = None,
    delay_s: float = 3.0,
    **options: Any,
) -> tuple[Ended, list[Ended], Engine, Any]:
    """Run the canary and each attack as rollouts at once; return how each ended."""
    box = {"backend": backend, "network": "gateway" if backend == "bwrap" else "host"}
    config = CommandAgentConfig(
        command=[PY, ATTACKER, "${task.attack}", "${task.a}", "${task.b}"],
        timeout_s=options.pop("timeout_s", 30.0),
        sandbox={**box, **(sandbox or {})},
        **options,
    )
    tasks = [{"attack": "canary", "a": "post", "b": "-", **({"expect": "4"})}]
    if canary is not None:
        tasks[0] = {"attack": "canary", "a": canary[0], "b": "-", "expect": "4"}
    for attack in attacks:
        padded = [*attack, "-", "-"]
        tasks.append({"attack": padded[0], "a": padded[1], "b": padded[2], "expect": "4"})
    rollouts = await store.enqueue([RolloutCreate(input=t) for t in tasks])
    async with guarded_gateway(store, delay_s) as (url, gateway, engine):
        runner = Runner(
            store,
            CommandAgent(config),
            concurrency=len(tasks),
            gateway_url=url,
            gateway_api_key=TOKEN,
            **FAST,
        )
        await runner.run(until_idle=True)
        await gateway.flush()
    ended = []
    for rollout in rollouts:
        done = await store.get_rollout(rollout.rollout_id)
        spans = command_spans((await store.query_spans(rollout.rollout_id)).items)
        stdout = "".join(str(s.get(semconv.COMMAND_STDOUT, "")) for s in spans)
        calls = (await store.query_llm_calls(rollout.rollout_id)).items
        rewards = [r.values for r in await store.list_rewards(rollout.rollout_id)]
        if not rewards:  # the runner's own (a verifier's, a reward function's): a span
            emitted = rewards_from_spans((await store.query_spans(rollout.rollout_id)).items)
            rewards = [emitted] if emitted else []
        ended.append(Ended(done.status.value, done.error or "", stdout, calls, rewards))
    return ended[0], ended[1:], engine, gateway


def assert_canary_unharmed(canary: Ended, engine: Engine, reward: float = 1.0) -> None:
    """The well-behaved rollout: its one call answered 4, its reward, the policy unchanged."""
    assert canary.status == "succeeded", canary.error
    assert "answered 4" in canary.stdout
    assert len(canary.calls) == 1
    assert canary.calls[0].request["messages"][-1]["content"] == "2+2"
    assert canary.calls[0].response["choices"][0]["message"]["content"] == "4"
    assert canary.rewards == [{"reward": reward}]
    assert engine.policy == "policy-v1" and engine.admin == []


def lines(ended: Ended) -> dict[str, str]:
    """The attack's output, first word of each line → the rest."""
    return {line.split(" ", 1)[0]: line.split(" ", 1)[-1] for line in ended.stdout.splitlines()}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_engines_admin_routes_are_out_of_reach(store: Store, backend: str) -> None:
    canary, [attack], engine, gateway = await run_attack(store, backend, [["engine_admin"]])
    assert_canary_unharmed(canary, engine)
    said = lines(attack)
    assert said == {
        "load": "404",
        "unload": "404",
        "reload": "404",
        "tokenize": "404",
        "untracked": "403",  # plain /v1: not its attempt's path
    }, attack.stdout
    assert gateway.refusals["not_model_path"] == 4 and gateway.refusals["not_attempt_path"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_rollout_cannot_forge_another_rollouts_reward(store: Store, backend: str) -> None:
    # The victim's id is no secret (another rollout of the group could guess or see it); it
    # runs elsewhere meanwhile.
    [victim] = await store.enqueue([RolloutCreate(input={"attack": "noop"})])
    assert await store.claim("victim-worker")
    canary, [attack], engine, gateway = await run_attack(
        store, backend, [["forge_rewards", victim.rollout_id]]
    )
    assert_canary_unharmed(canary, engine)
    said = lines(attack)
    assert said["victim"] == "403" and said["withdraw"] == "403", attack.stdout
    assert said["huge"] == "422"  # beyond the gateway's reward_range
    assert said["own"] == "200"  # its own reward, in range, is its to post
    assert await store.list_rewards(victim.rollout_id) == []
    assert attack.rewards == [{"reward": 1.0}]
    assert gateway.refusals["other_rollout"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_rollout_cannot_call_as_another_attempt(store: Store, backend: str) -> None:
    # A running attempt to write into: the canary's own rollout, under a guessed attempt id.
    [victim] = await store.enqueue([RolloutCreate(input={"attack": "noop"})])
    [claim] = await store.claim("victim-worker")
    canary, [attack], engine, gateway = await run_attack(
        store, backend, [["other_attempt", claim.rollout.rollout_id, claim.attempt.attempt_id]]
    )
    assert_canary_unharmed(canary, engine)
    assert lines(attack) == {"other": "403", "untracked": "403", "flush": "403", "metrics": "403"}
    assert (await store.query_llm_calls(victim.rollout_id)).items == []
    assert "attacker was here" not in engine.calls
    assert gateway.refusals["other_attempt"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_rollout_cannot_read_the_store_or_private_task_fields(
    store: Store, backend: str, tmp_path: Path
) -> None:
    # A run folder and store as the trainer makes them: owner-only (tests/trainer checks that
    # it does), and hidden from the sandbox besides.
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    secret = run_dir / "store.db"
    secret.write_text("every task and answer")
    os.chmod(secret, 0o600)
    canary, [attack], engine, _ = await run_attack(
        store,
        backend,
        [["read", str(secret)]],
        canary=["-"],
        private_fields=["expect"],
        verifier={"command": [PY, str(AGENTS / "verify_echo.py")], "reward": "json"},
    )
    # The canary's reward is 1: its verifier saw the expected answer.
    assert_canary_unharmed(canary, engine)
    assert f"cannot read {secret}" in attack.stdout, attack.stdout
    # The command's own task file holds no expected answer.
    assert '"attack": "read"' in lines(attack)["task"] and "expect" not in lines(attack)["task"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channel", ["json", "file"])
async def test_the_verifier_cannot_be_hijacked(store: Store, backend: str, channel: str) -> None:
    verifier = {"command": [PY, str(AGENTS / "verify_echo.py"), channel], "reward": "json"}
    canary, [attack], engine, _ = await run_attack(
        store, backend, [["plant_usercustomize"]], canary=["-"], verifier=verifier
    )
    assert_canary_unharmed(canary, engine)
    assert "planted" in attack.stdout
    # Neither its user site nor the line echoed after the verifier's own scored it.
    assert attack.status == "succeeded", attack.error
    assert attack.rewards == [{"reward": 0.0}]


@pytest.mark.skipif(not is_root, reason="a reward function reading as root needs a root runner")
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_reward_function_does_not_follow_links_or_open_fifos(
    store: Store, backend: str, tmp_path: Path
) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("the root password")
    os.chmod(secret, 0o600)
    canary, attacks, engine, _ = await run_attack(
        store,
        backend,
        [["link_answer", str(secret)], ["fifo_answer"]],
        canary=["-"],
        reward_function="tests.agent.command.test_hostile:reward_of_answer",
        reward_timeout_s=10,
    )
    assert_canary_unharmed(canary, engine)
    for attack in attacks:
        assert attack.status == "failed", attack
        assert "No such file" in attack.error, attack.error  # removed before scoring
        assert "root password" not in attack.error


def reward_of_answer(result: Any) -> float:
    """The reward functions of these runs: 1 when answer.txt holds the task's answer."""
    return float((result.workdir / "answer.txt").read_text().strip() == result.task["expect"])


@pytest.mark.skipif(not has_bwrap, reason="no bubblewrap")
@pytest.mark.parametrize("network", ["gateway", "none"])
async def test_the_hosts_unix_sockets_are_out_of_reach(store: Store, network: str) -> None:
    paths = []
    servers = []
    folders = [Path("/run"), Path("/tmp")] if is_root else [Path("/tmp")]
    try:
        for folder in folders:
            path = folder / f"fulmen-test-{uuid.uuid4().hex[:8]}.sock"
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            server.listen()
            os.chmod(path, 0o777)  # anyone may connect, as PostgreSQL's or D-Bus's
            paths.append(str(path))
            servers.append(server)
        attack = ["sockets", *paths]
        canary, [ended], engine, _ = await run_attack(
            store, "bwrap", [attack], canary=["post"] if network == "gateway" else ["-"],
            sandbox={"network": network},
        )  # fmt: skip
    finally:
        for server in servers:
            server.close()
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    if network == "gateway":
        assert_canary_unharmed(canary, engine)
    assert "connected" not in ended.stdout and ended.stdout.count("refused") == len(paths)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_deep_trees_and_many_files_end_the_attempt_and_are_cleaned_up(
    store: Store, backend: str
) -> None:
    limits = {"max_files": 2000, "disk_check_s": 0.1}
    canary, attacks, engine, _ = await run_attack(
        store, backend, [["deep_tree", "1500"], ["many_files"]], sandbox=limits
    )
    assert_canary_unharmed(canary, engine)
    for attack in attacks:
        assert attack.status == "failed"
        assert "status files_limit" in attack.error, attack.error


@pytest.mark.skipif(not has_bwrap, reason="no bubblewrap")
async def test_memory_counts_for_the_whole_rollout(store: Store) -> None:
    box = {"memory_mb": 128}
    attacks = [
        ["shared_memory", "anonymous", "300"],
        ["shared_memory", "/dev/shm", "300"],
        ["shared_memory", "/dev", "1"],
    ]
    canary, ended, engine, _ = await run_attack(store, "bwrap", attacks, sandbox=box)
    assert_canary_unharmed(canary, engine)
    anonymous, shm, dev = ended
    if is_root:  # control groups: the kernel kills the rollout at its memory
        assert anonymous.status == "failed" and "memory_limit" in anonymous.error
    assert "wrote /dev/shm 300" not in shm.stdout
    assert "refused /dev" in dev.stdout  # /dev is read-only


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_cpu_budget_counts_every_process(store: Store, backend: str) -> None:
    canary, [attack], engine, _ = await run_attack(
        store, backend, [["cpu_relay", "6"]], sandbox={"cpu_s": 2, "disk_check_s": 0.1}
    )
    assert_canary_unharmed(canary, engine)
    assert attack.status == "failed" and "status cpu_limit" in attack.error, attack.error
    assert "burned" not in attack.stdout


@pytest.mark.parametrize("backend", BACKENDS)
async def test_one_rollout_cannot_take_the_model_from_the_others(
    store: Store, backend: str
) -> None:
    canary, [attack], engine, gateway = await run_attack(
        store, backend, [["connections", "100"]], delay_s=2.0
    )
    assert_canary_unharmed(canary, engine)
    said = lines(attack)
    answered = said["opened"]
    # At most 16 calls in flight per rollout (the gateway's max_calls_per_rollout); the rest
    # are refused at once (429) or, through the sandbox's relay, never joined (32 at most).
    assert '"200": 16' in answered, answered
    assert engine.slow_started == 16
    assert gateway.refusals["too_many_calls"] >= 1
    assert said["n"] == "400"  # n above max_n


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_engine_work_of_an_agent_that_left_is_cancelled(
    store: Store, backend: str
) -> None:
    canary, [attack], engine, _ = await run_attack(store, backend, [["abandon", "8"]], delay_s=30.0)
    assert_canary_unharmed(canary, engine)
    assert "abandoned 8" in attack.stdout
    for _ in range(200):  # the gateway cancels each call when its agent's connection closes
        if engine.slow_cancelled == 8:
            break
        await asyncio.sleep(0.05)
    assert engine.slow_started == engine.slow_cancelled == 8


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_process_outlives_its_rollout(store: Store, backend: str) -> None:
    from tests.agent.command.test_sandbox import _leftovers

    marker = f"leftover-{uuid.uuid4().hex}"
    canary, [attack], engine, _ = await run_attack(store, backend, [["daemons", marker]])
    assert_canary_unharmed(canary, engine)
    assert "left" in attack.stdout
    assert _leftovers(marker) == []


@pytest.mark.skipif(not is_root, reason="the runner's user is root only under root")
async def test_a_root_runner_will_not_run_rollouts_as_root(store: Store) -> None:
    canary, [], _, _ = await run_attack(store, "process", [], sandbox={"user": "runner"})
    assert canary.status == "failed"
    assert "would run every rollout as root" in canary.error
