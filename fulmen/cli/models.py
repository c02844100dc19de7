"""``fulmen models list|show|serve|compare``: a store's model versions, and the way back to one.

``list`` prints every model version (of one run with ``--run``; of several run folders given
as SOURCEs): run, version, which one the run serves and which validated best, step, kind,
validation scores, the resources version that served it and its path. ``show RUN_ID VERSION``
prints one. ``serve RUN_ID VERSION --engine URL`` makes a running engine (``fulmen serve`` or
vLLM) serve it — an adapter hot-loaded under a model name, full weights reloaded as the base —
the rollback path outside the dashboard. ``compare RUN_ID A B --config CONFIG`` runs the
config's agent on the same validation tasks with version A and with version B (adapters, or
``base``: the model before training) and reports the paired comparison ``fulmen ab`` computes.
``--json`` prints the records themselves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cli.output import quiet_broken_pipe
from fulmen.cli.parsers import add_command, add_command_group, arg, config_overrides, json_flag
from fulmen.cli.rollouts import render_table
from fulmen.cli.run_sources import add_sources_argument, open_sources, resolve_sources
from fulmen.cli.run_story import version_marks
from fulmen.cli.store import add_store_options, cli_settings, open_cli_store, run_async
from fulmen.errors import ConfigError, NotFound
from fulmen.store.reading import read_run_metrics

if TYPE_CHECKING:
    from fulmen.types import ModelVersion

__all__ = ["register"]


def _scores(version: ModelVersion) -> str:
    shown = [f"{k}={v:.4g}" for k, v in version.scores.items() if math.isfinite(v)]
    return " ".join(shown) or "-"


async def _versions(args: argparse.Namespace, run_id: str | None) -> list[ModelVersion]:
    async with open_cli_store(args) as store:
        if run_id is not None:
            await store.get_run(run_id)  # NotFound names an unknown run
        return await store.list_model_versions(run_id)


def _find(versions: list[ModelVersion], run_id: str, number: int) -> ModelVersion:
    found = next((v for v in versions if v.version == number), None)
    if found is None:
        known = ", ".join(str(v.version) for v in versions) or "none"
        raise NotFound(f"run {run_id!r} has no model version {number} (its versions: {known})")
    return found


async def _listed(args: argparse.Namespace) -> list[tuple[ModelVersion, str]]:
    """Return every model version of the SOURCEs (or --store), with its served/best marks."""
    out: list[tuple[ModelVersion, str]] = []
    async with open_sources(args, resolve_sources(args.sources)) as opened:
        found = False
        for item in opened:
            if args.run is not None:
                try:
                    await item.store.get_run(args.run)
                except NotFound:
                    continue
                found = True
            versions = await item.store.list_model_versions(args.run)
            by_run: dict[str, list[ModelVersion]] = {}
            for version in versions:
                by_run.setdefault(version.run_id, []).append(version)
            marks: dict[tuple[str, int], str] = {}
            for run_id, mine in by_run.items():
                records = await read_run_metrics(item.store, run_id)
                for number, mark in version_marks(mine, records).items():
                    marks[(run_id, number)] = mark
            out += [(v, marks.get((v.run_id, v.version), "")) for v in versions]
        if args.run is not None and not found:
            searched = ", ".join(o.source.label for o in opened)
            raise NotFound(f"run {args.run!r} does not exist in {searched}")
    return out


def _list(args: argparse.Namespace) -> int:
    listed = run_async(lambda: _listed(args))
    if args.json:
        data = [{**v.model_dump(mode="json"), "marks": m.split()} for v, m in listed]
        print(json.dumps(data, indent=2))
        return 0
    if not listed:
        print("no model versions recorded: `fulmen train` records each model it serves")
        return 0
    rows = [
        [
            v.run_id,
            str(v.version),
            mark or "-",
            str(v.step),
            v.kind.value,
            _scores(v),
            f"v{v.resources_version}" if v.resources_version is not None else "-",
            v.path,
        ]
        for v, mark in listed
    ]
    headers = ["RUN", "VERSION", "MARK", "STEP", "KIND", "SCORES", "SERVED BY", "PATH"]
    print(render_table(headers, rows, right={1, 3}))
    return 0


def _show(args: argparse.Namespace) -> int:
    version = _find(run_async(lambda: _versions(args, args.run_id)), args.run_id, args.version)
    if args.json:
        print(json.dumps(version.model_dump(mode="json"), indent=2))
        return 0
    served = f"v{version.resources_version}" if version.resources_version is not None else "-"
    exists = "" if Path(version.path).exists() else "  (not on this machine)"
    print(f"run {version.run_id} model version {version.version}: {version.kind.value}")
    print(f"  step {version.step}  served by resources {served}")
    print(f"  path {version.path}{exists}")
    print(f"  scores {_scores(version)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from fulmen.engines.link import EngineLink

    version = _find(run_async(lambda: _versions(args, args.run_id)), args.run_id, args.version)
    if not Path(version.path).exists():
        raise ConfigError(
            f"model version {version.version} of run {version.run_id} is at {version.path}, "
            "which this machine does not have: serve it where its files are"
        )
    name = args.name or f"{version.run_id}-v{version.version}"

    # The engine's admin token, if it asks for one ($FULMEN_ENGINE_TOKEN, never a flag: ps shows
    # flags).
    token = cli_settings(args).engine_token
    link = EngineLink(args.engine, token=token)
    served: dict[str, Any] = run_async(lambda: link.serve(version, name))
    if args.json:
        print(json.dumps(served))
        return 0
    what = f"model {served['model']!r}" if version.kind.value == "adapter" else "its base weights"
    print(f"{args.engine} now serves run {version.run_id}'s version {version.version} as {what}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from fulmen.debugging.ab import format_ab
    from fulmen.debugging.models_ab import compare_models, find_versions
    from fulmen.trainer.config import load_config

    config = load_config(args.config, overrides=args.set)

    async def main() -> Any:
        async with open_cli_store(args) as store:
            versions = await find_versions(store, args.run_id, (args.a, args.b))
        labels = (f"version {args.a}", f"version {args.b}")
        return await compare_models(config, versions, labels=labels, n=args.n, split=args.split)

    result = run_async(main)
    if args.json:
        print(json.dumps({"labels": result.labels, "task_ids": result.task_ids,
                          "rewards_a": result.rewards_a, "rewards_b": result.rewards_b,
                          "failed_a": result.failed_a, "failed_b": result.failed_b,
                          "comparison": dataclasses.asdict(result.comparison)}))  # fmt: skip
        return 0
    print(format_ab(result, alpha=args.alpha).replace("A/B on", "model versions compared on", 1))
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen models`` and its subcommands ``list``, ``show``, ``serve`` and ``compare``."""
    commands = add_command_group(
        subparsers,
        "models",
        help="list the model versions runs published; serve one (rollback)",
        description="Model versions recorded in a store (each model `fulmen train` served).",
    )
    add_command(
        commands,
        "list",
        quiet_broken_pipe(_list),
        add_store_options,
        add_sources_argument,
        arg("--run", metavar="RUN_ID", help="only this run's versions"),
        json_flag("print the versions as JSON"),
        help="list model versions, marking the served and the best one",
        description="List the model versions of a store, or of several run folders. MARK says "
        "which version each run serves (its end-of-run choice; a running run: the latest) and "
        "which validated best.",
    )
    one_version = (
        add_store_options,
        arg("run_id", metavar="RUN_ID", help="the run (see `fulmen runs list`)"),
        arg("version", metavar="VERSION", type=int, help="its model version number"),
        json_flag("print the result as JSON"),
    )
    show = "show one model version"
    add_command(commands, "show", _show, *one_version, help=show, description=show)
    serve = "make a running engine serve one model version"
    add_command(
        commands,
        "serve",
        _serve,
        *one_version,
        arg(
            "--engine",
            required=True,
            metavar="URL",
            help="the engine's base URL (http://HOST:PORT/v1 of fulmen serve or vLLM); an "
            "engine with an admin token gets $FULMEN_ENGINE_TOKEN",
        ),
        arg("--name", help="model name of a served adapter (default: RUN_ID-vVERSION)"),
        help=serve,
        description=serve,
    )
    add_command(
        commands,
        "compare",
        _compare,
        add_store_options,
        arg("run_id", metavar="RUN_ID", help="the run whose versions to compare"),
        arg("a", metavar="A", help="a model version number, or base"),
        arg("b", metavar="B", help="a model version number, or base"),
        arg("--config", required=True, help="the training config (agent, tasks)"),
        arg("-n", type=int, default=32, help="tasks to run (default 32)"),
        arg(
            "--split", choices=("val", "train"), default="val", help="validation or training tasks"
        ),
        arg("--alpha", type=float, default=0.05, help="test level (default 0.05)"),
        config_overrides("override a config value"),
        json_flag("print the result as JSON"),
        help="compare two model versions on the same validation tasks (paired)",
        description="Run the config's agent on the same tasks with version A and with version B "
        "(LoRA adapters of the run, or 'base': the model before training), once each at the "
        "validation sampling, and report both means, the paired difference B - A with its 95% "
        "CI, and paired t, sign and permutation tests.",
    )
