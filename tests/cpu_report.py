"""Sum a ``--cpu-report`` file (``tests/conftest.py``) by test file, the costliest first.

python -m pytest -n 3 --dist loadfile --cpu-report /tmp/cpu.jsonl tests
python -m tests.cpu_report /tmp/cpu.jsonl [--top 30]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def by_file(lines: list[str]) -> list[tuple[str, float, float, int]]:
    """Return ``(file, cpu_s, wall_s, tests)`` per test file, the most CPU first."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for line in lines:
        record = json.loads(line)
        total = totals[record["id"].split("::", 1)[0]]
        total[0] += record["cpu_s"]
        total[1] += record["wall_s"]
        total[2] += 1
    rows = [(file, cpu, wall, int(n)) for file, (cpu, wall, n) in totals.items()]
    return sorted(rows, key=lambda row: (-row[1], row[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cpu_report", description=__doc__)
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    rows = by_file(args.report.read_text(encoding="utf-8").splitlines())
    cpu = sum(row[1] for row in rows)
    print(f"{sum(row[3] for row in rows)} tests, {cpu:.0f} CPU-s in all")
    print(f"{'CPU-s':>8} {'share':>6} {'wall-s':>8} {'tests':>5}  file")
    for file, file_cpu, wall, n in rows[: args.top]:
        print(f"{file_cpu:8.1f} {file_cpu / max(cpu, 1e-9):6.1%} {wall:8.1f} {n:5d}  {file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
