"""``fulmen.settings``: the FULMEN_* variables are read in one place and passed down."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fulmen.cli.main import build_parser
from fulmen.cli.store import store_address
from fulmen.settings import Settings

PACKAGE = Path(__file__).resolve().parents[1] / "fulmen"


def test_every_variable_is_read() -> None:
    settings = Settings.from_env(
        {
            "FULMEN_STORE_URL": "http://127.0.0.1:4747",
            "FULMEN_STORE_TOKEN": "s3cret",
            "FULMEN_STORE_DB": "sqlite:///x.db",
            "FULMEN_GATEWAY_TOKEN": "gw",
            "FULMEN_CACHE_DIR": "/tmp/models",
            "FULMEN_SPILL_DIR": "/tmp/spill",
            "FULMEN_VLLM_PYTHON": "/opt/vllm/bin/python",
            "FULMEN_PYTHON": "/opt/wrapped/python",
            "MY_KEY": "k",
        }
    )
    assert (settings.store_url, settings.store_token, settings.store_db) == (
        "http://127.0.0.1:4747",
        "s3cret",
        "sqlite:///x.db",
    )
    assert settings.gateway_token == "gw"
    assert (settings.cache_dir, settings.spill_dir) == (Path("/tmp/models"), Path("/tmp/spill"))
    assert settings.vllm_python == "/opt/vllm/bin/python"
    assert settings.python == "/opt/wrapped/python"
    assert settings.variable("MY_KEY") == "k" and settings.variable("NOT_SET") is None


def test_defaults_and_empty_values() -> None:
    settings = Settings.from_env({"FULMEN_STORE_TOKEN": "  ", "FULMEN_TOKEN": "legacy"})
    assert settings.store_url is None and settings.store_token is None  # empty is unset
    assert settings.gateway_token == "legacy"  # the older variable still works
    assert settings.cache_dir == Path.home() / ".cache" / "fulmen" / "models"
    assert settings.spill_dir == Path.home() / ".cache" / "fulmen" / "spill"


def test_the_environment_is_read_once_not_at_each_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FULMEN_STORE_TOKEN", "before")
    settings = Settings.from_env()
    monkeypatch.setenv("FULMEN_STORE_TOKEN", "after")
    assert settings.store_token == "before"


@pytest.mark.parametrize(
    "command",
    [
        ["store", "stats"],
        ["rollouts", "list"],
        ["export", "transitions", "--out", "x.jsonl"],
        ["runner", "--agent", "m:f"],
        ["gateway", "--upstream", "http://127.0.0.1:9/v1"],
    ],
)
def test_every_store_command_takes_its_token_the_same_way(command: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(command)
    args.settings = Settings(store_url="http://h:1", store_token="from-env")
    assert store_address(args) == ("http://h:1", "from-env")
    args = parser.parse_args([*command, "--store", "http://h:2", "--token", "from-flag"])
    args.settings = Settings(store_url="http://h:1", store_token="from-env")
    assert store_address(args) == ("http://h:2", "from-flag")


def test_no_module_but_settings_reads_the_environment() -> None:
    reads = re.compile(r"os\.environ\.get|os\.getenv|environ\[")
    # vllm_plugin's modules run inside vLLM's process, from its environment, where fulmen (and
    # so its settings) cannot be imported: they read the one variable their launcher sets.
    plugin = PACKAGE / "engines" / "vllm_plugin"
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "settings.py"
        and path.parent != plugin
        and reads.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
