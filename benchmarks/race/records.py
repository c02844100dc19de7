"""What a race has recorded in ``OUT``: its settings, its rows, and the rows scored again."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from race.heldout import evaluate
from race.settings import ADDED_SETTINGS, SETTINGS


def open_out(args: argparse.Namespace) -> Path:
    """Make ``OUT``, record the race's settings there; refuse one measured with others."""
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {key: getattr(args, key) for key in SETTINGS}
    path, results = args.out / "race.json", args.out / "results.jsonl"
    if path.exists():
        differ = settings_differ(recorded_settings(args.out), settings)
        if differ:
            raise SystemExit(
                f"{args.out} holds a race with other settings ({differ}); use another --out"
            )
    elif results.exists():
        raise SystemExit(f"{results} has no race.json beside it: use another --out")
    else:
        path.write_text(json.dumps(settings, indent=1), encoding="utf-8")
    return results


def recorded_settings(out: Path) -> dict[str, Any]:
    """The settings ``OUT``'s rows were measured with (those added since, at their old value)."""
    path = out / "race.json"
    if not path.exists():
        raise SystemExit(f"{out} holds no race (no race.json)")
    return {**ADDED_SETTINGS, **json.loads(path.read_text(encoding="utf-8"))}


def settings_differ(
    found: dict[str, Any], settings: dict[str, Any], ignore: tuple[str, ...] = ()
) -> str:
    """Where two races' settings differ (``KEY: THERE there, NOW now``), ``""`` where none."""
    keys = sorted(k for k in set(found) | set(settings) if k not in ignore)
    return ", ".join(
        f"{k}: {found.get(k)!r} there, {settings.get(k)!r} now"
        for k in keys
        if found.get(k) != settings.get(k)
    )


def read_results(results: Path) -> list[dict[str, Any]]:
    """Every row recorded so far (none before the first run)."""
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]


def score_again(
    args: argparse.Namespace,
    dataset: str,
    heldout: list[dict[str, Any]],
    results: Path,
    recorded: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Give each of ``dataset``'s rows recorded without per-problem verdicts its ``correct``.

    Rows measured before the race kept them are scored again from the adapter the run saved
    (``step-N`` of its folder; step 0 is the base model): the evaluator is greedy and
    deterministic, so a verdict list is kept only where it gives the recorded accuracy again.
    ``results`` is rewritten whole (a temporary file moved over it); the rows are returned.
    """
    missing = [
        r
        for r in recorded
        if r.get("dataset") == dataset and r["kind"] in ("base", "point") and "correct" not in r
    ]
    if not missing:
        return recorded
    verdicts: dict[Path | None, dict[str, Any]] = {}
    for row in missing:
        adapter = None
        if row["kind"] == "point" and row["step"]:
            run = args.out / dataset / row["trainer"] / f"lr{row['lr']:g}" / f"seed{row['seed']}"
            adapter = run / "adapters" / f"step-{int(row['step']):05d}"
            if not adapter.exists():
                print(f"race: {adapter} is gone; its row keeps no verdicts", file=sys.stderr)
                continue
        if adapter not in verdicts:
            verdicts[adapter] = evaluate(args, heldout, adapter)
        again = verdicts[adapter]
        if again["accuracy"] == row["accuracy"]:
            row["correct"] = again["correct"]
        else:
            print(
                f"race: {adapter or 'the base model'} scores {again['accuracy']} now, "
                f"{row['accuracy']} when recorded; its row keeps no verdicts",
                file=sys.stderr,
            )
    scratch = results.with_suffix(".rewrite")
    scratch.write_text("".join(json.dumps(r) + "\n" for r in recorded), encoding="utf-8")
    os.replace(scratch, results)
    return recorded


def machine() -> str:
    """The machine a run ran on: its name, CPU model and core count."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {cpu} x{os.cpu_count()}"


def append(path: Path, record: dict[str, Any]) -> None:
    """Add one row to ``OUT/results.jsonl``."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
