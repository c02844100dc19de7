"""``--cpu-report FILE`` records what each test costs; ``tests.cpu_report`` sums it by file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cpu_report import main

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import subprocess
import sys


def test_busy_child() -> None:  # a child process that burns most of a CPU-second (0.85 s here)
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(16_000_000))"], check=True)


def test_idle() -> None:
    pass
"""


def test_a_test_that_waits_for_a_busy_child_is_charged_its_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    report = tmp_path / "cpu.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         f"--rootdir={tmp_path}", str(tmp_path / "test_probe.py"), f"--cpu-report={report}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        # No prefork server: its start-up would be charged to whichever test set it up.
        env={**os.environ, "FULMEN_TEST_PREFORK": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = report.read_text().splitlines()
    records = {r["id"].rpartition("::")[2]: r for r in map(json.loads, lines)}
    assert set(records) == {"test_busy_child", "test_idle"}
    busy, idle = records["test_busy_child"], records["test_idle"]
    # the threshold sits far from both: 4M iterations (0.21-0.23 s) once recorded exactly 0.2
    assert busy["cpu_s"] > 0.4 > idle["cpu_s"]

    assert main([str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 tests, ")
    *_, tests, file = out.splitlines()[2].split()  # the one file, with both tests
    assert (tests, Path(file).name) == ("2", "test_probe.py")
