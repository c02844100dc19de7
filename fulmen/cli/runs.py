"""``fulmen runs list|show|diagnose|compare|suggest``: a store's runs, metrics and versions.

``list`` prints one line per run, latest started first (``--limit``/``--offset`` page), with
its model, agent and reward. ``show RUN_ID`` opens with the run's headline (final and served
validation, the served version and why, the steps with an update: ``fulmen.cli.run_story``),
then a summary of its metrics grouped by what they measure (per metric: records, steps, first,
last, min, max) and its model versions with their scores and the resources version serving
them. ``list``, ``compare`` and ``suggest`` read several stores at once: run folders, folders of
run folders, .db files or store URLs (``fulmen.cli.run_sources``).
``diagnose RUN_ID`` says where its step time went and what held it back
(``fulmen.trainer.diagnosis``); ``compare A B [C...]`` sets runs side by side
(``fulmen.debugging.runs_compare``); ``suggest CONFIG`` says which settings went with faster
validation gain (``fulmen.debugging.suggest``). ``--json`` prints the records themselves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cli.output import quiet_broken_pipe
from fulmen.cli.parsers import Arg, add_command, add_command_group, arg, config_overrides, json_flag
from fulmen.cli.rollouts import render_table
from fulmen.cli.run_sources import (
    OpenSource,
    Source,
    add_sources_argument,
    all_runs,
    find_run,
    only_run,
    open_sources,
    resolve_source,
    resolve_sources,
)
from fulmen.cli.run_story import (
    grouped_rows,
    read_story,
    run_agent,
    run_model,
    run_reward,
    story_lines,
    version_marks,
)
from fulmen.cli.store import add_store_options, open_cli_store, run_async, run_in_store
from fulmen.errors import ConfigError
from fulmen.store.reading import read_run_metrics

if TYPE_CHECKING:
    from fulmen.debugging.runs_compare import RunsComparison
    from fulmen.store import Store
    from fulmen.types import ModelVersion, Run, RunMetrics

__all__ = ["metrics_summary", "register"]


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _took(run: Run) -> str:
    if run.ended_at is None:
        return "-"
    seconds = max(run.ended_at - run.started_at, 0.0)
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _number(value: float) -> str:
    return f"{value:.4g}"


def metrics_summary(records: Sequence[RunMetrics]) -> list[dict[str, Any]]:
    """Summarize a run's metrics per name: count, first and last step, first, last, min, max.

    Names come in the order they first appear; the records are in step order.
    """
    by_name: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for name, value in record.values.items():
            by_name.setdefault(name, []).append((record.step, value))
    return [
        {
            "name": name,
            "count": len(points),
            "first_step": points[0][0],
            "last_step": points[-1][0],
            "first": points[0][1],
            "last": points[-1][1],
            "min": min(v for _, v in points),
            "max": max(v for _, v in points),
        }
        for name, points in by_name.items()
    ]


def _reward_text(records: Sequence[RunMetrics]) -> str:
    found = run_reward(records)
    return "-" if found is None else f"{found[0]:.3f} {found[1]}"


def _list(args: argparse.Namespace) -> int:
    sources = resolve_sources(args.sources)

    async def main() -> tuple[list[tuple[OpenSource, Run]], bool, dict[int, str]]:
        async with open_sources(args, sources) as opened:
            found = [(item, run) for item in opened for run in await all_runs(item.store)]
            # Latest started first across every store; a page of the merged list.
            found.sort(key=lambda pair: pair[1].started_at, reverse=True)
            page = found[args.offset : args.offset + args.limit]
            more = len(found) > args.offset + args.limit
            rewards = {}
            if not args.json:
                for i, (item, run) in enumerate(page):
                    records = await read_run_metrics(item.store, run.run_id)
                    rewards[i] = _reward_text(records)
            return page, more, rewards

    page, more, rewards = run_async(main)
    if args.json:
        items = [
            {**run.model_dump(mode="json"), "store": item.source.url} if sources
            else run.model_dump(mode="json")
            for item, run in page
        ]  # fmt: skip
        next_cursor = args.offset + args.limit if more else None
        print(json.dumps({"items": items, "next_cursor": next_cursor}, indent=2,
                         ensure_ascii=False))  # fmt: skip
        return 0
    if not page:
        print("no runs recorded: `fulmen train` records its run in the store it uses")
        return 0
    several = len({item.source.url for item, _ in page}) > 1 or len(sources) > 1
    rows = [
        [
            run.run_id,
            run.name,
            run.status.value,
            run_model(run),
            run_agent(run),
            rewards[i],
            _when(run.started_at),
            _took(run),
            *([item.source.label] if several else []),
        ]
        for i, (item, run) in enumerate(page)
    ]
    headers = ["RUN", "NAME", "STATUS", "MODEL", "AGENT", "REWARD", "STARTED (UTC)", "TOOK"]
    print(render_table([*headers, *(["FOLDER"] if several else [])], rows, right={5, 7}))
    if more:
        where = " ".join(args.sources)
        print(
            f"\nmore: fulmen runs list {where + ' ' if where else ''}--offset "
            f"{args.offset + args.limit} --limit {args.limit}"
        )
    return 0


def _one_store(text: str) -> list[Source]:
    """Return the one store of a run folder, .db file or URL (not a folder of run folders)."""
    found = resolve_source(text)
    if len(found) > 1:
        folders = ", ".join(f.label for f in found[:5]) + (", ..." if len(found) > 5 else "")
        raise ConfigError(f"{text!r} holds several run folders ({folders}): name one")
    return found


async def _run_of(args: argparse.Namespace, run: str, stack: Any) -> tuple[Store, str]:
    """Open the store of ``run`` (a run id in --store, or a run folder) and name its run."""
    if Path(run).exists() or "://" in run:
        (item,) = await stack.enter_async_context(open_sources(args, _one_store(run)))
        return item.store, await only_run(item)
    store = await stack.enter_async_context(open_cli_store(args))
    return store, run


def _show(args: argparse.Namespace) -> int:
    async def main() -> tuple[Run, list[RunMetrics], list[ModelVersion], Any]:
        async with contextlib.AsyncExitStack() as stack:
            store, run_id = await _run_of(args, args.run_id, stack)
            run = await store.get_run(run_id)
            records = await read_run_metrics(store, run_id)
            versions = await store.list_model_versions(run_id)
            return run, records, versions, await read_story(store, run, records, versions)

    run, records, versions, story = run_async(main)
    if args.json:
        data = {
            "run": run.model_dump(mode="json"),
            "story": story.json(),
            "metrics": [m.model_dump(mode="json") for m in records],
            "model_versions": [v.model_dump(mode="json") for v in versions],
        }
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(f"run {run.run_id}  {run.name}  {run.status.value}  on {run.host or '-'}")
    ended = _when(run.ended_at)
    print(f"  started {_when(run.started_at)}  ended {ended} (UTC)  took {_took(run)}")
    print(f"  model {run_model(run)}  agent {run_agent(run)}")
    print("\n".join(story_lines(story)))
    summary = metrics_summary(records)
    if not summary:
        print("\nno metrics recorded")
    else:
        steps = sorted({m.step for m in records})
        print(f"\nmetrics: {len(records)} records, steps {steps[0]}-{steps[-1]}")
        headers = ["METRIC", "N", "STEPS", "FIRST", "LAST", "MIN", "MAX"]
        print(
            grouped_rows(
                summary,
                lambda s: [
                    s["name"],
                    str(s["count"]),
                    f"{s['first_step']}-{s['last_step']}",
                    *(_number(s[k]) for k in ("first", "last", "min", "max")),
                ],
                headers,
                right={1, 2, 3, 4, 5, 6},
            )
        )
    if not versions:
        print("\nno model versions recorded")
        return 0
    print(f"\nmodel versions: {len(versions)}")
    marks = version_marks(versions, records)
    rows = [
        [
            str(v.version),
            marks.get(v.version, "-"),
            str(v.step),
            v.kind.value,
            f"v{v.resources_version}" if v.resources_version is not None else "-",
            " ".join(f"{k}={_number(x)}" for k, x in v.scores.items() if math.isfinite(x)) or "-",
            v.path,
        ]
        for v in versions
    ]
    headers = ["VERSION", "MARK", "STEP", "KIND", "SERVED BY", "SCORES", "PATH"]
    print(render_table(headers, rows, right={0, 2}))
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from fulmen.trainer.diagnosis import diagnose_stored_run

    diagnosis = run_in_store(args, lambda store: diagnose_stored_run(store, args.run_id))
    findings = diagnosis.findings
    if args.json:
        print(json.dumps([{"what": f.what, "remedy": f.remedy} for f in findings], indent=2))
        return 0
    if not findings:
        print(f"run {diagnosis.run.run_id}: no steps recorded yet")
    for finding in findings:
        print(finding.line())
    return 0


async def _locate(
    args: argparse.Namespace, runs: Sequence[str], stack: Any
) -> list[tuple[Store, str]]:
    """Find each of ``runs`` (run ids or run folders) in its store; open what is needed.

    A run id is looked up in the ``--in`` stores, else in the run folders named beside it,
    else in the store of ``--store``.
    """
    folders = [r for r in runs if Path(r).exists() or "://" in r]
    by_folder: dict[str, OpenSource] = {}
    for folder in folders:
        (item,) = await stack.enter_async_context(open_sources(args, _one_store(folder)))
        by_folder[folder] = item
    ids = [r for r in runs if r not in by_folder]
    lookup: list[OpenSource] = []
    if ids:
        if args.inside:
            lookup = await stack.enter_async_context(
                open_sources(args, resolve_sources(args.inside))
            )
        elif by_folder:
            lookup = list(by_folder.values())
        else:
            lookup = await stack.enter_async_context(open_sources(args, []))
    located: list[tuple[Store, str]] = []
    for run in runs:
        if run in by_folder:
            located.append((by_folder[run].store, await only_run(by_folder[run])))
        else:
            located.append(((await find_run(lookup, run)).store, run))
    return located


def _compare(args: argparse.Namespace) -> int:
    from fulmen.debugging.runs_compare import compare_located_runs, comparison_json

    async def main() -> RunsComparison:
        async with contextlib.AsyncExitStack() as stack:
            return await compare_located_runs(await _locate(args, args.run_ids, stack))

    result = run_async(main)
    if args.json:
        print(json.dumps(comparison_json(result), indent=2, default=str))
        return 0
    rows = []
    for s in result.runs:
        final = "-" if s.final is None else f"{s.final:.4f}"
        se = "-" if s.final_se is None else f"{s.final_se:.4f}"
        split = " ".join(f"{k} {v:.0%}" for k, v in s.split.items()) or "-"
        rows.append(
            [s.run.run_id, s.run.name, final, se, str(len(s.rewards)), str(s.steps),
             f"{s.train_minutes:.1f}", split]
        )  # fmt: skip
    headers = ["RUN", "NAME", "FINAL VAL", "SE", "TASKS", "STEPS", "TRAIN MIN", "STEP TIME"]
    print(render_table(headers, rows, right={2, 3, 4, 5, 6}))
    if result.differences:
        print("\nconfig keys that differ:")
        diff_rows = [
            [k, *(json.dumps(v) for v in values)] for k, values in result.differences.items()
        ]
        print(render_table(["KEY", *(s.run.run_id for s in result.runs)], diff_rows, right=set()))
    else:
        print("\nthe configs are the same (run_dir aside)")
    first = result.runs[0].run.run_id
    for run_id, c in result.paired.items():
        if c is None:
            print(f"\n{run_id} vs {first}: fewer than two validation tasks scored by both")
            continue
        print(
            f"\n{run_id} - {first} on {c.n} shared validation tasks: {c.mean_difference:+.4f}, "
            f"95% CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}], paired t p = "
            f"{'-' if c.t_p is None else f'{c.t_p:.4g}'}, permutation p = {c.permutation_p:.4g}"
        )
    return 0


def _suggest(args: argparse.Namespace) -> int:
    from fulmen.config_file import flatten
    from fulmen.debugging.suggest import outcomes, suggest
    from fulmen.trainer.config import load_config

    config = load_config(args.config, overrides=args.set)
    asked = flatten(json.loads(config.model_dump_json()))

    async def main() -> Any:
        async with open_sources(args, resolve_sources(args.inside)) as opened:
            found = []
            for item in opened:
                found += await outcomes(item.store, model=config.model, agent=config.agent)
            return found

    runs = run_async(main)
    statements, proposal, varied = suggest(runs, asked, min_runs=args.min_runs)
    changes = {k: v for k, v in proposal.items() if asked.get(k) != v}
    if args.json:
        print(json.dumps({
            "runs": len(runs),
            "varied": varied,
            "statements": [
                {"key": s.key, "best": s.best, "shown": s.shown, "margin": s.weakest_margin,
                 "means": [{"value": v, "mean": m, "runs": n} for v, m, n in s.means]}
                for s in statements
            ],
            "proposal": changes,
        }, indent=2, default=str))  # fmt: skip
        return 0
    print(
        f"{len(runs)} comparable finished runs (model {config.model}, agent {config.agent}); "
        "outcome: validation gain per training minute"
    )
    if varied:
        print(f"settings that varied between them: {', '.join(varied)}")
    if not statements:
        print(
            f"no statement: no setting was run with two values at least {args.min_runs} times each"
        )
    for statement in statements:
        print(f"- {statement.text()}")
    if changes:
        print("proposed next config (the shown best values):")
        for key, value in changes.items():
            print(f"  --set {key}={json.dumps(value)}   (now {json.dumps(asked.get(key))})")
    else:
        print("proposal: keep the config; no setting is shown to matter (docs/runs.md)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen runs``: ``list``, ``show``, ``diagnose``, ``compare`` and ``suggest``."""
    commands = add_command_group(
        subparsers,
        "runs",
        help="list training runs, their metrics and model versions",
        description="Training runs recorded in a store (by `fulmen train`).",
    )
    add_command(
        commands,
        "list",
        quiet_broken_pipe(_list),
        add_store_options,
        add_sources_argument,
        arg("--limit", type=int, default=20, help="runs per page (default 20)"),
        arg("--offset", type=int, default=0, help="skip this many runs"),
        json_flag("print the page as JSON"),
        help="list runs with their model, agent and reward, latest started first",
        description="List the runs of a store, or of several run folders at once (`fulmen runs "
        "list runs/` reads every run folder below runs/): name, status, model, agent, reward (the "
        "last validation's mean, else the mean training reward), start and duration.",
        epilog="example: fulmen runs list runs/   (every RUN_DIR/store.db below runs/)",
    )
    add_command(
        commands,
        "show",
        quiet_broken_pipe(_show),
        add_store_options,
        arg(
            "run_id",
            metavar="RUN",
            help="the run's id (see `fulmen runs list`) in --store, or a run folder (its run)",
        ),
        json_flag("print the run, its metrics and model versions"),
        help="show one run: its outcome, its metrics grouped, its model versions",
        description="Show a run: a headline (final and served validation with their standard "
        "errors, the served model version and why it is served, the steps that made an update), "
        "then its metrics grouped by what they measure, then its model versions.",
    )
    add_command(
        commands,
        "diagnose",
        quiet_broken_pipe(_diagnose),
        add_store_options,
        arg("run_id", metavar="RUN_ID", help="the run's id"),
        json_flag("print the findings as JSON"),
        help="where a run's step time went and what held it back, with what to change",
        description="Read a run's metrics from the store (live while it trains) and say where its "
        "step time went (rollouts, update, weight sync; waiting when asynchronous), how much "
        "validation took, and why steps made no update, each with the setting to change.",
    )
    add_command(
        commands,
        "compare",
        quiet_broken_pipe(_compare),
        add_store_options,
        arg(
            "run_ids",
            nargs="+",
            metavar="RUN",
            help="two or more runs: run folders (`runs/a runs/b`: the run each holds), or run ids "
            "looked up in --in, else in the run folders named, else in --store",
        ),
        _inside(
            "look run ids up in this run folder, folder of run folders, .db file or store URL "
            "(repeat for several)"
        ),
        json_flag("print the comparison as JSON"),
        help="compare runs: config differences, final validation, paired test, time split",
        description="Compare two or more runs, of one store or of several run folders: the config "
        "keys that differ, each run's final validation (mean and standard error over the tasks "
        "it scored), steps, training minutes and step-time split, and each run against the first "
        "on the validation tasks both scored (mean difference, 95% CI, paired t and permutation "
        "tests).",
    )
    add_command(
        commands,
        "suggest",
        quiet_broken_pipe(_suggest),
        add_store_options,
        arg("config", help="the training config to improve"),
        _inside(
            "read the runs of this run folder, folder of run folders (runs/), .db file or "
            "store URL instead of --store (repeat for several)"
        ),
        arg("--min-runs", type=int, default=2, help="runs each compared value needs (default 2)"),
        config_overrides("override a config value"),
        json_flag("print the result as JSON"),
        help="which settings went with faster validation gain; the next config to try",
        description="From the finished runs of a store (or of the --in run folders) with the "
        "config's model and agent, say which settings went with faster validation gain per "
        "training minute, with the runs each statement rests on, and propose the config with the "
        "settings shown (at least two standard errors) to matter. The method: "
        "fulmen/debugging/suggest.py, docs/runs.md.",
    )


def _inside(help: str) -> Arg:
    """Return ``--in SOURCE`` (repeatable): the stores to look runs up in."""
    return arg("--in", dest="inside", action="append", default=[], metavar="SOURCE", help=help)
