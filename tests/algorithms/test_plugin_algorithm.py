"""An algorithm from outside ``fulmen/``: a distribution's entry point adds it, and it trains.

The test writes a small installed distribution (a package and its ``.dist-info`` with an entry
point in the ``fulmen.algorithms`` group) into a folder it puts on ``PYTHONPATH``, then runs
``fulmen train`` with ``algorithm: {name: pick, ...}``. Nothing under ``fulmen/`` names it: the
config union, the dispatch, ``fulmen train --help`` and the config checks all read the
registry. The toy algorithm publishes each candidate prompt, runs the training tasks with it,
and ends serving the best one; the agent calls the model (a scripted upstream behind the real
gateway) and is rewarded when the prompt it received asks for care.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

from fulmen.store import open_store
from fulmen.types import PromptTemplate
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

PLUGIN = '''
"""A toy prompt-selection algorithm: publish each candidate, keep the best-rewarded one."""

import statistics
from typing import Literal

from pydantic import Field

from fulmen.algorithms.registry import Algorithm
from fulmen.algorithms.section import AlgorithmSection
from fulmen.types import Mode, PromptTemplate


class PickConfig(AlgorithmSection):
    name: Literal["pick"] = "pick"
    candidates: list[str] = Field(min_length=2)
    tasks: int = Field(default=2, ge=1)

    def planned(self):
        return len(self.candidates), "candidates"


def template(text):
    return PromptTemplate(instructions=text, template="Question: {question}")


async def run_pick(config, context):
    history, means = [], []
    for index, text in enumerate(config.candidates):
        version = await context.rollouts.publish({"prompt": template(text)})
        batch = context.tasks.batch(index, config.tasks)
        rollouts = await context.rollouts.run(
            batch, mode=Mode.TRAIN, version=version, tag=f"pick{index}"
        )
        means.append(statistics.fmean(await context.rollouts.rewards(rollouts)))
        metrics = {"reward/mean": means[-1], "pick/candidate": float(index)}
        context.progress.log(index + 1, metrics)
        context.progress.save(index + 1)
        history.append(metrics)
    best = max(range(len(means)), key=means.__getitem__)
    await context.rollouts.publish({"prompt": template(config.candidates[best])})
    return history


ALGORITHM = Algorithm(
    "pick",
    "pick_plugin:PickConfig",
    "pick_plugin:run_pick",
    "picks the best of a few prompts (a test's plugin)",
    trains_weights=False,
    learns_offline=False,
)
'''

AGENT = """
from openai import AsyncOpenAI

import fulmen
from fulmen.types import PromptTemplate


@fulmen.rollout
async def careful_agent(task, llm: fulmen.LLM, prompt: PromptTemplate) -> float:
    async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=prompt.messages(question=task["question"]), max_tokens=16
        )
    said = reply.choices[0].message.content or ""
    return 1.0 if said == "careful" else 0.0


def tasks():
    return [{"id": f"t{i}", "question": f"q{i}"} for i in range(4)]
"""


def write_plugin(folder: Path) -> None:
    """Install the ``pick`` algorithm into ``folder`` as a distribution with an entry point."""
    (folder / "pick_plugin.py").write_text(PLUGIN)
    (folder / "pick_agent.py").write_text(AGENT)
    info = folder / "pick_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pick-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fulmen.algorithms]\npick = pick_plugin:ALGORITHM\n")


def reply(body: dict[str, object]) -> Reply:
    """Say ``careful`` when the instructions ask for care."""
    messages = body["messages"]
    assert isinstance(messages, list)
    first = str(messages[0]["content"])  # type: ignore[index]
    return Reply(content="careful" if "carefully" in first else "hasty")


async def test_an_algorithm_added_by_an_entry_point_trains_and_serves_its_pick(
    tmp_path: Path,
) -> None:
    plugin = tmp_path / "site"
    plugin.mkdir()
    write_plugin(plugin)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), os.getcwd()])}
    help_text = await _run([sys.executable, "-m", "fulmen", "train", "--help"], env, tmp_path)
    assert "pick    picks the best of a few prompts" in help_text

    async with serve_app(create_upstream_app(Script(reply_for=reply))) as url:
        config = tmp_path / "pick.yaml"
        candidates = ["Answer.", "Think carefully, then answer.", "Answer fast."]
        config.write_text(
            textwrap.dedent(
                f"""\
                model: scripted
                agent: pick_agent:careful_agent
                run_dir: run
                data: {{train: "pick_agent:tasks"}}
                engine: {{kind: endpoint, url: "{url}/v1"}}
                rollouts: {{concurrency: 2, timeout_s: 30}}
                algorithm: {json.dumps({"name": "pick", "candidates": candidates})}
                """
            )
        )
        out = await _run([sys.executable, "-m", "fulmen", "train", str(config)], env, tmp_path)

    db = tmp_path / "run" / "store.db"
    async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
        latest = await store.latest_resources()
    assert latest is not None
    served = latest.resources["prompt"]
    assert isinstance(served, PromptTemplate)
    assert served.instructions == "Think carefully, then answer.", out
    metrics = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    means = [m["reward/mean"] for m in metrics if "reward/mean" in m]
    assert means == [0.0, 1.0, 0.0]
    assert "done: 3 steps in this run, 3 in all" in out


async def _run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``command``; return its output, failing the test with it when it fails."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    text = output.decode()
    assert process.returncode == 0, text
    return text
