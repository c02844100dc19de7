"""The calc agent in JavaScript (``examples/calc_js``) is the Python calc agent, call for call.

It must send exactly the messages ``CALC_PROMPT`` renders, compute what ``calculator()``
computes, and, run as a command agent through the runner, sandbox and gateway, make the two
recorded token-level calls and earn 1.0 only for the right answer. Its training config must
be the Python example's in everything but the agent.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.runner import Runner
from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import open_store
from fulmen.tracing import rewards_from_spans, semconv
from fulmen.trainer.config import load_config
from fulmen.types import LLMResource, ResourcesCreate, RolloutCreate
from tests.examples.loading import EXAMPLES
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

pytestmark = pytest.mark.skipif(
    (shutil.which("node") is None or shutil.which("bwrap") is None)
    and os.environ.get("CI") != "true",
    reason="needs Node and bubblewrap (scripts/test.sh installs bubblewrap)",
)

AGENT = EXAMPLES / "calc_js" / "agent.mjs"
FOLDERS = (EXAMPLES / "calc_js", EXAMPLES / "calc")  # the config's python_path


@pytest.fixture
def calc() -> Iterator[dict[str, ModuleType]]:
    """calc's ``agent`` and calc_js's reward, imported as ``fulmen train`` imports them.

    Another example's ``agent`` (the toy's) may already be imported in this process: it is set
    aside while these are imported and put back after.
    """
    names = ("agent", "calc_js_reward", "tasks")
    aside = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path[:0] = [str(folder) for folder in FOLDERS]
    try:
        yield {name: importlib.import_module(name) for name in ("agent", "calc_js_reward")}
    finally:
        for folder in FOLDERS:
            sys.path.remove(str(folder))
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").parent in FOLDERS:
                del sys.modules[name]
        sys.modules.update(aside)


def node(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(AGENT), *args], capture_output=True, text=True, env=env, timeout=30
    )


@pytest.mark.parametrize(
    "question",
    [
        "Tom has 3 apples and buys 4 more. How many apples does Tom have now?",
        'A "quoted" {brace} question with a \\ backslash, ünïcode and $dollars?',
        "Two\nlines",
    ],
)
def test_the_agent_sends_exactly_the_python_prompt(
    calc: dict[str, ModuleType], question: str
) -> None:
    printed = node("--print-messages", question)
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == calc["agent"].CALC_PROMPT.messages(question=question)


CALCULATOR_CASES = [
    "CALC(2 + 3)",
    "CALC((7 + 8) * 4)",
    "CALC( 2*(3+4) )",
    "I think CALC(3 * (4 + 5)) then CALC(1+1)",
    "CALC(12 + 5)ANSWER",
    "CALC(1.5 * 2)",
    "CALC(0.5 + .25)",
    "CALC(10 / 4)",
    "CALC(2/3)",
    "CALC(-2/3)",
    "CALC(123456789 / 7)",
    "CALC(1/3000000)",
    "CALC(1/16 + 1)",  # a tie at the fourth digit: rounded half to even
    "CALC(9999.5)",
    "CALC(0.1 + 0.2)",
    "CALC(2 - -3)",
    "CALC(1e21)",
    "CALC(1/0)",
    "CALC(2 +)",
    "CALC()",
    "CALC(05)",
    "CALC(1.2.3)",
    "CALC(x * 2)",
    "CALC(2 ** 3)",
    "CALC(7 // 2)",
    "CALC(+2)",
    "CALC(((1+2)))",  # nested too deep for the pattern: no call
    "no tool call",
]


def test_the_calculator_computes_what_the_python_one_does(calc: dict[str, ModuleType]) -> None:
    printed = node("--calculator", *CALCULATOR_CASES)
    assert printed.returncode == 0, printed.stderr
    expected = [calc["agent"].calculator(text) for text in CALCULATOR_CASES]
    assert json.loads(printed.stdout) == expected


def test_the_config_is_the_python_examples_but_for_the_agent() -> None:
    python = load_config(EXAMPLES / "calc" / "config.yaml").model_dump()
    javascript = load_config(EXAMPLES / "calc_js" / "config.yaml").model_dump()
    assert {key for key in python if python[key] != javascript[key]} == {
        "agent",
        "python_path",
        "run_dir",
    }


QUESTION = "What is 2 plus 3?"


def reply(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]["content"]
    return Reply(content="ANSWER: 5" if last.startswith("RESULT:") else "CALC(2 + 3)")


async def test_through_runner_and_gateway_two_calls_and_the_exact_answer_scores(
    calc: dict[str, ModuleType],
) -> None:
    config = load_config(EXAMPLES / "calc_js" / "config.yaml").agent
    assert isinstance(config, CommandAgentConfig)
    tasks = [{"id": "right", "question": QUESTION, "answer": 5}]
    tasks.append({"id": "wrong", "question": QUESTION, "answer": 6})
    store = await open_store("memory://")
    try:
        async with serve_app(create_upstream_app(Script(reply_for=reply))) as upstream:
            llm = LLMResource(base_url=f"{upstream}/v1", model="m")
            await store.add_resources(ResourcesCreate(resources={"llm": llm}))
            rollouts = await store.enqueue([RolloutCreate(input=task) for task in tasks])
            app = create_app(store, [f"{upstream}/v1"], config=GatewayConfig(flush_interval_s=0.01))
            async with serve_app(app) as gateway_url:
                runner = Runner(
                    store, CommandAgent(config), concurrency=2, gateway_url=gateway_url,
                    poll_interval=0.02, heartbeat_interval=0.1, span_interval=0.02,
                )  # fmt: skip
                stats = await runner.run(until_idle=True)
                await app.state.gateway.flush()
        assert stats.succeeded == 2
        first_messages = calc["agent"].CALC_PROMPT.messages(question=QUESTION)
        for rollout, expected in zip(rollouts, [1.0, 0.0], strict=True):
            calls = (await store.query_llm_calls(rollout.rollout_id)).items
            first, second = sorted(calls, key=lambda call: call.sequence)
            assert all(call.is_token_level and call.prompt_token_ids for call in calls)
            assert first.request["messages"] == first_messages
            assert second.request["messages"] == [
                *first_messages,
                {"role": "assistant", "content": "CALC(2 + 3)"},
                {"role": "user", "content": "RESULT: 5"},
            ]
            for call in calls:  # what the Python agent passes, and nothing more
                sent = {k: v for k, v in call.request.items() if k not in ("model", "messages")}
                assert sent == {"max_tokens": 24, "stop": ["\n"]}
            spans = (await store.query_spans(rollout.rollout_id)).items
            assert rewards_from_spans(spans) == {"reward": expected}
            [ran] = [s.attributes for s in spans if s.name == semconv.SPAN_COMMAND]
            assert str(ran[semconv.COMMAND_SANDBOX]).startswith("bwrap")
            assert ran[semconv.COMMAND_EXIT_CODE] == 0
            assert str(ran[semconv.COMMAND_STDOUT]).strip() == "ANSWER: 5"
    finally:
        await store.aclose()


async def test_a_failed_model_call_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps({"question": QUESTION, "answer": 5}))
    async with serve_app(create_upstream_app(Script())) as upstream:
        env = {
            "PATH": os.environ["PATH"],
            "FULMEN_TASK_FILE": str(task_file),
            "OPENAI_BASE_URL": f"{upstream}/no-such-path",  # a 404: not retried
            "OPENAI_API_KEY": "k",
            "FULMEN_MODEL": "m",
        }
        ran = await asyncio.to_thread(node, env=env)
    assert ran.returncode == 1
    assert ran.stderr.startswith("model call failed: status 404") and ran.stdout == ""
