"""``fulmen train`` with an agent that is a program: the toy task's JavaScript agent, sandboxed.

``examples/toy_command`` runs ``node agent.mjs`` per rollout and scores it with a Python
verifier program; two GRPO steps on the tiny model must train on every call the program made,
on-policy, with the command's exit status and the verifier's reward in the store.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from fulmen.store import open_store
from fulmen.tracing import semconv
from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from fulmen.types import RolloutQuery

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    (shutil.which("node") is None or shutil.which("bwrap") is None)
    and os.environ.get("CI") != "true",
    reason="needs Node and bubblewrap (scripts/test.sh installs bubblewrap)",
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "toy_command"


def test_a_javascript_command_agent_trains_on_policy(tmp_path: Path) -> None:
    config = load_config(
        EXAMPLE / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            "algorithm.steps=2",
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=4",
            "validation=null",
            "data.val=null",
            "rollouts.concurrency=8",
        ],
    )
    assert config.agent is not None and not isinstance(config.agent, str)
    assert config.agent.folder == EXAMPLE  # ${config_dir} is the config file's folder
    history = Trainer(config).fit()
    assert len(history) == 2
    for step in history:
        assert step["rollouts/failed"] == 0
        assert step["transitions"] == 8  # one model call per rollout, all token-level
        assert step["logprob_gap"] < 1e-3  # the engine's logprobs are the trainer's
    ended = asyncio.run(_command_spans(config.run_dir / "store.db"))
    assert sorted(set(ended)) == [("command", 0), ("verifier", 0)]
    assert len(ended) == 2 * 16  # the agent and its verifier, for each of 16 rollouts


async def _command_spans(path: Path) -> list[tuple[str, int]]:
    """(role, exit status) of every ``fulmen.command`` span in the run's store."""
    ended = []
    async with open_store(f"sqlite:///{path}") as store:
        for rollout in (await store.query_rollouts(RolloutQuery(limit=100))).items:
            for span in (await store.query_spans(rollout.rollout_id)).items:
                if span.name == semconv.SPAN_COMMAND:
                    attributes = span.attributes
                    ended.append(
                        (attributes[semconv.COMMAND_ROLE], attributes[semconv.COMMAND_EXIT_CODE])
                    )
    return ended
