"""A stand-in for a long training run that records the signal that stopped it.

The race (``race_trl.py``) and the seed sweep (``over_seeds.py``) each wait on a child that
trains; stopped by SIGTERM, each must stop that child first, not leave it training.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest


def write_trainer(tmp_path: Path) -> Path:
    """A script that writes its pid to ``ready``, then sleeps; on SIGTERM writes ``stopped``."""
    trainer = tmp_path / "trainer.py"
    trainer.write_text(
        "import os, pathlib, signal, sys, time\n"
        "def stop(signum, frame):\n"
        f"    pathlib.Path({str(tmp_path / 'stopped')!r}).write_text(signal.Signals(signum).name)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(tmp_path / 'ready')!r}).write_text(str(os.getpid()))\n"
        "time.sleep(120)\n",
        encoding="utf-8",
    )
    return trainer


def assert_sigterm_stops_trainer_first(argv: list[str], tmp_path: Path) -> None:
    """Start ``argv`` (which runs ``write_trainer``'s script), SIGTERM it once the trainer runs.

    It must exit 143 after the trainer got SIGTERM and exited (checked by its pid).
    """
    ready, stopped = tmp_path / "ready", tmp_path / "stopped"
    parent = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        parent.terminate()
        assert parent.wait(timeout=60) == 143
    finally:
        parent.kill()
    assert stopped.read_text() == "SIGTERM"  # stopped cleanly, before its parent exited
    with pytest.raises(ProcessLookupError):
        os.kill(int(ready.read_text()), 0)
