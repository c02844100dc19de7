"""``fulmen gateway`` as a real process: serves, records, stops cleanly; refuses open binds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fulmen.gateway.release import ReleaseRouter
from fulmen.gateway.release_config import ReleaseConfig
from fulmen.store import open_store
from tests.gateway.conftest import new_attempt
from tests.gateway.gateway_command import gateway_command
from tests.gateway.scripted_upstream import Script, create_upstream_app, free_socket, serve_app

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}


async def test_gateway_command_serves_and_stops_on_sigterm() -> None:
    script = Script()
    async with (
        serve_app(create_upstream_app(script)) as upstream,
        gateway_command(
            "--store", "memory://", "--upstream", f"{upstream}/v1", env=_env()
        ) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as client,
    ):  # fmt: skip
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "ok"
        health = (await client.get("/healthz")).json()
        assert health["recorder"]["recorded"] == 1
    assert gateway.returncode == 0, gateway.stderr
    assert "Traceback" not in gateway.stderr
    assert script.requests[0]["return_token_ids"] is True


def test_gateway_command_refuses_open_bind_without_token() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fulmen", "gateway", "--store", "memory://",
         "--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert result.returncode == 1
    assert "refusing to bind '0.0.0.0' without a token" in result.stderr


def test_config_flags_are_derived_from_gateway_config(capsys: pytest.CaptureFixture[str]) -> None:
    from fulmen.cli.main import build_parser
    from fulmen.gateway import GatewayConfig

    args = build_parser().parse_args(
        ["gateway", "--store", "memory://", "--upstream", "http://127.0.0.1:9/v1",
         "--read-timeout-s", "7.5", "--no-record-untracked", "--batch-size", "8"]
    )  # fmt: skip
    assert (args.read_timeout_s, args.record_untracked, args.batch_size) == (7.5, False, 8)
    assert args.connect_timeout_s is None  # unset: GatewayConfig's default applies
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", "--help"])
    helps = capsys.readouterr().out
    for name in GatewayConfig.model_fields:
        # Sections and ranges are set in --config.
        if name not in (
            "policy_version_headers",
            "capture",
            "release",
            "redaction",
            "reward_range",
        ):
            assert "--" + name.replace("_", "-") in helps
    assert "--config FILE.yaml" in helps


async def test_gateway_command_records_tracked_calls_into_a_shared_sqlite_store(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_store(url, watchdog_interval=None) as store:
        rollout_id, attempt_id = await new_attempt(store)
        async with (
            serve_app(create_upstream_app(Script())) as upstream,
            gateway_command("--store", url, "--upstream", f"{upstream}/v1", env=_env()) as gateway,
            httpx.AsyncClient() as client,
        ):
            r = await client.post(
                f"{gateway.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions",
                json=CHAT,
            )
            assert r.status_code == 200
            await client.post(f"{gateway.url}/gateway/flush")
        assert gateway.returncode == 0, gateway.stderr
        (call,) = (await store.query_llm_calls(rollout_id)).items
    assert call.is_token_level and call.attempt_id == attempt_id


async def test_gateway_waits_for_a_store_that_is_down_and_stops_on_sigterm() -> None:
    sock = free_socket()
    dead_store = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fulmen", "gateway", "--store", dead_store,
        "--upstream", "http://127.0.0.1:9/v1", "--port", "0",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert proc.stderr is not None
    logged = b""
    try:
        # The first failed connect is logged once the SIGTERM handler is in place: wait for
        # that line rather than a fixed time that a slow start could outlast.
        async with asyncio.timeout(30):  # only a bound on a hang
            while b"still retrying" not in logged:
                line = await proc.stderr.readline()
                assert line, f"the gateway exited: {logged.decode()}"
                logged += line
        # An old gateway exited after 3 connection errors, well under a second of backoff from
        # its first; this one is still waiting for the store seconds later.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=2)
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=30)
    finally:
        sock.close()
        if proc.returncode is None:
            proc.kill()
    stderr = logged + await proc.stderr.read()
    assert code == 0, stderr.decode()
    assert b"connect to the store at" in stderr and b"still retrying" in stderr


def test_capture_and_redaction_come_from_a_yaml_config_the_flags_override(
    tmp_path: Path,
) -> None:
    from fulmen.cli.gateway import gateway_config
    from fulmen.cli.main import build_parser
    from fulmen.errors import ConfigError

    path = tmp_path / "gateway.yaml"
    path.write_text(
        "batch_size: 64\n"
        "capture:\n"
        "  session: {header: x-session-id, idle_timeout_s: 120}\n"
        "  base_rate: 0.1\n"
        "  keep_if_reward_at_least: 0.8\n"
        "  max_calls_per_minute: 600\n"
        "redaction:\n"
        "  patterns: [email, card]\n"
    )
    argv = ["gateway", "--upstream", "http://x/v1", "--config", str(path), "--batch-size", "8"]
    config = gateway_config(build_parser().parse_args(argv), spill_dir=None)
    assert config.batch_size == 8  # the flag wins over the file
    assert config.capture is not None and config.capture.session.header == "x-session-id"
    assert config.capture.base_rate == 0.1 and config.capture.max_calls_per_minute == 600
    assert config.redaction is not None and config.redaction.patterns == ("email", "card")
    path.write_text("capture:\n  session: {header: a, body_field: user}\n")
    with pytest.raises(ConfigError, match="exactly one of header, body_field"):
        gateway_config(build_parser().parse_args(argv), spill_dir=None)


def test_model_map_flags_add_to_the_config_file_map(tmp_path: Path) -> None:
    from fulmen.cli.gateway import gateway_config
    from fulmen.cli.main import build_parser

    path = tmp_path / "gateway.yaml"
    path.write_text("model_map: {gpt-5: policy, '*': other}\n")
    argv = ["gateway", "--upstream", "http://x/v1", "--config", str(path)]
    argv += ["--model-map", "claude-sonnet-4-6=policy", "--model-map", "*=policy"]
    config = gateway_config(build_parser().parse_args(argv), spill_dir=None)
    assert config.model_map == {"gpt-5": "policy", "*": "policy", "claude-sonnet-4-6": "policy"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", "--model-map", "no-equals-sign"])


async def test_the_gateway_command_runs_the_release_gate_and_switches_its_traffic(
    tmp_path: Path,
) -> None:
    """``release.gate`` in ``--config``: the gate in the gateway process promotes, traffic follows.

    The candidate's sessions get reward 1, the incumbent's 0: after one window with two
    rewarded sessions an arm the gate promotes, and every later session reaches the candidate.
    """
    import yaml

    url = f"sqlite:///{tmp_path / 'release.db'}"
    config = {
        "capture": {"session": {"header": "x-session-id", "idle_timeout_s": 0.2}},
        "release": {
            "name": "rel", "incumbent": "old", "candidate": "new", "share": 0.5, "poll_s": 0.1,
            "gate": {"window_s": 0.5, "windows": 1, "min_sessions": 2},
        },
    }  # fmt: skip
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    # Three sessions an arm, as the release's hash assigns them.
    router = ReleaseRouter(ReleaseConfig.model_validate(config["release"]), store=None)  # type: ignore[arg-type]
    by_arm: dict[str, list[str]] = {"incumbent": [], "candidate": []}
    for i in range(100):
        by_arm[router.arm_of(f"s{i}").value].append(f"s{i}")
    sessions = by_arm["incumbent"][:3] + by_arm["candidate"][:3]
    later = by_arm["incumbent"][3:6]
    async with (
        serve_app(create_upstream_app(Script())) as upstream,
        gateway_command(
            "--store", url, "--config", str(path), "--upstream", f"{upstream}/v1", env=_env()
        ) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as client,
    ):  # fmt: skip
        for sid in sessions:
            headers = {"x-session-id": sid}
            r = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
            value = 1.0 if r.json()["model"] == "new" else 0.0
            reward = {"session_id": sid, "values": {"reward": value}}
            assert (await client.post("/v1/rewards", json=reward)).is_success
        state = "canary"
        for _ in range(100):  # the gate's first window ends 0.5 s after the start
            state = (await client.get("/healthz")).json()["release"]["state"]
            if state != "canary":
                break
            await asyncio.sleep(0.1)
        assert state == "promoted"
        for sid in later:  # sessions the hash sent to the incumbent
            headers = {"x-session-id": sid}
            r = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
            assert r.json()["model"] == "new"
    assert gateway.returncode == 0 and "Traceback" not in gateway.stderr, gateway.stderr
    async with open_store(url, watchdog_interval=None) as store:
        release = await store.get_release("rel")
    assert release.state.value == "promoted"
    assert release.events[-1].by.startswith("gate@")
