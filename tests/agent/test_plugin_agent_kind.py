"""An agent kind from outside ``fulmen/``: a distribution's entry point adds it, and it trains.

The test writes a small installed distribution into a folder it puts on ``PYTHONPATH``: an
``AgentKind`` row in the ``fulmen.agent_kinds`` group (``ask``: the config gives the words the
agent puts before each question) and, to train without a local model, the toy ``pick``
algorithm of ``tests/algorithms/test_plugin_algorithm.py`` in the ``fulmen.algorithms`` group.
``fulmen train`` with ``agent: {kind: ask, ...}`` must validate the mapping into the kind's spec,
run the kind's preflight (a refused spec stops the run before anything starts), build the agent
in the runner, name it in the run's identity with the spec's ``describe``, and train: the pick
algorithm ends serving the prompt the agent's rewards favour. ``fulmen runner --agent-spec``
(what fulmen hands the runners it starts on Ray and in deployments) reads the spec back.
Nothing under ``fulmen/`` names the kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.algorithms.test_plugin_algorithm import PLUGIN as PICK_PLUGIN
from tests.algorithms.test_plugin_algorithm import _run, reply
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app

KIND = '''
"""A toy agent kind: the config gives the words put before each question."""

from typing import Literal

from openai import AsyncOpenAI

import fulmen
from fulmen.agent.spec import AgentKind, AgentSpec
from fulmen.errors import ConfigError
from fulmen.types import PromptTemplate


class AskSpec(AgentSpec):
    kind: Literal["ask"] = "ask"
    lead: str
    max_tokens: int = 16

    def describe(self):
        return f"ask: {self.lead}"


def build(spec):
    @fulmen.rollout
    async def ask(task, llm: fulmen.LLM, prompt: PromptTemplate) -> float:
        messages = prompt.messages(question=f"{spec.lead} {task['question']}")
        async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
            reply = await client.chat.completions.create(
                model=llm.model, messages=messages, max_tokens=spec.max_tokens
            )
        return 1.0 if reply.choices[0].message.content == "careful" else 0.0

    return ask


def preflight(spec):
    if not spec.lead.strip():
        raise ConfigError("agent.lead is empty: the ask agent needs words to lead with")


ASK = AgentKind("ask", AskSpec, build=build, preflight=preflight, summary="asks, led by words")


def tasks():
    return [{"id": f"t{i}", "question": f"q{i}"} for i in range(4)]
'''

ENTRY_POINTS = """\
[fulmen.agent_kinds]
ask = ask_kind:ASK

[fulmen.algorithms]
pick = pick_plugin:ALGORITHM
"""


def _install(folder: Path) -> dict[str, str]:
    """Install the ``ask`` kind and the ``pick`` algorithm into ``folder``; return the env."""
    folder.mkdir()
    (folder / "ask_kind.py").write_text(KIND)
    (folder / "pick_plugin.py").write_text(PICK_PLUGIN)
    info = folder / "ask_kind-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ask-kind\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.getcwd()])}


def _config(path: Path, url: str, lead: str) -> Path:
    candidates = ["Answer.", "Think carefully, then answer.", "Answer fast."]
    path.write_text(
        textwrap.dedent(
            f"""\
            model: scripted
            agent: {{kind: ask, lead: "{lead}"}}
            run_dir: run
            data: {{train: "ask_kind:tasks"}}
            engine: {{kind: endpoint, url: "{url}/v1"}}
            rollouts: {{concurrency: 2, timeout_s: 30}}
            algorithm: {json.dumps({"name": "pick", "candidates": candidates})}
            """
        )
    )
    return path


async def test_an_agent_kind_added_by_an_entry_point_is_checked_named_and_trained(
    tmp_path: Path,
) -> None:
    env = _install(tmp_path / "site")
    async with serve_app(create_upstream_app(Script(reply_for=reply))) as url:
        bad = _config(tmp_path / "bad.yaml", url, " ")
        refused = subprocess.run(
            [sys.executable, "-m", "fulmen", "train", str(bad)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode != 0
        assert "agent.lead is empty: the ask agent needs words to lead with" in refused.stderr
        assert not (tmp_path / "run" / "store.db").exists()  # refused before anything started

        config = _config(tmp_path / "ask.yaml", url, "Please:")
        out = await _run([sys.executable, "-m", "fulmen", "train", str(config)], env, tmp_path)

    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["identity"]["agent"] == "ask: Please:"
    assert state["settings"]["agent"] == {"kind": "ask", "lead": "Please:", "max_tokens": 16}
    metrics = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["reward/mean"] for m in metrics if "reward/mean" in m] == [0.0, 1.0, 0.0], out

    # What a runner started on Ray or in a deployment is given, read back by `fulmen runner`.
    code = textwrap.dedent(
        """
        from ask_kind import AskSpec
        from fulmen.agent.spec import runner_agent_args
        from fulmen.cli.main import build_parser

        spec = AskSpec(lead="Please:")
        args = runner_agent_args(spec)
        parsed = build_parser().parse_args(["runner", "--store", "x.db", *args])
        from fulmen.cli.runner import _agent
        print(args[0], _agent(parsed) == spec)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.stdout.split() == ["--agent-spec", "True"], done.stderr


def test_an_unknown_kind_is_refused_with_the_kinds_there_are(tmp_path: Path) -> None:
    env = _install(tmp_path / "site")
    code = (
        "from fulmen.trainer.config import TrainConfig\n"
        "TrainConfig.model_validate({'model': 'tiny', 'agent': {'kind': 'tell'},"
        " 'data': {'train': 'a:b'}})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert "agent.kind 'tell': no such agent kind (available: command, ask)" in done.stderr
