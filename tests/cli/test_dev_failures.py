"""`fulmen dev` shows why no rollout produced a reward, and exits non-zero for it.

Before: a command agent that crashed before calling the model, and a Python agent that returned
``None``, both printed ``status=succeeded reward=None … 0 transitions`` and exited 0, with no
exit status or stderr. The agents run through the real runner and gateway against the scripted
upstream on 127.0.0.1 (no engine); the dry run's store is a real SQLite file, read back to check
the command span's recorded duration and status.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import textwrap
from collections import deque
from pathlib import Path

import pytest

from fulmen.agent.command.sandbox import interpreter_for
from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.types import RolloutQuery
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

# Prints a little, then raises before any model call: the traceback is the last of its stderr.
CRASH = (
    "import sys\n"
    "for i in range(30): print(f'loading part {i}', file=sys.stderr)\n"
    "raise RuntimeError('no API key configured')\n"
)

NO_REWARD_AGENT = """
import fulmen


@fulmen.rollout
def forgetful(task, llm):
    return None  # the reward was never computed
"""


def _project(tmp_path: Path, agent: str) -> Path:
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0"}\n{"id": "t1"}\n')
    (tmp_path / "forgetful.py").write_text(NO_REWARD_AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            model: tiny-model
            agent: {agent}
            python_path: ["."]
            run_dir: run
            data: {{train: tasks.jsonl}}
            rollouts: {{concurrency: 2, timeout_s: 60}}
            """
        )
    )
    return config


async def _dev(config: Path, store: Path) -> tuple[int, str, str]:
    script = Script(replies=deque([Reply(content="unused")]))
    out, err = io.StringIO(), io.StringIO()
    async with serve_app(create_upstream_app(script)) as upstream:
        args = ["dev", str(config), "-n", "2", "--endpoint", f"{upstream}/v1", "--model", "m"]
        args += ["--store", str(store)]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = await asyncio.to_thread(main, args)
    return code, out.getvalue(), err.getvalue()


async def test_a_command_that_crashes_shows_its_exit_status_and_stderr_and_fails_dev(
    tmp_path: Path,
) -> None:
    python = interpreter_for(61000)  # one the rollout's own user may run, too
    agent = json.dumps({"command": [python, "-c", CRASH]})  # JSON is YAML
    store = tmp_path / "dev.db"
    code, out, err = await _dev(_project(tmp_path, agent), store)

    assert code == 1, out + err
    assert out.count("   command exited 1 before calling the model (") == 2, out
    assert out.count("      stderr (last 20 lines):\n") == 2
    shown = out.split("stderr (last 20 lines):\n", 1)[1].splitlines()[:20]
    assert shown[0] == "      | loading part 13"  # the last 20 lines: 17 printed, 3 traceback
    assert shown[-1] == "      | RuntimeError: no API key configured"
    assert "2/2 rollouts succeeded, 0 with a reward; mean reward nan; 0 transitions" in out
    assert (
        "fulmen dev: no rollout produced a reward, so training would learn nothing; the first: "
        "the command exited 1 before calling the model ("
    ) in err
    assert "its stderr ended with: RuntimeError: no API key configured" in err

    # The stored command span covers the command's run and says it failed.
    async with open_store(f"sqlite:///{store}", watchdog_interval=None) as opened:
        for rollout in (await opened.query_rollouts(RolloutQuery())).items:
            spans = (await opened.query_spans(rollout.rollout_id)).items
            (command,) = [s for s in spans if s.name == semconv.SPAN_COMMAND]
            assert command.attributes[semconv.COMMAND_EXIT_CODE] == 1
            assert command.start_time is not None and command.end_time is not None
            took = command.end_time - command.start_time
            assert took == pytest.approx(command.attributes[semconv.COMMAND_DURATION_S], abs=1e-3)
            assert took > 0.01  # a Python interpreter's start, not the 0 ms it was shown as
            assert command.status.code.value == "error"
            assert command.status.message == "exited with status 1"


async def test_an_agent_returning_none_fails_dev_naming_the_missing_reward(
    tmp_path: Path,
) -> None:
    code, out, err = await _dev(_project(tmp_path, "forgetful:forgetful"), tmp_path / "dev.db")
    assert code == 1, out + err
    reason = (
        "the agent returned None and emitted no reward (return a number, or call "
        "fulmen.emit_reward)"
    )
    assert out.count(f"   no reward: {reason}\n") == 2
    assert (
        "fulmen dev: no rollout produced a reward, so training would learn nothing; the first: "
        + reason
    ) in err
