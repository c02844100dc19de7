"""Claude Code, the Codex CLI and a Vercel AI SDK agent, unchanged, as command agents.

Each runs through fulmen's real runner (sandboxed, as a user of its own under root) and gateway
in front of a scripted vLLM-like engine: the engine answers the agent's first call with a tool
call that writes a file and its next call with a final text; the agent's own tool does the
writing; a verifier program scores the file. Every call must be stored at token level and make
a training transition, with the verifier's reward: 1.0 for a task that asked for what the model
wrote, 0.0 for one that asked for something else. The recipes in ``docs/command-agents.md``
must be the settings these tests run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fulmen.agent.command import CommandAgent, CommandAgentConfig
from fulmen.agent.command.sandbox import interpreter_for
from fulmen.agent.runner import Runner
from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import Store
from fulmen.tracing import rewards_from_spans
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import RolloutCreate
from tests.agent.conftest import FAST
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

HERE = Path(__file__).parent
DOCS = HERE.parents[1] / "docs" / "command-agents.md"
BIN = HERE / "node_modules" / ".bin"
PY = interpreter_for(61000)  # one that a rollout's own user may run, too
VERIFIER = {"command": [PY, str(HERE / "check_file.py")]}
# The model always writes "hi"; the second task wants "ho" and scores 0.
TASKS = [
    {"prompt": "Write the word hi into hello.txt.", "file": "hello.txt", "expect": "hi"},
    {"prompt": "Write the word ho into hello.txt.", "file": "hello.txt", "expect": "ho"},
]
FINAL_TEXT = "Done: hello.txt is written."

# docs/command-agents.md, "Recipes": the same settings, with the npm-installed executables.
CLAUDE_CODE: dict[str, Any] = {
    "command": [
        str(BIN / "claude"),
        "-p",
        "${task.prompt}",
        "--model",
        "${model}",
        "--output-format",
        "json",
        "--allowedTools",
        "Bash",
        "Write",
        "Read",
    ],
    "env": {
        "ANTHROPIC_MODEL": "${model}",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "${model}",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "${model}",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "${model}",
        "CLAUDE_CONFIG_DIR": "${home}/.claude",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    },
}
CODEX_CONFIG = """\
model = "${model}"
model_provider = "fulmen"
sandbox_mode = "danger-full-access"
approval_policy = "never"

[analytics]
enabled = false

[model_providers.fulmen]
name = "fulmen"
base_url = "${openai_base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""
CODEX: dict[str, Any] = {
    "command": [
        str(BIN / "codex"),
        "exec",
        "--skip-git-repo-check",
        "--ephemeral",
        "-o",
        "last.txt",
        "${task.prompt}",
    ],
    "env": {"CODEX_HOME": "${home}/.codex"},
    "files": {"~/.codex/config.toml": CODEX_CONFIG},
}


def ai_sdk(api: str, mode: str) -> dict[str, Any]:
    """``ai_sdk_agent.mjs`` on one provider (chat, responses, messages), streamed or not."""
    return {"command": ["node", str(HERE / "ai_sdk_agent.mjs"), api, mode, "${task.prompt}"]}


@dataclass(frozen=True)
class Case:
    """One agent: how it runs, the tool call that makes it write the file, what is recorded."""

    config: dict[str, Any]
    tool: tuple[str, dict[str, Any]]
    endpoint: str
    is_stream: bool
    session_headers: tuple[str, ...] = ()


AI_SDK_TOOL = ("write_file", {"path": "hello.txt", "content": "hi"})
CASES = {
    "claude-code": Case(
        CLAUDE_CODE,
        ("Write", {"file_path": "hello.txt", "content": "hi"}),
        "messages",
        True,
        ("x-claude-code-session-id",),
    ),
    "codex": Case(
        CODEX,
        ("exec_command", {"cmd": "printf hi > hello.txt"}),
        "responses",
        True,
        ("session-id", "thread-id"),
    ),
    **{
        f"ai-sdk-{api}-{mode}": Case(ai_sdk(api, mode), AI_SDK_TOOL, endpoint, mode == "stream")
        for api, endpoint in [
            ("chat", "chat/completions"),
            ("responses", "responses"),
            ("messages", "messages"),
        ]
        for mode in ["generate", "stream"]
    },
}


