"""``fulmen release list|status|promote|rollback`` on a SQLite store holding a release."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import RewardCreate, SessionCreate
from fulmen.types.releases import ArmModel, ReleaseCreate


def populate(url: str) -> None:
    """A release with 20 sessions an arm: the candidate scores 1 on 15, the incumbent on 5."""

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.put_release(
                ReleaseCreate(
                    name="support-v2",
                    incumbent=ArmModel(model="gemma"),
                    candidate=ArmModel(model="run-1-v3", run_id="run-1", version=3),
                    share=0.1,
                )
            )
            for i in range(40):
                arm = "candidate" if i % 2 else "incumbent"
                metadata = {"release": "support-v2", "arm": arm}
                await store.record_session(
                    SessionCreate(session_id=f"s{i}", attempt_id=f"at{i}", metadata=metadata)
                )
                hits = 15 if arm == "candidate" else 5
                value = 1.0 if i // 2 < hits else 0.0
                await store.add_reward(RewardCreate.scalar(value, session_id=f"s{i}"))

    asyncio.run(fill())


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().out


def test_status_promote_and_rollback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'release.db'}"
    populate(url)
    code, out = run(["release", "list", "--store", url], capsys)
    assert code == 0 and "support-v2" in out and "canary" in out and "10%" in out
    code, out = run(["release", "status", "support-v2", "--store", url], capsys)
    assert code == 0
    assert "release support-v2: canary (revision 1)" in out
    assert "run-1 v3" in out and "0.75" in out and "0.25" in out
    assert "difference (candidate - incumbent) +0.5" in out and "ratio 3.000" in out
    code, out = run(["release", "status", "support-v2", "--store", url, "--json"], capsys)
    figures = json.loads(out)
    assert figures["candidate"]["rewarded"] == 20 and figures["comparison"]["p_value"] < 0.01

    code, out = run(["release", "promote", "support-v2", "--store", url, "--reason", "ok"], capsys)
    assert code == 0 and "is promoted: every session goes to 'run-1-v3'" in out
    code, out = run(["release", "rollback", "support-v2", "--store", url], capsys)
    assert code == 0 and "is rolled_back: every session goes to 'gemma'" in out
    code, out = run(["release", "status", "support-v2", "--store", url], capsys)
    assert "promoted by cli: ok" in out and "rolled_back by cli: rolled back by hand" in out
    # Nothing left to roll back; an unknown release is named.
    assert main(["release", "rollback", "support-v2", "--store", url]) != 0
    assert "cannot be rolled back" in capsys.readouterr().err
    assert main(["release", "status", "nope", "--store", url]) != 0
    assert "release 'nope' does not exist" in capsys.readouterr().err
