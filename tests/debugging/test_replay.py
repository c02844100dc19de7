"""``fulmen replay``: real toy rollouts (SQLite store, gateway, tiny engine) replayed with no
model: the recorded replies come back in order, and a changed agent is caught where it changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.debugging import ReplayReport, replay_rollout
from fulmen.store import open_store
from tests.debugging.conftest import SETTINGS, TOY_DIR, run_rollouts

pytestmark = pytest.mark.usefixtures("toy_imports")

# 16 tasks: at temperature 1.0 four could all score the same (seen in CI); sixteen hardly can.
TASKS = [{"id": f"t{i}", "prompt": f"Task {i}: write the letter a."} for i in range(16)]
CHANGED = "tests.debugging.agents:changed_two_calls"


def replay(url: str, rollout_id: str, agent: str, **options: str) -> ReplayReport:
    async def go() -> ReplayReport:
        async with open_store(url, watchdog_interval=None) as store:
            return await replay_rollout(
                store, rollout_id, agent=agent, rollouts=SETTINGS, **options
            )  # type: ignore[arg-type]

    return asyncio.run(go())


def test_recorded_toy_rollouts_replay_to_the_same_reward(tmp_path: Path, engine_url: str) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ids = asyncio.run(run_rollouts(url, engine_url, "agent:toy_agent", TASKS, prefix="toy"))
    reports = [replay(url, rid, "agent:toy_agent") for rid in ids]
    for report in reports:
        assert report.divergences == ()
        assert (report.requests, report.served, report.recorded_calls) == (1, 1, 1)
        assert report.status == "succeeded"
        assert report.recorded_reward is not None
        assert report.reward == report.recorded_reward
        assert report.is_faithful
    # Sampled at temperature 1.0: the rewards vary, so equal rewards are the recorded replies.
    assert len({r.recorded_reward for r in reports}) > 1


def test_replay_command_reports_a_faithful_replay(
    tmp_path: Path, engine_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    [rid] = asyncio.run(
        run_rollouts(url, engine_url, "agent:toy_two_calls", TASKS[:1], prefix="two")
    )
    capsys.readouterr()
    argv = ["replay", rid, "--store", url, "--agent", "agent:toy_two_calls"]
    assert main([*argv, "--python-path", str(TOY_DIR)]) == 0
    out = capsys.readouterr().out
    assert "same as recorded" in out
    assert "2 requests, 2 of 2 recorded replies served, 0 diverged" in out


def test_a_changed_agent_is_reported_at_its_first_diverging_call(
    tmp_path: Path, engine_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    [rid] = asyncio.run(
        run_rollouts(url, engine_url, "agent:toy_two_calls", TASKS[:1], prefix="two")
    )

    stopped = replay(url, rid, CHANGED)
    [divergence] = stopped.divergences
    assert (divergence.call_number, divergence.recorded_number) == (2, 2)
    assert divergence.fields == ("messages",)
    assert "Your plan was" in divergence.diff and "+" in divergence.diff
    assert stopped.served == 1  # the planner's call matched; the actor's was refused
    assert stopped.status == "failed" and stopped.reward is None
    assert stopped.error is not None and "replay: call #2 differs" in stopped.error
    assert not stopped.is_faithful

    served = replay(url, rid, CHANGED, on_divergence="serve")
    assert [d.call_number for d in served.divergences] == [2]
    assert served.served == 2 and served.status == "succeeded"
    # The actor got the recorded answer, so the toy reward is the recorded one.
    assert served.reward == served.recorded_reward

    capsys.readouterr()
    argv = ["replay", rid, "--store", url, "--agent", CHANGED]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "call #2 differs from recorded call #2 in messages (refused)" in out
    assert "--- recorded" in out and "+++ replayed" in out


def test_a_streaming_agent_replays_from_server_sent_events(tmp_path: Path, engine_url: str) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = "tests.debugging.agents:streaming_toy"
    ids = asyncio.run(run_rollouts(url, engine_url, agent, TASKS[:2], prefix="stream"))
    for rid in ids:
        report = replay(url, rid, agent)
        assert report.is_faithful, report


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_are_replayed(tmp_path: Path, stream: bool) -> None:
    """A tool-calling agent recorded against a scripted engine (the fake at the edge) replays
    with no engine at all: the tool call, its result and the final answer match."""
    from collections import deque

    from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = "tests.debugging.agents:tool_agent"
    script = Script(
        model="tiny",
        replies=deque([Reply(tool_calls=[("add", {"a": 2, "b": 3})]), Reply(content="It is 5.")]),
    )
    task = {"id": "t0", "question": "What is 2 + 3?", "a": 2, "b": 3, "stream": stream}

    async def record() -> list[str]:
        async with serve_app(create_upstream_app(script)) as upstream:
            return await run_rollouts(url, f"{upstream}/v1", agent, [task], prefix="tool")

    [rid] = asyncio.run(record())
    assert len(script.requests) == 2 and script.requests[0]["tools"][0]["function"]["name"] == "add"
    report = replay(url, rid, agent)
    assert report.recorded_reward == 1.0
    assert report.is_faithful, report


def test_a_run_that_failed_replays_to_the_same_failure(tmp_path: Path, engine_url: str) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = "tests.debugging.agents:failing_tool"
    [rid] = asyncio.run(
        run_rollouts(url, engine_url, agent, TASKS[:1], prefix="fail", expect="failed")
    )
    report = replay(url, rid, agent)
    assert (report.status, report.recorded_status) == ("failed", "failed")

    async def recorded_error() -> str | None:
        async with open_store(url, watchdog_interval=None) as store:
            return (await store.list_attempts(rid))[-1].error

    recorded = asyncio.run(recorded_error())
    assert recorded is not None and report.error is not None
    # The same model reply reached the same tool: the same failure, down to its message.
    last = recorded.strip().splitlines()[-1]
    assert "tool failed on" in last and last == report.error.strip().splitlines()[-1]
    assert report.served == report.recorded_calls == 1 and report.divergences == ()
    assert report.is_faithful
