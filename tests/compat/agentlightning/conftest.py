"""Fixtures of the compat tests: the gateway's (scripted upstream, store, gateway), one tiny
engine shared by the prompt-only runs, and a guard that puts logging back as it was."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.gateway.conftest import (
    config,
    gw,
    script,
    store,
    time_limit,
    upstream_client,
    upstream_url,
)
from tests.prefork import python

if TYPE_CHECKING:
    from fulmen.engines.launcher import BuiltinLauncher

__all__ = [
    "config",
    "gw",
    "keep_logging",
    "script",
    "store",
    "time_limit",
    "tiny_engine",
    "upstream_client",
    "upstream_url",
]


@pytest.fixture(scope="session")
def tiny_engine(
    tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BuiltinLauncher]:
    """The tiny model on the built-in engine, served as ``tiny``: the endpoint of every
    prompt-only run here (APO, driven algorithms, dev), started once for the session."""
    from fulmen.engines.launcher import BuiltinLauncher

    log = tmp_path_factory.mktemp("agl-engine") / "engine.log"
    launcher = BuiltinLauncher(
        str(tiny_dir),
        max_batch=8,
        log_path=log,
        extra_args=["--served-model-name", "tiny"],
        python=python(),
    )
    launcher.start()
    yield launcher
    launcher.stop()


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """Restore the loggers 0.x's ``setup_logging`` configures (handlers, level, propagate)."""
    names = ("fulmen", "agentlightning", "fulmen.train")
    saved = {n: logging.getLogger(n) for n in names}
    state = {n: (list(lg.handlers), lg.level, lg.propagate) for n, lg in saved.items()}
    yield
    for name, logger in saved.items():
        handlers, level, propagate = state[name]
        for handler in list(logger.handlers):
            if handler not in handlers:
                logger.removeHandler(handler)
                handler.close()
        logger.setLevel(level)
        logger.propagate = propagate
