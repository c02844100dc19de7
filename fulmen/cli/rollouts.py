"""``fulmen rollouts``: enqueue tasks, list rollouts, show one with its attempts, spans, calls.

Output is a compact table meant for a terminal; ``--json`` prints the same data for programs.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fulmen.cli.enqueue import register_enqueue
from fulmen.cli.output import quiet_broken_pipe
from fulmen.cli.parsers import add_command, add_command_group, arg, json_flag
from fulmen.cli.store import add_store_options, open_cli_store, run_async, run_in_store
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.store import Store
    from fulmen.types import Attempt, LLMCall, Rollout, Span

__all__ = ["register", "render_table", "run_rollout_pattern"]

_TOKENS_IN = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_TOKENS_OUT = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """Render rows as aligned columns; column indexes in ``right`` are right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _seconds(start: datetime | float | None, end: datetime | float | None) -> str:
    if start is None or end is None:
        return "-"
    if isinstance(start, datetime) and isinstance(end, datetime):
        delta = (end - start).total_seconds()
    elif isinstance(start, float | int) and isinstance(end, float | int):
        delta = float(end) - float(start)
    else:
        return "-"
    return f"{delta * 1000:.0f} ms" if delta < 1 else f"{delta:.2f} s"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


#: Lines of a stored error ``rollouts show`` prints: a traceback's end (its exception) matters.
_ERROR_LINES = 40


def _error_lines(error: str, label: str) -> list[str]:
    """``error`` in full, indented under ``label`` (a long traceback: its last lines)."""
    text = error.rstrip().splitlines() or [""]
    pad = " " * len(label)
    shown = text
    if len(text) > _ERROR_LINES:
        skipped = len(text) - _ERROR_LINES
        shown = [f"... {skipped} lines above (--json shows all)", *text[-_ERROR_LINES:]]
    return [label + shown[0], *(pad + line for line in shown[1:])]


def _terminal_width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


# -- list ---------------------------------------------------------------------------------------


def run_rollout_pattern(run_id: str) -> re.Pattern[str]:
    """Match the ids of the rollouts run ``run_id`` enqueued (``RUN-g1-...``, ``RUN-g2-st1-...``).

    ``fulmen train`` names them so (``fulmen.trainer.context.rollout_prefix``).
    """
    return re.compile(re.escape(run_id) + r"-g\d+-")


async def _candidates(store: Store, args: argparse.Namespace) -> AsyncIterator[Rollout]:
    """Yield the rollouts the store's filters pass, newest first unless ``--oldest-first``."""
    from fulmen.store.reading import iter_rollouts
    from fulmen.types import Mode, RolloutQuery, RolloutStatus

    query = RolloutQuery(
        statuses=[RolloutStatus(s) for s in args.status] if args.status else None,
        mode=Mode(args.mode) if args.mode else None,
        task_id=args.task,
        limit=500,
        cursor=args.after if args.oldest_first else None,
    )
    if args.oldest_first:
        async for rollout in iter_rollouts(store, query):
            yield rollout
        return
    # The store answers in enqueue order only: read the matching ones, then walk back.
    found = [
        r
        async for r in iter_rollouts(store, query)
        if args.before is None or r.position < args.before
    ]
    for rollout in reversed(found):
        yield rollout


async def _listed(
    store: Store, args: argparse.Namespace
) -> tuple[list[Rollout], list[float | None], int | None]:
    """Return the page to print: rollouts, their rewards, the next page's cursor (if any)."""
    pattern = None
    if args.run is not None:
        await store.get_run(args.run)  # NotFound names an unknown run
        pattern = run_rollout_pattern(args.run)
    shown: list[Rollout] = []
    rewards: list[float | None] = []
    more = False
    async for rollout in _candidates(store, args):
        if pattern is not None and not pattern.match(rollout.rollout_id):
            continue
        reward = await _latest_reward(store, rollout)
        if args.min_reward is not None and (reward is None or reward < args.min_reward):
            continue
        if len(shown) == args.limit:
            more = True
            break
        shown.append(rollout)
        rewards.append(reward)
    return shown, rewards, (shown[-1].position if more and shown else None)


