"""``fulmen rewards add`` and ``fulmen store prune`` against a real SQLite store file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import AttemptStatus, LLMCallCreate, Mode, RolloutCreate, RolloutQuery


def _finished(url: str, rollout_ids: list[str], *, mode: Mode = Mode.TRAIN) -> None:
    """Run each rollout once: one LLM call (response id ``resp-<rollout id>``), then success."""

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.enqueue(
                [RolloutCreate(input=r, rollout_id=r, mode=mode) for r in rollout_ids]
            )
            for claim in await store.claim("w", limit=len(rollout_ids)):
                rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
                await store.add_llm_calls(
                    [
                        LLMCallCreate(
                            call_id=f"c-{rid}",
                            rollout_id=rid,
                            attempt_id=aid,
                            response_id=f"resp-{rid}",
                            started_at=1.0,
                        )
                    ]
                )
                await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)

    asyncio.run(fill())


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_rewards_add_by_response_is_idempotent_by_key(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _finished(url, ["r1"])
    argv = [
        "rewards",
        "add",
        "--store",
        url,
        "--response",
        "resp-r1",
        "--value",
        "1",
        "--key",
        "k1",
    ]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["rollout_id"], first["values"], first["key"]) == ("r1", {"reward": 1.0}, "k1")
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert main([*argv[:-3], "0", "--key", "k1"]) == 1
    assert "k1" in capsys.readouterr().err

    named = ["rewards", "add", "--store", url, "--rollout", "r1", "--named", "thumbs=1", "ok=0"]
    assert main([*named, "--primary", "ok"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert (stored["values"], stored["primary"]) == ({"thumbs": 1.0, "ok": 0.0}, "ok")

    async def count() -> int:
        async with open_store(url, watchdog_interval=None) as store:
            return len(await store.list_rewards("r1"))

    assert asyncio.run(count()) == 2


def test_rewards_add_refuses_bad_values_and_unknown_targets(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _finished(url, ["r1"])
    with pytest.raises(SystemExit):
        main(["rewards", "add", "--store", url, "--rollout", "r1", "--value", "inf"])
    assert "not a finite number" in capsys.readouterr().err
    assert main(["rewards", "add", "--store", url, "--session", "nobody", "--value", "1"]) == 1
    assert "session-nobody" in capsys.readouterr().err
    named = ["--named", "a=1", "b=2", "--primary", "c"]
    assert main(["rewards", "add", "--store", url, "--rollout", "r1", *named]) == 1
    assert "primary" in capsys.readouterr().err


def test_store_prune_dry_run_then_keep_rewarded_then_mode(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _finished(url, ["a", "b"])
    _finished(url, ["p"], mode=Mode.PRODUCTION)
    assert main(["rewards", "add", "--store", url, "--rollout", "b", "--value", "1"]) == 0
    capsys.readouterr()
    prune = ["store", "prune", "--store", url, "--older-than", "0s", "--json"]

    assert main([*prune, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry == {
        "dry_run": True, "rollouts": 3, "attempts": 3, "spans": 0, "llm_calls": 3, "rewards": 1,
    }  # fmt: skip
    assert main([*prune, "--keep-rewarded", "--mode", "train"]) == 0
    assert json.loads(capsys.readouterr().out)["rollouts"] == 1  # a
    assert (
        main(["store", "prune", "--store", url, "--older-than", "0s", "--mode", "production"]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("deleted finished rollouts that ended before")
    assert "rollouts           1" in out

    async def remaining() -> list[str]:
        async with open_store(url, watchdog_interval=None) as store:
            page = await store.query_rollouts(RolloutQuery())
            return [r.rollout_id for r in page.items]

    assert asyncio.run(remaining()) == ["b"]
    # An age far in the past deletes nothing.
    assert main([*prune, "--older-than", "30d"]) == 0
    assert json.loads(capsys.readouterr().out)["rollouts"] == 0
    with pytest.raises(SystemExit):
        main(["store", "prune", "--store", url, "--older-than", "30 days"])
