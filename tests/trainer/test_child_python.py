"""``$FULMEN_PYTHON`` starts a training run's built-in engine and its data-parallel ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.settings import Settings
from tests.prefork import python

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"


@pytest.mark.slow
def test_a_run_starts_its_engine_and_ranks_with_the_configured_python(tmp_path: Path) -> None:
    from fulmen.trainer.config import load_config
    from fulmen.trainer.trainer import Trainer

    pytest.importorskip("openai")
    calls = tmp_path / "calls.txt"
    wrapper = tmp_path / "python"
    # Records its arguments, then runs them on the interpreter the suite would have used.
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexec "{python()}" "$@"\n')
    wrapper.chmod(0o755)
    config = load_config(
        TOY / "config.yaml",
        overrides=[
            f"run_dir={tmp_path / 'run'}",
            "algorithm.steps=1",
            "validation=null",
            "data.val=null",
            "algorithm.data_parallel={world_size: 2, backend: gloo, timeout_s: 120}",
        ],
    )
    settings = Settings.from_env({"FULMEN_PYTHON": str(wrapper)})
    Trainer(config, settings=settings).fit()
    started = calls.read_text().splitlines()
    assert [line.split()[1] for line in started] == [
        "fulmen.cli.serve",
        "fulmen.algorithms.parallel.rank_main",
    ], started