def _list(args: argparse.Namespace) -> int:
    if args.after is not None:
        args.oldest_first = True  # --after is a position in enqueue order
    if args.before is not None and args.oldest_first:
        raise ConfigError("--before pages newest first: leave out --oldest-first and --after")

    items, rewards, next_cursor = run_in_store(args, lambda store: _listed(store, args))
    if args.json:
        data = {
            "items": [r.model_dump(mode="json") for r in items],
            "next_cursor": next_cursor,
            "order": "oldest_first" if args.oldest_first else "newest_first",
        }
        for item, reward in zip(data["items"], rewards, strict=True):
            item["reward"] = reward  # the latest attempt's primary reward, as in the table
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    if not items:
        print("no rollouts match")
        return 0
    rows = [
        [
            r.rollout_id,
            r.status.value,
            r.mode.value,
            str(r.attempt_count),
            f"v{r.resources_version}" if r.resources_version is not None else "-",
            r.task_id or "-",
            _when(r.enqueued_at),
            _seconds(r.started_at, r.ended_at),
            f"{reward:.4g}" if reward is not None else "-",
        ]
        for r, reward in zip(items, rewards, strict=True)
    ]
    headers = [
        *("ROLLOUT", "STATUS", "MODE", "ATTEMPTS", "RES", "TASK", "ENQUEUED (UTC)", "TOOK"),
        "REWARD",
    ]
    print(render_table(headers, rows, right={3, 7, 8}))
    if next_cursor is not None:
        flag = "--after" if args.oldest_first else "--before"
        print(f"\nmore: fulmen rollouts list {flag} {next_cursor} (same filters)")
    return 0


async def _latest_reward(store: Store, rollout: Rollout) -> float | None:
    """Return the primary reward of the rollout's latest attempt (``None``: none or not run).

    Reward spans and posted rewards (a ``reward:`` judge, ``POST /rewards``) both count, as
    they do for training (``fulmen.transitions.signals.latest_reward``).
    """
    from fulmen.store.reading import read_spans
    from fulmen.transitions.signals import latest_reward

    if rollout.attempt_count == 0:
        return None
    attempts = await store.list_attempts(rollout.rollout_id)
    if not attempts:
        return None
    attempt_id = attempts[-1].attempt_id
    spans = await read_spans(store, rollout.rollout_id, attempt_id=attempt_id)
    rewards = await store.list_rewards(rollout.rollout_id)
    posted = [r for r in rewards if r.attempt_id in (None, attempt_id)]
    return latest_reward(spans, posted)


# -- show ---------------------------------------------------------------------------------------


def _first_number(attributes: dict[str, Any], keys: Sequence[str]) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def _reward(span: Span) -> str:
    """Render a span's reward: a reward span's named values, else a ``*reward*`` attribute.

    A reward span's values print as ``0.75`` for the single default reward and as
    ``correct=1 format=0.5`` for named ones, the primary first.
    """
    from fulmen.tracing.semconv import DEFAULT_REWARD_NAME, reward_events

    for event in reward_events([span]):
        if list(event.values) == [DEFAULT_REWARD_NAME]:
            return f"{event.values[DEFAULT_REWARD_NAME]:g}"
        names = sorted(event.values, key=lambda name: name != event.primary)
        return " ".join(f"{name}={event.values[name]:g}" for name in names)
    for key, value in span.attributes.items():
        last = key.rsplit(".", 1)[-1]
        if last.startswith("reward") and isinstance(value, int | float | str):
            return f"{value:g}" if isinstance(value, float) else str(value)
    return ""


def _tokens(prompt: int | None, completion: int | None) -> str:
    if prompt is None and completion is None:
        return ""
    return f"{'?' if prompt is None else prompt}/{'?' if completion is None else completion}"


