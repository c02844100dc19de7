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
