"""PPO and DPO with ``untrained_agents: base``: the policy serves only the agents it trains.

The agent makes three calls per rollout, as ``planner``, ``actor`` and ``critic``;
``transitions.agents`` trains the planner and the actor. After the first update their calls are
answered by the adapter and the critic's by the base model, with the agent asking for
``llm.model`` every time (the gateway routes by the ``x-fulmen-agent`` header). With the default
(``policy``) the adapter answers all three, the critic included.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from tests.trainer.test_roles_run import AGENT, _calls_by_step, _train
from tests.trainer.test_roles_run import CONFIG as ROLES_CONFIG

# the per-role test's config without its algorithm section
CONFIG = ROLES_CONFIG.split("algorithm:")[0]

ALGORITHMS = {
    "ppo": "{name: ppo, steps: 2, tasks_per_step: 2, group_size: 2, ppo: {learning_rate: 0.01}",
    "dpo": "{name: dpo, steps: 2, tasks_per_step: 2, group_size: 2, min_margin: 0.0, "
    "dpo: {learning_rate: 0.01}",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    # the default (``policy``) is pinned without an engine in test_behaviour_rollouts.py
    ("name", "untrained"),
    [("ppo", "base"), ("dpo", "base")],
)
def test_the_policy_serves_the_trained_agents_and_the_base_the_others(
    tmp_path: Path, name: str, untrained: str
) -> None:
    pytest.importorskip("torch")
    (tmp_path / "my_agent.py").write_text(AGENT)
    (tmp_path / "config.yaml").write_text(textwrap.dedent(CONFIG))
    algorithm = (
        f"{ALGORITHMS[name]}, untrained_agents: {untrained}, "
        "transitions: {agents: [planner, act*]}}"
    )
    done = _train(tmp_path, f"algorithm={algorithm}")
    assert done.returncode == 0, done.stderr[-3000:]

    calls = asyncio.run(_calls_by_step(tmp_path / "run" / "store.db"))
    assert set(calls["s0"]) == {("planner", "tiny"), ("actor", "tiny"), ("critic", "tiny")}
    critic = "tiny" if untrained == "base" else "policy-1"
    assert set(calls["s1"]) == {("planner", "policy-1"), ("actor", "policy-1"), ("critic", critic)}
    # the last publish (step 2's rollouts) routed the trained agents to the adapter
    routes = [("planner", "policy-1"), ("act*", "policy-1")] if untrained == "base" else []
    assert calls["routes"] == routes
