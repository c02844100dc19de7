"""``fulmen train`` with ``data.from_store``: learning from kept production traffic, no agent.

A SQLite store is filled the way the gateway keeps a deployed agent's traffic: finished
``mode: production`` sessions (rollouts ``session-<id>``), their calls with token ids and
behaviour logprobs, or text only (a hosted model's), and rewards posted afterwards by session
id. Then ``fulmen train`` runs offline SFT or an off-policy GRPO step on it with the real
updater and the ``tiny`` model.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import JsonValue

from fulmen.cli.main import main
from fulmen.errors import ConfigError
from fulmen.store import open_store
from fulmen.trainer.config import TrainConfig, load_config
from fulmen.trainer.metrics import read_metrics
from fulmen.types import AttemptStatus, LLMCallCreate, LLMChoice, Mode, RewardCreate, RolloutCreate
from fulmen.types.rewards import session_rollout_id

GOOD = [11, 12, 13, 14, 15, 16]  # the reply the rewarded sessions got
BAD = [40, 41, 42, 43, 44, 45]


def session(
    index: int,
    *,
    reply: Sequence[int] | None,
    reward: float | None,
    behaviour_logprob: float = -1.0,
    task_id: str | None = None,
) -> dict[str, Any]:
    """One recorded session: a token-level reply (``reply``), or text only (``None``)."""
    return {
        "id": f"user-{index}",
        "prompt": [2, 20 + index % 7, 30 + index % 5, 3],
        "reply": reply,
        "reward": reward,
        "logprob": behaviour_logprob,
        "task_id": task_id,
    }


async def fill_traffic(url: str, sessions: Sequence[dict[str, Any]]) -> None:
    """Store finished production sessions and then, later, their rewards by session id."""
    async with open_store(url, watchdog_interval=None) as store:
        for s in sessions:
            rollout_id = session_rollout_id(s["id"])
            await store.enqueue(
                [
                    RolloutCreate(
                        input={"session_id": s["id"]},
                        mode=Mode.PRODUCTION,
                        rollout_id=rollout_id,
                        task_id=s["task_id"],
                    )
                ]
            )
            (claim,) = await store.claim("gateway")
            aid = claim.attempt.attempt_id
            reply = s["reply"]
            messages: list[JsonValue] = [
                {"role": "user", "content": f"My order {s['id']} is late."}
            ]
            if reply is None:  # a hosted model's answer: text, no ids, no logprobs
                call = LLMCallCreate(
                    call_id=f"{rollout_id}-c",
                    rollout_id=rollout_id,
                    attempt_id=aid,
                    request={"model": "hosted", "messages": messages},
                    response={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
                    choices=[LLMChoice(text="ok")],
                    started_at=1.0,
                )
            else:
                call = LLMCallCreate(
                    call_id=f"{rollout_id}-c",
                    rollout_id=rollout_id,
                    attempt_id=aid,
                    request={"model": "tiny", "messages": messages},
                    prompt_token_ids=s["prompt"],
                    choices=[
                        LLMChoice(
                            token_ids=list(reply),
                            logprobs=[s["logprob"]] * len(reply),
                            finish_reason="stop",
                        )
                    ],
                    is_token_level=True,
                    started_at=1.0,
                )
            await store.add_llm_calls([call])
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
        for s in sessions:  # the feedback job, after every session ended
            if s["reward"] is not None:
                await store.add_reward(RewardCreate.scalar(s["reward"], session_id=s["id"]))


def write_config(tmp_path: Path, store_url: str, algorithm: dict[str, Any], **data: Any) -> Path:
    config = {
        "model": "tiny",
        "run_dir": "run",
        "data": {"from_store": store_url, **data},
        "algorithm": algorithm,
    }
    path = tmp_path / "offline.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def sys_path_restored() -> Iterator[None]:
    path = list(sys.path)
    yield
    sys.path[:] = path


# -- configuration --------------------------------------------------------------------------


def config_error(**raw: Any) -> str:
    base: dict[str, Any] = {"model": "tiny", "data": {"from_store": "sqlite:///t.db"}}
    base.update(raw)
    with pytest.raises(ValueError) as info:
        TrainConfig.model_validate(base)
    return str(info.value)


def test_offline_data_becomes_each_algorithms_source() -> None:
    config = TrainConfig.model_validate(
        {
            "model": "tiny",
            "data": {
                "from_store": "sqlite:///t.db",
                "filter": {"mode": "production", "min_reward": 0.5, "max_rollouts": 10},
            },
            "stages": [{"name": "sft"}, {"name": "grpo", "steps": 2}],
        }
    )
    sft, grpo = config.plan()
    assert sft.source is not None and grpo.source is not None  # type: ignore[union-attr]
    assert sft.source == grpo.source  # type: ignore[union-attr]
    assert sft.source.store == "sqlite:///t.db"  # type: ignore[union-attr]
    assert sft.source.filter.mode is Mode.PRODUCTION  # type: ignore[union-attr]
    assert sft.kept_reward(1.0) == 0.5  # type: ignore[union-attr]
    assert config.agent is None


def test_offline_config_errors_name_the_bad_option() -> None:
    assert "agent has no effect with data.from_store" in config_error(agent="a:b")
    assert "data.train has no effect" in config_error(
        data={"from_store": "sqlite:///t.db", "train": "t.jsonl"}
    )
    assert "agent is required" in config_error(data={"train": "t.jsonl"})
    assert "data needs train" in config_error(data={})
    assert "data.filter has no effect without data.from_store" in config_error(
        agent="a:b", data={"train": "t.jsonl", "filter": {"mode": "production"}}
    )
    assert "'apo' cannot learn from data.from_store" in config_error(algorithm={"name": "apo"})
    assert "group_size has no effect with a source store" in config_error(
        algorithm={"name": "grpo", "group_size": 4}
    )
    assert "set data.from_store or algorithm.source, not both" in config_error(
        algorithm={"name": "sft", "source": {"store": "sqlite:///other.db"}}
    )
    assert "both set the kept reward" in config_error(
        data={"from_store": "sqlite:///t.db", "filter": {"min_reward": 0.5}},
        algorithm={"name": "sft", "min_reward": 0.8},
    )
    assert "must be before" in config_error(
        data={
            "from_store": "sqlite:///t.db",
            "filter": {
                "ended_after": "2026-11-02T00:00:00Z",
                "ended_before": "2026-11-01T00:00:00Z",
            },
        }
    )
    assert "timezone" in config_error(
        data={"from_store": "sqlite:///t.db", "filter": {"ended_after": "2026-11-02T00:00:00"}}
    )
    assert "data.val is not set" in config_error(validation={"every": 1})


def test_a_bad_filter_fails_at_load_with_the_file_and_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, "sqlite:///t.db", {"name": "sft"}, filter={"mode": "prod"})
    with pytest.raises(ConfigError, match=r"data\.filter\.mode"):
        load_config(path)


# -- training on the tiny model ---------------------------------------------------------------


@pytest.mark.slow
def test_offline_sft_raises_the_likelihood_of_the_rewarded_kept_completions(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    sessions = [session(i, reply=GOOD, reward=1.0) for i in range(6)]
    sessions += [session(10 + i, reply=BAD, reward=0.0) for i in range(4)]
    sessions += [session(20 + i, reply=BAD, reward=None) for i in range(3)]  # no feedback
    asyncio.run(fill_traffic(url, sessions))
    algorithm = {
        "name": "sft",
        "sft": {"learning_rate": 0.01, "epochs": 3, "batch_size": 4, "lora": {"r": 8, "alpha": 16}},
    }
    path = write_config(tmp_path, url, algorithm, filter={"mode": "production", "min_reward": 0.5})
    assert main(["train", str(path)]) == 0
    (round_,) = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "sft/examples" in r]
    assert round_["sft/rollouts"] == 6  # only the sessions whose delayed reward reached 0.5
    assert round_["sft/examples"] == 6 and round_["sft/retokenized"] == 0
    assert round_["sft/logprob_after"] > round_["sft/logprob_before"] + 0.5, round_
    assert (tmp_path / "run" / "adapters" / "round-001" / "adapter_config.json").exists()


def offline_grpo(tmp_path: Path, name: str, behaviour_logprob: float) -> dict[str, float]:
    """One off-policy GRPO step on a mix of token-level and text-only sessions."""
    url = f"sqlite:///{tmp_path / f'{name}.db'}"
    sessions = [
        session(0, reply=GOOD, reward=1.0, behaviour_logprob=behaviour_logprob, task_id="refund"),
        session(1, reply=BAD, reward=0.0, behaviour_logprob=behaviour_logprob, task_id="refund"),
        *(session(i, reply=GOOD, reward=1.0, behaviour_logprob=behaviour_logprob) for i in (2, 3)),
        *(session(i, reply=BAD, reward=0.0, behaviour_logprob=behaviour_logprob) for i in (4, 5)),
        session(6, reply=None, reward=1.0),  # text only: counted, skipped
        session(7, reply=None, reward=0.0),
        session(8, reply=GOOD, reward=None),  # never rewarded: not read at all
    ]
    asyncio.run(fill_traffic(url, sessions))
    algorithm = {
        "name": "grpo",
        "steps": 1,
        "grpo": {"learning_rate": 0.001, "lora": {"r": 8, "alpha": 16}},
    }
    work = tmp_path / name
    work.mkdir()
    assert main(["train", str(write_config(work, url, algorithm))]) == 0
    (step,) = [r for r in read_metrics(work / "run" / "metrics.jsonl") if "offline/calls" in r]
    return step


@pytest.mark.slow
def test_offline_grpo_weights_by_the_recorded_logprobs_and_reports_the_token_level_share(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    near = offline_grpo(tmp_path, "near", behaviour_logprob=-6.0)
    far = offline_grpo(tmp_path, "far", behaviour_logprob=-7.0)
    for step in (near, far):
        assert step["updated"] == 1.0
        assert step["offline/rewarded_rollouts"] == 8
        assert step["offline/calls"] == 8
        assert step["offline/token_level_calls"] == 6
        assert step["offline/text_only_calls_skipped"] == 2
        assert step["offline/token_level_fraction"] == pytest.approx(0.75)
        assert step["offline/task_groups"] == 1  # "refund" holds two rewarded sessions
        assert step["offline/batch_grouped_rollouts"] == 4  # the others share one baseline
        assert step["transitions"] == 6
    # The same policy and tokens, behaviour logprobs one nat lower: every importance ratio
    # pi / mu is e times larger, so the ratios are the recorded logprobs' and no constant.
    assert far["ratio_mean"] == pytest.approx(math.e * near["ratio_mean"], rel=1e-4)
    assert near["logprob_gap"] != pytest.approx(far["logprob_gap"])