def scripted_model(tool: tuple[str, dict[str, Any]]) -> Script:
    """An engine that calls ``tool`` first and answers with text once it sees a tool result."""

    def reply(body: dict[str, Any]) -> Reply:
        has_result = any(m.get("role") == "tool" for m in body["messages"])
        if body.get("tools") and not has_result:
            return Reply(tool_calls=[tool])
        return Reply(content=FINAL_TEXT)

    return Script(reply_for=reply)


@asynccontextmanager
async def serving_gateway(store: Store, script: Script) -> AsyncIterator[tuple[str, Any]]:
    """The gateway on 127.0.0.1 in front of the scripted engine; every model name → policy."""
    async with serve_app(create_upstream_app(script)) as upstream_root:
        config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, model_map={"*": "policy"})
        app = create_app(store, [f"{upstream_root}/v1"], config=config)
        async with serve_app(app) as url:
            yield url, app.state.gateway


@pytest.mark.usefixtures("npm_packages")
@pytest.mark.parametrize("name", list(CASES))
async def test_the_agent_runs_unchanged_and_every_call_trains(store: Store, name: str) -> None:
    case = CASES[name]
    agent = CommandAgent(
        CommandAgentConfig(**case.config, verifier=VERIFIER, timeout_s=60, fail_on_exit_code=True)
    )
    rollouts = await store.enqueue([RolloutCreate(input=task) for task in TASKS])
    async with serving_gateway(store, scripted_model(case.tool)) as (url, gateway):
        await Runner(store, agent, concurrency=2, gateway_url=url, **FAST).run(until_idle=True)
        await gateway.flush()
    for rollout, reward in zip(rollouts, [1.0, 0.0], strict=True):
        done = await store.get_rollout(rollout.rollout_id)
        assert done.status == "succeeded", done.error
        records = await load_attempt(store, rollout.rollout_id)
        assert rewards_from_spans(records.spans) == {"reward": reward}
        calls = records.calls
        assert len(calls) == 2, [c.request.get("model") for c in calls]  # tool call, answer
        for call in calls:
            assert call.endpoint == case.endpoint and call.is_stream == case.is_stream
            assert call.is_token_level and call.prompt_token_ids and call.error is None
            [choice] = call.choices
            assert choice.token_ids and choice.logprobs
            assert len(choice.token_ids) == len(choice.logprobs)
        # The engine's tokens, as it generated them: the tool call, then the answer.
        generated = ["".join(map(chr, c.choices[0].token_ids or [])) for c in calls]
        assert generated[0].startswith(f"<tool_call>{case.tool[0]}:")
        assert generated[1] == FINAL_TEXT
        # The tool's result went back to the model: the second prompt holds the first call's.
        assert calls[1].prompt_token_ids is not None and calls[0].prompt_token_ids is not None
        assert len(calls[1].prompt_token_ids) > len(calls[0].prompt_token_ids)
        for header in case.session_headers:  # the client's session, recorded with each call
            values = {c.client_headers.get(header) for c in calls}
            assert len(values) == 1 and None not in values, (header, values)
        trajectory = records.trajectory()
        assert trajectory.final_reward == reward
        assert [t.call_ids for t in trajectory.transitions] == [[c.call_id] for c in calls]
        for transition in trajectory.transitions:
            assert transition.reward == reward and transition.completion_token_ids


def test_the_recipes_in_the_docs_are_what_these_tests_run() -> None:
    recipes = DOCS.read_text().split("## Recipes", 1)[1]
    blocks = [block.split("```", 1)[0] for block in recipes.split("```yaml\n")[1:]]
    documented = {
        Path(agent["command"][0]).name: agent
        for agent in (yaml.safe_load(block)["agent"] for block in blocks)
    }
    for tested in (CLAUDE_CODE, CODEX):
        recipe = documented[Path(tested["command"][0]).name]
        assert recipe["command"] == [Path(tested["command"][0]).name, *tested["command"][1:]]
        assert recipe["env"] == tested["env"]
        assert recipe.get("files", {}) == tested.get("files", {})
