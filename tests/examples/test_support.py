"""The support example end to end with the ``tiny`` model and a handful of sessions.

The real built-in engine serves the bot through a real gateway in production capture mode
(``examples/support/gateway.yaml``: sessions by ``x-session-id``); the feedback job posts
rewards by session id after the sessions were written; ``fulmen train
examples/support/offline.yaml`` runs offline SFT on them (every rewarded session is kept here:
the tiny model never routes right, so ``min_reward`` is lowered) and, since the feedback job
stores reviewers' re-routes, on the corrected sessions too; the held-out evaluation scores
the base model and the adapter on the same new customers. Each step's output is checked in the
store and the run directory.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fulmen.store import open_store
from fulmen.transitions.trajectory import load_trajectory
from fulmen.types import Mode, RolloutQuery, RolloutStatus
from fulmen.types.rewards import session_rollout_id

pytest.importorskip("torch")
pytest.importorskip("openai")

SUPPORT = Path(__file__).resolve().parents[2] / "examples" / "support"
SESSIONS = 6


@pytest.fixture
def support_modules() -> Iterator[None]:
    """Import the example's modules by their own names, and forget them afterwards."""
    path, modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(SUPPORT))
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if name in ("bot", "customers", "traffic", "feedback", "evaluate", "run"):
            del sys.modules[name]


async def stored_sessions(out: Path) -> list[tuple[str, float | None, int]]:
    """(rollout id, latest reward, token-level transitions) of each stored production session."""
    async with open_store(f"sqlite:///{out / 'traffic.db'}", watchdog_interval=None) as store:
        query = RolloutQuery(mode=Mode.PRODUCTION, statuses=[RolloutStatus.SUCCEEDED])
        rollouts = (await store.query_rollouts(query)).items
        out_rows = []
        for rollout in rollouts:
            trajectory = await load_trajectory(store, rollout.rollout_id)
            out_rows.append(
                (rollout.rollout_id, trajectory.final_reward, len(trajectory.transitions))
            )
        return out_rows


@pytest.mark.slow
def test_the_support_pipeline_runs_end_to_end_on_the_tiny_model(
    tmp_path: Path, support_modules: None
) -> None:
    del support_modules
    from feedback import post_feedback  # type: ignore[import-not-found]
    from run import run_pipeline  # type: ignore[import-not-found]

    out = tmp_path / "support"
    figures = run_pipeline(
        model="tiny",
        sessions=SESSIONS,
        held_out=4,
        out=out,
        train_overrides=["data.filter.min_reward=0"],
    )
    # Traffic: every conversation became a finished production rollout with its token-level
    # call, and the feedback job's reward by session id reached it. Each misrouted ticket's
    # re-route became the rewarded text-only session <id>-reviewed (the captured request, the
    # reviewer's route as reply).
    assert figures["sessions"] == SESSIONS
    corrections = SESSIONS - figures["rewarded_1"]
    assert figures["corrections"] == corrections
    tickets = [json.loads(line) for line in (out / "tickets.jsonl").read_text().splitlines()]
    misrouted = [t["session_id"] for t in tickets if t["routed_to"] != t["department"]]
    rows = {r[0]: r[1:] for r in asyncio.run(stored_sessions(out))}
    assert sorted(rows) == sorted(
        [session_rollout_id(f"conv-{i:05d}") for i in range(SESSIONS)]
        + [session_rollout_id(f"{sid}-reviewed") for sid in misrouted]
    )
    for rollout_id, (reward, transitions) in rows.items():
        if rollout_id.endswith("-reviewed"):
            assert (reward, transitions) == (1.0, 0)  # text only: the model never sampled it
        else:
            assert reward is not None and transitions == 1
    assert figures["rewards_posted"] == SESSIONS
    # The job is idempotent: run again, it stores no second correction or reward.
    again = asyncio.run(post_feedback(out, corrections=True))
    assert again["corrections"] == corrections
    assert len(asyncio.run(stored_sessions(out))) == len(rows)
    # Offline SFT read them all (no agent ran), the corrections tokenized with the student's
    # template, and made the kept completions likelier.
    assert figures["sft_rollouts"] == SESSIONS + corrections
    assert figures["sft_examples"] == SESSIONS + corrections
    assert figures["sft_retokenized"] == corrections
    assert figures["sft_logprob_after"] > figures["sft_logprob_before"]
    assert (out / "train" / "adapters" / "round-001" / "adapter_config.json").exists()
    # The held-out evaluation scored both policies on the same customers.
    assert figures["n"] == 4
    assert 0.0 <= figures["base"] <= 1.0 and 0.0 <= figures["tuned"] <= 1.0
    assert figures["gain"] == pytest.approx(figures["tuned"] - figures["base"])
