"""``fulmen store`` and ``fulmen rollouts`` against real stores (a SQLite file, a served store)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.store.service import is_loopback
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    Mode,
    RolloutCreate,
    SpanCreate,
)
from tests.store.http_server import ServerProcess


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables fit their columns to the terminal (``COLUMNS``); these tests read whole cells.

    Without it they failed wherever ``COLUMNS`` was 80 (seen under pytest-xdist workers).
    """
    monkeypatch.setenv("COLUMNS", "200")


def populate(url: str, token: str | None = None) -> str:
    """Three rollouts; the first ran: a root span, a child with tokens, a reward, an LLM call."""

    async def fill() -> str:
        options = {"token": token} if token else {"watchdog_interval": None}
        async with open_store(url, **options) as store:
            await store.enqueue(
                [RolloutCreate(input={"question": f"{i}+{i}?"}, task_id=f"t{i}") for i in range(3)]
            )
            (claim,) = await store.claim("worker-7")
            rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
            common = {"rollout_id": rid, "attempt_id": aid, "trace_id": "ab" * 16}
            await store.add_spans(
                [
                    SpanCreate(**common, span_id="root", name="agent.run", start_time=1.0,
                               end_time=3.5),
                    SpanCreate(**common, span_id="tool", parent_id="root", name="tool.calc",
                               start_time=1.5, end_time=1.6,
                               attributes={"gen_ai.usage.input_tokens": 12,
                                           "gen_ai.usage.output_tokens": 3}),
                    SpanCreate(**common, span_id="rw", parent_id="root", name="reward",
                               start_time=3.4, attributes={"fulmen.reward": 0.75}),
                ]
            )  # fmt: skip
            await store.add_llm_calls(
                [
                    LLMCallCreate(
                        call_id="call-1",
                        rollout_id=rid,
                        attempt_id=aid,
                        model="tiny-model",
                        prompt_token_ids=[1, 2, 3, 4],
                        choices=[LLMChoice(token_ids=[5, 6], logprobs=[-0.1, -0.2])],
                        is_token_level=True,
                        started_at=1.2,
                        latency_s=0.25,
                    )
                ]
            )
            await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
            return rid

    return asyncio.run(fill())


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_on_a_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    rid = populate(url)

    code, out, _ = run_cli(["store", "stats", "--store", url], capsys)
    assert code == 0
    assert "succeeded" in out and "SPANS" in out
    code, out, _ = run_cli(["store", "stats", "--store", url, "--json"], capsys)
    stats = json.loads(out)
    assert stats["spans"] == 3 and stats["llm_calls"] == 1
    assert stats["rollouts"] == {
        "queuing": 2, "running": 0, "succeeded": 1, "failed": 0, "cancelled": 0
    }  # fmt: skip

    code, out, _ = run_cli(["rollouts", "list", "--store", url], capsys)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ROLLOUT", "STATUS", "MODE"]
    assert len(lines) == 4 and rid in lines[3] and "succeeded" in lines[3]  # newest first
    code, out, _ = run_cli(
        ["rollouts", "list", "--store", url, "--status", "queuing", "--limit", "1"], capsys
    )
    assert len(out.splitlines()) == 4  # header, one row, blank, paging hint
    assert "queuing" in out and "--before 3" in out and rid not in out

    code, out, _ = run_cli(["rollouts", "show", rid, "--store", url], capsys)
    assert code == 0
    assert f"rollout {rid}  SUCCEEDED" in out
    assert "attempt 1" in out and "worker-7" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:5].strip().isdigit()}
    assert set(rows) == {"1", "2", "3", "4"}  # spans and the call, by sequence
    assert "agent.run" in rows["1"] and "2.50 s" in rows["1"]
    assert "    tool.calc" in rows["2"] and "12/3" in rows["2"]  # indented under its parent
    assert "0.75" in rows["3"]  # the reward
    assert "tiny-model" in rows["4"] and "4/2" in rows["4"] and "token-level" in rows["4"]

    code, out, _ = run_cli(["rollouts", "show", rid, "--store", url, "--json"], capsys)
    data = json.loads(out)
    assert [s["span_id"] for s in data["spans"]] == ["root", "tool", "rw"]
    assert data["llm_calls"][0]["call_id"] == "call-1"
    assert data["attempts"][0]["status"] == "succeeded"

    code, _, err = run_cli(["rollouts", "show", "nope", "--store", url], capsys)
    assert code == 1 and "nope" in err and "Traceback" not in err


def test_commands_over_http(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    server = ServerProcess(db, tmp_path / "server.log", token="tok")
    try:
        rid = populate(server.url, token="tok")
        env = {**os.environ, "FULMEN_STORE_URL": server.url, "FULMEN_STORE_TOKEN": "tok"}

        def fulmen(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "fulmen", *args],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        shown = fulmen("rollouts", "show", rid)
        assert shown.returncode == 0, shown.stderr
        assert "tool.calc" in shown.stdout and "tiny-model" in shown.stdout
        assert "HTTP Request" not in shown.stderr  # httpx's request log is kept quiet
        listed = fulmen("rollouts", "list", "--mode", "train", "--json")
        assert len(json.loads(listed.stdout)["items"]) == 3
        env["FULMEN_STORE_TOKEN"] = "wrong"
        refused = fulmen("store", "stats")
        assert refused.returncode == 1
        assert "wrong bearer token" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        assert server.stop() == 0  # SIGTERM: a clean shutdown with exit code 0
    log = server.log.read_text()
    assert "fulmen store stopped" in log


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "example.com"])
def test_serve_refuses_non_loopback_without_token(host: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FULMEN_STORE_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "fulmen", "store", "serve", "--db", "memory://", "--host", host],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "refusing to listen" in result.stderr and "--token" in result.stderr
    assert "Traceback" not in result.stderr


def test_loopback_detection() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "::", "10.0.0.1", "example.com", ""])


def test_openapi_command_prints_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["store", "openapi"], capsys)
    assert code == 0
    assert json.loads(out)["openapi"] == "3.1.0"


def test_help_texts(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (
        ["store", "serve"],
        ["store", "stats"],
        ["rollouts", "list"],
        ["rollouts", "show"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert "--store" in out or "--db" in out


def test_serve_reports_a_busy_port() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "fulmen", "store", "serve", "--db", "memory://",
             "--port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_show_prints_a_failed_attempts_error_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exception is a traceback's last line: cutting after the first hid it."""
    url = f"sqlite:///{tmp_path / 'failed.db'}"
    frames = "".join(f'  File "agent.py", line {n}, in step_{n}\n    x = f()\n' for n in range(30))
    traceback = f"Traceback (most recent call last):\n{frames}KeyError: 'expected'\n"

    async def fail() -> str:
        async with open_store(url) as store:
            await store.enqueue([RolloutCreate(input={"q": 1}, mode=Mode.TRAIN)])
            (claim,) = await store.claim("worker-7")
            attempt = claim.attempt.attempt_id
            await store.update_attempt(attempt, status=AttemptStatus.FAILED, error=traceback)
            return claim.rollout.rollout_id

    rid = asyncio.run(fail())
    code, out, _ = run_cli(["rollouts", "show", rid, "--store", url], capsys)
    assert code == 0
    lines = out.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith("  error ")]
    assert lines[start] == "  error ... 22 lines above (--json shows all)"
    assert lines[start + 40] == "        KeyError: 'expected'"
    assert 'File "agent.py", line 29, in step_29' in [line.strip() for line in lines]
