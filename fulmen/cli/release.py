"""``fulmen release list|status|promote|rollback``: canary releases served by the gateway.

``status NAME`` prints the release's state and arms, each arm's sessions and mean reward with
its 95% interval, the difference candidate - incumbent with its interval, the improvement
ratio and Welch's test, and the latest events (gate windows and decisions). ``promote NAME``
sends every session to the candidate, ``rollback NAME`` every session to the incumbent: the
store records the decision and each gateway serving the release switches at its next read
(``release.poll_s``), requests in flight finishing on the model they were sent to. See
``docs/releases.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from typing import Any, Literal

from fulmen.cli.parsers import add_command, add_command_group, arg, json_flag
from fulmen.cli.rollouts import render_table
from fulmen.cli.store import add_store_options, open_cli_store, run_async, run_in_store

__all__ = ["register"]


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _list(args: argparse.Namespace) -> int:
    releases = run_in_store(args, lambda store: store.list_releases())
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in releases], indent=2))
        return 0
    if not releases:
        print("no releases: a gateway with a release: section puts its release in the store")
        return 0
    rows = [
        [r.name, r.state.value, r.incumbent.model, r.candidate.model, f"{r.share:.0%}",
         str(r.revision)]
        for r in releases
    ]  # fmt: skip
    headers = ["RELEASE", "STATE", "INCUMBENT", "CANDIDATE", "SHARE", "REVISION"]
    print(render_table(headers, rows, right={4, 5}))
    return 0


def _status(args: argparse.Namespace) -> int:
    from fulmen.release import ReleaseOutcomes, release_figures
    from fulmen.release.figures import p_text

    async def main() -> Any:
        async with open_cli_store(args) as store:
            release = await store.get_release(args.name)
            outcomes = await ReleaseOutcomes(store, args.name).read()
            return release, release_figures(outcomes)

    release, figures = run_async(main)
    if args.json:
        print(json.dumps({"release": release.model_dump(mode="json"), **figures.as_json()}))
        return 0
    print(f"release {release.name}: {release.state.value} (revision {release.revision})")
    print(f"  candidate share {release.share:.0%}, seed {release.seed}")
    rows = []
    for label, arm, figs in (
        ("incumbent", release.incumbent, figures.incumbent),
        ("candidate", release.candidate, figures.candidate),
    ):
        source = f"{arm.run_id} v{arm.version}" if arm.run_id is not None else "-"
        interval = f"[{_fmt(figs.ci_low)}, {_fmt(figs.ci_high)}]" if figs.mean is not None else "-"
        rows.append([label, arm.model, source, str(figs.sessions), str(figs.rewarded),
                     _fmt(figs.mean), interval])  # fmt: skip
    headers = ["ARM", "MODEL", "VERSION", "SESSIONS", "REWARDED", "MEAN", "95% CI"]
    print(render_table(headers, rows, right={3, 4, 5}))
    test = figures.comparison
    if test is None:
        print("  comparison: needs two sessions with a reward on each arm")
    else:
        ratio = _fmt(test.ratio, ".3f") if test.ratio is not None else "undefined"
        print(
            f"  difference (candidate - incumbent) {test.difference:+.4g} "
            f"[{test.ci_low:+.4g}, {test.ci_high:+.4g}], ratio {ratio}, "
            f"Welch t={_fmt(test.t_statistic, '.3f')} df={_fmt(test.df, '.1f')} "
            f"{p_text(test.p_value)}"
        )
    events = release.events[-args.events :] if args.events > 0 else []
    if events:
        print("  events:")
    for event in events:
        verdict = event.figures.get("verdict")
        what = f"{event.kind} ({verdict})" if verdict is not None else event.kind
        print(f"    {event.at:.0f}  {what} by {event.by}: {event.reason}")
    return 0


def _decide(args: argparse.Namespace, kind: Literal["promoted", "rolled_back"]) -> int:
    from fulmen.types.releases import ReleaseDecision

    decision = ReleaseDecision(
        event_id=f"cli-{os.urandom(8).hex()}",
        kind=kind,
        by="cli",
        reason=args.reason or ("promoted by hand" if kind == "promoted" else "rolled back by hand"),
    )

    release = run_in_store(args, lambda store: store.decide_release(args.name, decision))
    if args.json:
        print(json.dumps(release.model_dump(mode="json")))
        return 0
    model = release.candidate.model if kind == "promoted" else release.incumbent.model
    print(
        f"release {release.name} is {release.state.value}: every session goes to {model!r} "
        "once each gateway re-reads the release (release.poll_s)"
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen release`` and its subcommands list, status, promote and rollback."""
    commands = add_command_group(
        subparsers,
        "release",
        help="canary releases: per-arm figures, promote or roll back",
        description="Canary releases the gateway serves (its release: section).",
    )
    add_command(
        commands,
        "list",
        _list,
        add_store_options,
        json_flag("print the releases as JSON"),
        help="list releases",
        description="List releases.",
    )
    add_command(
        commands,
        "status",
        _status,
        add_store_options,
        arg("name", metavar="NAME", help="the release's name"),
        arg("--events", type=int, default=10, metavar="N", help="latest events shown (default 10)"),
        json_flag("print the figures as JSON"),
        help="per-arm sessions, mean rewards with 95%% CIs, the difference and its test",
        description="Print the release's state, each arm's sessions and mean reward with its 95%% "
        "interval, the difference candidate - incumbent with its interval, the improvement "
        "ratio and Welch's t-test, and the latest events.",
    )
    decisions: tuple[tuple[str, Literal["promoted", "rolled_back"], str], ...] = (
        ("promote", "promoted", "send every session to the candidate"),
        ("rollback", "rolled_back", "send every session to the incumbent"),
    )
    for name, kind, text in decisions:
        add_command(
            commands,
            name,
            functools.partial(_decide, kind=kind),
            add_store_options,
            arg("name", metavar="NAME", help="the release's name"),
            arg("--reason", help="why, recorded with the decision"),
            json_flag("print the release as JSON"),
            help=text,
            description=text[0].upper() + text[1:] + ".",
        )
