"""Third-party agents from npm, run unchanged as command agents (``package.json`` pins them).

``scripts/test.sh`` installs them with ``npm ci`` here; without ``node_modules`` (or Node) the
tests are skipped, except under ``CI=true``, where a missing install is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.agent.conftest import store
from tests.gateway.conftest import time_limit

__all__ = ["NODE_MODULES", "npm_packages", "store", "time_limit"]

NODE_MODULES = Path(__file__).parent / "node_modules"


@pytest.fixture
def npm_packages() -> Path:
    """The installed npm packages; skip (fail under CI) when they or Node are missing."""
    missing = [
        what
        for what, is_there in [
            ("node", shutil.which("node") is not None),
            ("node_modules (run `npm ci` in tests/command_agents)", NODE_MODULES.is_dir()),
        ]
        if not is_there
    ]
    if missing:
        message = f"command agent tests need {' and '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; scripts/test.sh installs them")
        pytest.skip(message)
    return NODE_MODULES
