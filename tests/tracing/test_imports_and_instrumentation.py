"""Import cost of the rollout API, and the optional OpenInference instrumentation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fulmen.errors import ConfigError
from fulmen.tracing.exporter import StoreSpanExporter
from fulmen.tracing.instrumentation import instrument, uninstrument
from fulmen.tracing.provider import create_provider


def test_agent_modules_do_not_import_opentelemetry() -> None:
    code = (
        "import sys, json\n"
        "import fulmen.agent, fulmen.tracing\n"
        "from fulmen.agent import rollout, Agent\n"
        "from fulmen.tracing import emit_reward, as_agent, operation\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


async def test_instrument_skips_missing_frameworks_and_rejects_unknown_ones() -> None:
    from fulmen.store import open_store

    async with open_store("memory://", watchdog_interval=None) as store:
        provider = create_provider(StoreSpanExporter(store))
        pytest.importorskip("openinference.instrumentation.openai")
        with pytest.raises(ConfigError, match="'nope'"):
            instrument(provider, ["nope"])
        done = instrument(provider, ["crewai", "openai"])  # crewai is not installed here
        try:
            assert done == ["openai"]
            # a second provider cannot take it over while the first holds it
            assert instrument(create_provider(StoreSpanExporter(store)), ["openai"]) == []
        finally:
            uninstrument(done)
        provider.shutdown()
