"""Hostile commands end their own attempt with a clear status; the runner and the others go on.

Each misbehaviour (``agents/hostile.py``) runs as a rollout of the real runner next to a
well-behaved rollout, under the default backend (bubblewrap where installed) with small
limits; afterwards no process of it is left on the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.command.sandbox import Sandbox
from fulmen.agent.runner import Runner
from fulmen.store import Store
from fulmen.tracing import semconv
from fulmen.types import RolloutCreate
from tests.agent.command.test_command_agent import AGENTS, PY, command_spans, serving_gateway
from tests.agent.conftest import FAST

HOSTILE = str(AGENTS / "hostile.py")
LIMITS = {
    "max_processes": 32,
    "output_bytes": 1 << 20,
    "disk_mb": 20,
    "max_file_mb": 8,
    "cpu_s": 1,
    "disk_check_s": 0.1,
}
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.environ.get("CI") != "true",
    reason="bubblewrap is not installed (scripts/test.sh installs it)",
)


def _leftovers(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (none may outlive their rollout)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


async def run_side_by_side(store: Store, tasks: list[Any], **options: Any) -> dict[str, Any]:
    """Run every task as a rollout at once; return what each ended with, by task."""
    config = CommandAgentConfig(
        command=[PY, HOSTILE, "${task.what}", "${task.arg}", "${task.arg2}"],
        timeout_s=options.pop("timeout_s", 3.0),
        reward_function="tests.agent.command.test_sandbox:always_one",
        sandbox={**LIMITS, **options},
    )
    agent = CommandAgent(config)
    rollouts = await store.enqueue([RolloutCreate(input=t) for t in tasks])
    async with serving_gateway(store) as (url, _):
        runner = Runner(store, agent, concurrency=len(tasks), gateway_url=url, **FAST)
        await runner.run(until_idle=True)
    ended: dict[str, Any] = {}
    for rollout, task in zip(rollouts, tasks, strict=True):
        done = await store.get_rollout(rollout.rollout_id)
        spans = (await store.query_spans(rollout.rollout_id)).items
        ended[task["what"]] = (done, command_spans(spans))
    return ended


def always_one(result: Any) -> float:
    """The reward function of these runs: any command that ends by itself scores 1."""
    return 1.0


@needs_bwrap
async def test_limits_end_the_attempt_with_their_status_and_kill_the_whole_tree(
    store: Store,
) -> None:
    # An argument the commands ignore marks this test's processes: another test process on
    # the machine may be running the same commands meanwhile.
    marker = f"leftover-{uuid.uuid4().hex}"
    task = lambda what: {"what": what, "arg": "-", "arg2": marker}  # noqa: E731
    # The commands that only their timeout can end run under a short one; those a limit must
    # end get a timeout they cannot reach even on a loaded machine (the cpu one needs a full
    # second of CPU time), so each can end only by its own limit.
    by_timeout = await run_side_by_side(store, [*map(task, ["fork_bomb", "ignore_term", "read"])])
    kinds = ["endless_output", "disk_fill", "cpu", "big_file"]
    by_limit = await run_side_by_side(store, [*map(task, kinds), task("read")], timeout_s=20.0)
    ended = by_timeout | by_limit
    expected = {
        "fork_bomb": "timeout",  # forks refused at the process limit, then its timeout
        "endless_output": "output_limit",
        "disk_fill": "disk_limit",
        "ignore_term": "timeout",
        "cpu": "cpu_limit",
        "big_file": "file_limit",
    }
    for what, status in expected.items():
        rollout, [span] = ended[what]
        assert rollout.status == "failed", what
        assert f"status {status}" in (rollout.error or ""), (what, rollout.error)
        assert "process tree was killed" in (rollout.error or "")
        assert span[semconv.COMMAND_STATUS] == status
    assert "fork refused after" in ended["fork_bomb"][1][0][semconv.COMMAND_STDOUT]
    assert ended["endless_output"][1][0][semconv.COMMAND_OUTPUT_BYTES] > 1 << 20
    assert "bytes not kept" in ended["endless_output"][1][0][semconv.COMMAND_STDOUT]
    # The well-behaved rollout next to them finished normally, in both runs.
    assert by_timeout["read"][0].status == by_limit["read"][0].status == "succeeded"
    assert _leftovers(marker) == []


@needs_bwrap
async def test_the_network_leads_to_the_gateway_only(store: Store) -> None:
    other = socket.create_server(("127.0.0.1", 0))  # something else on this machine
    try:
        port = other.getsockname()[1]
        tasks = [
            {"what": "connect", "arg": "127.0.0.1", "arg2": str(port)},
            {"what": "connect", "arg": "1.1.1.1", "arg2": "53"},
        ]
        config = CommandAgentConfig(
            command=[PY, HOSTILE, "${task.what}", "${task.arg}", "${task.arg2}"],
            reward_function="tests.agent.command.test_sandbox:always_one",
        )
        rollouts = await store.enqueue([RolloutCreate(input=t) for t in tasks])
        async with serving_gateway(store) as (url, _):
            runner = Runner(store, CommandAgent(config), concurrency=2, gateway_url=url, **FAST)
            await runner.run(until_idle=True)
        for rollout in rollouts:
            [span] = command_spans((await store.query_spans(rollout.rollout_id)).items)
            assert span[semconv.COMMAND_STDOUT].startswith("refused"), span
    finally:
        other.close()
    # ...while the gateway is reachable: the first test's agent called it from the sandbox.


@needs_bwrap
async def test_the_file_system_is_read_only_outside_the_rollouts_own_directory(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    outside = tmp_path / "made-by-agent"
    agent = CommandAgent(CommandAgentConfig(command="true"))
    agent.setup()
    assert agent._spaces is not None
    neighbour = agent._spaces.base / "neighbour"  # another rollout's directory
    neighbour.mkdir()
    (neighbour / "secret").write_text("theirs")
    # A base holding a foreign directory outlives its runner: this test removes its own.
    request.addfinalizer(lambda: shutil.rmtree(neighbour.parent, ignore_errors=True))
    tasks = [
        {"what": "read", "arg": str(neighbour / "secret"), "arg2": "-"},
        {"what": "write", "arg": str(outside), "arg2": "-"},
        {"what": "write", "arg": "/etc/fulmen-agent-was-here", "arg2": "-"},
    ]
    config = CommandAgentConfig(
        command=[PY, HOSTILE, "${task.what}", "${task.arg}", "${task.arg2}"],
        reward_function="tests.agent.command.test_sandbox:always_one",
    )
    command_agent = CommandAgent(config, base=agent._spaces.base)
    rollouts = await store.enqueue([RolloutCreate(input=t) for t in tasks])
    async with serving_gateway(store) as (url, _):
        runner = Runner(store, command_agent, concurrency=3, gateway_url=url, **FAST)
        await runner.run(until_idle=True)
    outputs = []
    for rollout in rollouts:
        [span] = command_spans((await store.query_spans(rollout.rollout_id)).items)
        outputs.append(span[semconv.COMMAND_STDOUT])
    assert outputs[0].startswith("cannot read"), outputs[0]
    assert outputs[1].startswith("cannot write") and not outside.exists(), outputs[1]
    assert outputs[2].startswith("cannot write") and not Path("/etc/fulmen-agent-was-here").exists()


def test_a_missing_backend_or_an_impossible_network_rule_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic import ValidationError

    from fulmen.agent.command import SandboxConfig

    with pytest.raises(ValidationError, match="cannot restrict the network"):
        CommandAgentConfig(command="true", sandbox={"backend": "process"})
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(RuntimeError, match="bubblewrap is not installed"):
        Sandbox(SandboxConfig(backend="bwrap"), tmp_path)
    assert Sandbox(SandboxConfig(), tmp_path).backend == "process"  # auto, with a warning


@needs_bwrap
async def test_a_relay_that_cannot_start_fails_the_attempt_with_the_reason(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No relay, no command: the attempt fails saying so, never ``succeeded`` with no call."""
    import tempfile

    import fulmen.agent.command.sandbox as sandbox_module

    # The relay's interpreter where the sandbox does not show it (a folder it hides), as a
    # runner's virtual environment under /tmp once was.
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        folder.chmod(0o755)
        (folder / "python3").symlink_to(PY)
        monkeypatch.setattr(sandbox_module, "interpreter_for", lambda uid: str(folder / "python3"))
        config = CommandAgentConfig(
            command=[PY, HOSTILE, "read", "/etc/hostname", "-"],
            reward_function="tests.agent.command.test_sandbox:always_one",
            sandbox={"hidden_paths": [str(folder)]},
        )
        [rollout] = await store.enqueue([RolloutCreate(input={"x": 1})])
        async with serving_gateway(store) as (url, _):
            runner = Runner(store, CommandAgent(config), concurrency=1, gateway_url=url, **FAST)
            await runner.run(until_idle=True)
    finally:
        shutil.rmtree(folder)
    done = await store.get_rollout(rollout.rollout_id)
    assert done.status == "failed"
    assert "command could not be started in the sandbox" in (done.error or "")
    assert f"execvp {folder / 'python3'}: No such file" in (done.error or "")
    assert await store.list_rewards(rollout.rollout_id) == []


def test_files_the_sandbox_would_hide_are_refused_before_the_first_rollout() -> None:
    import tempfile

    from fulmen.errors import ConfigError

    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))  # one the rollouts' users may read
    try:
        folder.chmod(0o755)
        (folder / "agent.py").write_text("print(1)\n")
        command = [PY, "${config_dir}/agent.py"]
        hidden = CommandAgentConfig(
            command=command, config_dir=folder, sandbox={"hidden_paths": [str(folder)]}
        )
        with pytest.raises(ConfigError, match=r"lies in .* which the sandbox hides .*hidden_"):
            CommandAgent(hidden).setup()
        in_base = CommandAgentConfig(
            command=command, config_dir=folder, sandbox={"base_dir": str(folder)}
        )
        with pytest.raises(ConfigError, match=r"sandbox\.base_dir"):
            CommandAgent(in_base).setup()
        # The run folder the trainer hides, given to the agent by the runner.
        plain = CommandAgentConfig(command=command, config_dir=folder)
        with pytest.raises(ConfigError, match="the run folder or store"):
            CommandAgent(plain, hidden=[folder]).setup()
    finally:
        shutil.rmtree(folder)