def _span_depths(spans: Sequence[Span]) -> dict[str, int]:
    parents = {s.span_id: s.parent_id for s in spans}
    depths: dict[str, int] = {}
    for span_id in parents:
        depth, current, seen = 0, parents[span_id], {span_id}
        while current is not None and current in parents and current not in seen:
            seen.add(current)
            depth, current = depth + 1, parents[current]
        depths[span_id] = depth
    return depths


def _call_row(call: LLMCall, name_width: int) -> list[str]:
    usage = call.usage
    prompt = len(call.prompt_token_ids) if call.prompt_token_ids is not None else None
    completion = sum(len(c.token_ids) for c in call.choices if c.token_ids is not None) or None
    if prompt is None:
        prompt = _first_number(usage, ("prompt_tokens", "input_tokens"))
    if completion is None:
        completion = _first_number(usage, ("completion_tokens", "output_tokens"))
    latency = f"{call.latency_s * 1000:.0f} ms" if call.latency_s is not None else "-"
    name = f"{call.endpoint} {call.model or ''}".strip()
    status = "error" if call.error else ("token-level" if call.is_token_level else "text")
    return [
        str(call.sequence),
        "llm",
        _clip(name, name_width),
        latency,
        _tokens(prompt, completion),
        "",
        status,
    ]


def _span_status(span: Span) -> str:
    """Return the span's status column; a command's says how it ended (``exit 1``)."""
    from fulmen.tracing import semconv

    if span.status.message:
        return span.status.message
    if semconv.COMMAND_EXIT_CODE in span.attributes:
        return f"exit {span.attributes[semconv.COMMAND_EXIT_CODE]}"
    return span.status.code.value if span.status.code.value != "unset" else ""


def _attempt_rows(spans: list[Span], calls: list[LLMCall], name_width: int) -> list[list[str]]:
    depths = _span_depths(spans)
    events: list[tuple[int, list[str]]] = []
    for span in spans:
        name = "  " * depths[span.span_id] + span.name
        attrs: dict[str, Any] = dict(span.attributes)
        tokens = _tokens(_first_number(attrs, _TOKENS_IN), _first_number(attrs, _TOKENS_OUT))
        row = [
            str(span.sequence),
            "span",
            _clip(name, name_width),
            _seconds(span.start_time, span.end_time),
            tokens,
            _reward(span),
            _span_status(span),
        ]
        events.append((span.sequence, row))
    events += [(c.sequence, _call_row(c, name_width)) for c in calls]
    return [row for _, row in sorted(events, key=lambda e: e[0])]


