"""What recording a run in the store costs a training step: ``MetricsLogger.log`` with and
without the ``RunRecorder`` sink, in the same process, on a real SQLite store.

Each variant logs ``--records`` records of ``--metrics`` numbers (what a GRPO step writes is
about 40), yielding to the event loop every 50 records as a training loop does between steps,
so the recorder's background writer runs meanwhile. The baseline is the same logger without
the sink (file only), measured in the same run, twice each in alternation. Prints ONE JSON
line: median and p99 microseconds per ``log`` call, how many records reached the store and how
long ``finish`` took to write the rest.

    .venv/bin/python benchmarks/run_record_overhead.py [--records 2000] [--metrics 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fulmen.store import open_store
from fulmen.trainer.metrics import MetricsLogger
from fulmen.trainer.run_record import RunRecorder
from fulmen.types import Run, RunStatus


async def _variant(
    store: Any, run_dir: Path, label: str, records: int, metrics: int
) -> dict[str, Any]:
    values = {f"m/{i}": i * 0.5 for i in range(metrics)}
    out: dict[str, Any] = {}
    with MetricsLogger(run_dir / label) as logger:
        recorder = None
        if label.startswith("recorded"):
            recorder = RunRecorder(store, Run(run_id=label, name=label, started_at=time.time()))
            await recorder.start()
            logger.add_sink(recorder.metrics)
        times: list[float] = []
        for step in range(records):
            started = time.perf_counter()
            logger.log(step, values, echo=False)
            times.append(time.perf_counter() - started)
            if step % 50 == 0:
                await asyncio.sleep(0)
        if recorder is not None:
            started = time.perf_counter()
            await recorder.finish(RunStatus.SUCCEEDED)
            out["finish_s"] = round(time.perf_counter() - started, 3)
            page = await store.query_run_metrics(label, limit=10_000)
            out["stored"] = len(page.items)
    times.sort()
    out["median_us"] = round(statistics.median(times) * 1e6, 1)
    out["p99_us"] = round(times[int(0.99 * (len(times) - 1))] * 1e6, 1)
    return out


async def main(records: int, metrics: int) -> dict[str, Any]:
    """Run the variants in alternation and return their figures."""
    tmp = Path(tempfile.mkdtemp(prefix="run-record-"))
    figures: dict[str, Any] = {"records": records, "metrics_per_record": metrics}
    async with open_store(f"sqlite:///{tmp / 'store.db'}", watchdog_interval=None) as store:
        for label in ("file_only_1", "recorded_1", "file_only_2", "recorded_2"):
            figures[label] = await _variant(store, tmp, label, records, metrics)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--metrics", type=int, default=40)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.records, args.metrics))))
