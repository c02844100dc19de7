"""`fulmen train` with one LoRA adapter per role (`algorithm.adapters`), end to end.

The agent makes three calls per rollout, as `planner`, `actor` and `critic`; the config gives
the planner and the actor one adapter each and leaves the critic out. After a step each role's
calls are answered by its own adapter and the critic's by the base model, with the agent asking
for `llm.model` every time (the gateway routes by agent name). A second start resumes: the
served adapters come back from `state.json` and training continues from the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.prefork import python

AGENT = '''
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "prompt": f"Say {w}."} for i, w in enumerate(["a", "b", "c"])]


@fulmen.rollout
def three_roles(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """Three named calls; the reward depends on the sampled texts, so groups differ."""
    texts = []
    with OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        for role in ("planner", "actor", "critic"):
            with fulmen.as_agent(role):
                out = client.chat.completions.create(
                    model=llm.model, messages=[{"role": "user", "content": task["prompt"]}]
                )
            texts.append(out.choices[0].message.content or "")
    return (sum(map(ord, "".join(texts))) % 7) / 6
'''

CONFIG = """\
model: tiny
agent: my_agent:three_roles
python_path: ['.']
run_dir: run
data: {train: "my_agent:tasks"}
rollouts:
  concurrency: 4
  timeout_s: 60
  train_sampling: {temperature: 1.0, max_tokens: 6}
algorithm:
  steps: 2
  tasks_per_step: 2
  group_size: 4
  grpo: {learning_rate: 0.01}
  adapters:
    planner: [planner]
    actor: [act*]
"""


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    sets = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run(
        [python(), "-m", "fulmen", "train", "config.yaml", *sets],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


async def _calls_by_step(db: Path) -> dict[str, list[tuple[str | None, str | None]]]:
    """(agent, model that answered) of every call, by the rollout's step tag (``s0``, ...)."""
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import RolloutQuery

    out: dict[str, list[tuple[str | None, str | None]]] = {}
    async with open_store(f"sqlite:///{db}", watchdog_interval=None) as store:
        async for rollout in iter_rollouts(store, RolloutQuery(limit=1000)):
            tag = rollout.rollout_id.split("-")[-3]
            records = await load_attempt(store, rollout.rollout_id)
            out.setdefault(tag, []).extend((c.agent_name, c.model) for c in records.calls)
        latest = await store.latest_resources()
        assert latest is not None
    out["routes"] = list(latest.resources["llm"].agent_models.items())  # type: ignore[union-attr]
    return out


@pytest.mark.slow
def test_each_role_trains_and_serves_its_own_adapter_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_agent.py").write_text(AGENT)
    (tmp_path / "config.yaml").write_text(textwrap.dedent(CONFIG))

    first = _train(tmp_path, "algorithm.steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["role_adapters"] == {
        "planner": "adapters/planner/step-00001",
        "actor": "adapters/actor/step-00001",
    }, first.stderr[-3000:]
    for role in ("planner", "actor"):
        files = {p.name for p in (tmp_path / "run" / "adapters" / role / "step-00001").iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files
        assert (tmp_path / "run" / "checkpoints" / "step-00001" / role).is_dir()

    second = _train(tmp_path)  # steps: 2 -> resumes after step 1
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming after step 1" in second.stderr

    calls = asyncio.run(_calls_by_step(tmp_path / "run" / "store.db"))
    assert set(calls["s0"]) == {("planner", "tiny"), ("actor", "tiny"), ("critic", "tiny")}
    # step 2 ran after the restart: the restored adapters answered their roles' calls
    assert set(calls["s1"]) == {
        ("planner", "policy-planner-1"),
        ("actor", "policy-actor-1"),
        ("critic", "tiny"),
    }
    # the last publish (step 2's) routed each role's patterns to its adapter, in config order
    assert calls["routes"] == [("planner", "policy-planner-1"), ("act*", "policy-actor-1")]
    for role in ("planner", "actor"):
        assert (tmp_path / "run" / "adapters" / role / "step-00002").is_dir()