def _render_show(rollout: Rollout, attempts: list[Attempt], spans: list[Span],
                 calls: list[LLMCall]) -> str:  # fmt: skip
    width = _terminal_width()
    resources = f"v{rollout.resources_version}" if rollout.resources_version else "-"
    lines = [
        f"rollout {rollout.rollout_id}  {rollout.status.value.upper()}  mode {rollout.mode.value}"
        f"  task {rollout.task_id or '-'}  resources {resources}",
        f"  enqueued {_when(rollout.enqueued_at)} UTC   took "
        f"{_seconds(rollout.started_at, rollout.ended_at)}   attempts {rollout.attempt_count}"
        f"/{rollout.config.max_attempts}",
        "  input    " + _clip(json.dumps(rollout.input, ensure_ascii=False), width - 11),
    ]
    if rollout.metadata:
        lines.append("  metadata " + _clip(json.dumps(rollout.metadata), width - 11))
    if rollout.error and (not attempts or rollout.error != attempts[-1].error):
        lines += _error_lines(rollout.error, "  error    ")  # else shown under its attempt
    headers = ["SEQ", "KIND", "NAME", "TOOK", "TOKENS in/out", "REWARD", "STATUS"]
    name_width = max(20, min(60, width - 60))
    for attempt in attempts:
        lines += [
            "",
            f"attempt {attempt.number}  {attempt.attempt_id}  {attempt.status.value.upper()}"
            f"  worker {attempt.worker_id}  took {_seconds(attempt.started_at, attempt.ended_at)}",
        ]
        if attempt.error:
            lines += _error_lines(attempt.error, "  error ")
        if attempt.late_status is not None:
            lines.append(f"  late report: {attempt.late_status.value} {attempt.late_error or ''}")
        mine_s = [s for s in spans if s.attempt_id == attempt.attempt_id]
        mine_c = [c for c in calls if c.attempt_id == attempt.attempt_id]
        if not mine_s and not mine_c:
            lines.append("  (no spans or LLM calls)")
            continue
        table = render_table(headers, _attempt_rows(mine_s, mine_c, name_width), right={0, 3, 4, 5})
        lines += ["  " + row for row in table.splitlines()]
    if not attempts:
        lines += ["", "(not claimed yet: no attempts)"]
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    from fulmen.store.reading import read_llm_calls, read_spans

    async def main() -> Any:
        async with open_cli_store(args) as store:
            rollout = await store.get_rollout(args.rollout_id)
            attempts = await store.list_attempts(args.rollout_id)
            spans = await read_spans(store, args.rollout_id)
            calls = await read_llm_calls(store, args.rollout_id)
            return rollout, attempts, spans, calls

    rollout, attempts, spans, calls = run_async(main)
    if args.json:
        data = {
            "rollout": rollout.model_dump(mode="json"),
            "attempts": [a.model_dump(mode="json") for a in attempts],
            "spans": [s.model_dump(mode="json") for s in spans],
            "llm_calls": [c.model_dump(mode="json") for c in calls],
        }
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(_render_show(rollout, attempts, spans, calls))
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen rollouts`` with ``enqueue``, ``list`` and ``show``."""
    commands = add_command_group(
        subparsers,
        "rollouts",
        help="enqueue tasks; list rollouts; show one with its attempts, spans and LLM calls",
        description="Inspect the rollouts in a store.",
    )
    register_enqueue(commands)
    add_command(
        commands,
        "list",
        quiet_broken_pipe(_list),
        add_store_options,
        arg(
            "--status",
            action="append",
            choices=["queuing", "running", "succeeded", "failed", "cancelled"],
            help="only rollouts with this status (repeat for several)",
        ),
        arg("--mode", choices=["train", "val", "test"], help="only this mode"),
        arg("--task", metavar="TASK_ID", help="only this task's rollouts"),
        arg(
            "--run",
            metavar="RUN_ID",
            help="only the rollouts of this training run (fulmen runs list)",
        ),
        arg(
            "--min-reward",
            type=float,
            metavar="R",
            help="only rollouts whose latest attempt's reward is at least R (no reward: left out)",
        ),
        arg("--oldest-first", action="store_true", help="list in enqueue order, oldest first"),
        arg("--limit", type=int, default=50, help="show at most N rollouts (default: 50)"),
        arg(
            "--after",
            type=int,
            metavar="POSITION",
            help="oldest first, continuing after this position (paging)",
        ),
        arg(
            "--before",
            type=int,
            metavar="POSITION",
            help="newest first, continuing before this position (paging)",
        ),
        json_flag("print JSON instead of a table"),
        help="list rollouts, newest first",
        description="List rollouts newest first (--oldest-first: in enqueue order), one line each "
        "with the latest attempt's reward, filtered by status, mode, task, run and reward.",
        epilog="example: fulmen rollouts list --run 3f9a1c2e --min-reward 1 | head",
    )
    add_command(
        commands,
        "show",
        quiet_broken_pipe(_show),
        arg("rollout_id", metavar="ROLLOUT_ID", help="the rollout to show"),
        add_store_options,
        json_flag("print JSON instead of tables"),
        help="show a rollout with its attempts, spans and LLM calls",
        description="Show one rollout: its status, input, and for each attempt a table of its "
        "spans (indented under their parent) and LLM calls in sequence order, with durations, "
        "token counts and rewards.",
    )
