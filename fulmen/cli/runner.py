r"""``fulmen runner``: claim rollouts from a store and run an agent on them.

::

    fulmen runner --store http://127.0.0.1:4747 --agent my_pkg.agent:solve \
        --concurrency 8 --gateway http://127.0.0.1:8100

SIGTERM or Ctrl-C stops claiming, lets running rollouts finish for ``--shutdown-grace``
seconds and releases the rest to the queue. On exit it prints one JSON line of counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from fulmen.types import Mode

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``runner`` subcommand."""
    from fulmen.agent.config import RunnerConfig
    from fulmen.cli.store import add_store_options

    fields = RunnerConfig.model_fields

    def default(name: str) -> Any:
        return fields[name].default

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "runner",
        help="claim rollouts from a store and run an agent on them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_options(parser)
    parser.add_argument("--agent", required=True, help="the agent as module:object")
    parser.add_argument(
        "--concurrency", type=int, default=default("concurrency"), help="rollouts run at once"
    )
    parser.add_argument("--gateway", help="gateway base URL the llm resource points at")
    parser.add_argument(
        "--gateway-api-key",
        help="key agents send to the gateway (default: $FULMEN_GATEWAY_TOKEN, else $FULMEN_TOKEN)",
    )
    parser.add_argument("--worker-id", help="id in the store (default: host-pid-random)")
    parser.add_argument(
        "--mode", action="append", choices=[m.value for m in Mode], help="claim only these modes"
    )
    _add_tuning_options(parser, default)
    parser.set_defaults(func=_run)


def _add_tuning_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--sync-isolation",
        choices=["process", "thread"],
        default=default("sync_isolation"),
        help="where sync agents run: process (killable on timeout) or thread",
    )
    parser.add_argument(
        "--async-isolation",
        choices=["thread", "loop"],
        default=default("async_isolation"),
        help="where async agents run: thread (own event loop; a blocking or uncooperative agent "
        "is abandoned at its timeout) or loop (the runner's loop)",
    )
    parser.add_argument(
        "--store-retry-s",
        type=float,
        default=default("store_retry_s"),
        metavar="SECONDS",
        help="keep retrying a store that is down or answers 5xx this long, then exit "
        "(default: retry as long as the runner runs, logging once a minute)",
    )
    parser.add_argument(
        "--store-retry-max-delay",
        type=float,
        default=default("store_retry_max_delay"),
        metavar="SECONDS",
        help="longest pause between those retries (default: %(default)s)",
    )
    parser.add_argument(
        "--span-buffer-max",
        type=int,
        default=default("span_buffer_max"),
        help="spans held in memory while the store is away; more are spilled to a file in "
        "$FULMEN_SPILL_DIR and replayed when it is back (default: %(default)s)",
    )
    parser.add_argument(
        "--heartbeat-interval", type=float, default=default("heartbeat_interval"), help="seconds"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=default("poll_interval"),
        help="seconds between claims while the queue is empty",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=default("shutdown_grace_s"),
        help="seconds running rollouts may finish after SIGTERM before they are released",
    )
    parser.add_argument(
        "--instrument",
        action="append",
        metavar="FRAMEWORK",
        help="OpenInference instrumentation to activate (repeatable; default: those of the "
        "frameworks the agent module imports)",
    )
    parser.add_argument(
        "--no-instrument", action="store_true", help="activate no OpenInference instrumentation"
    )
    parser.add_argument("--max-rollouts", type=int, help="exit after claiming this many")
    parser.add_argument(
        "--until-idle", action="store_true", help="exit when the queue is empty and all finished"
    )


def _run(args: argparse.Namespace) -> int:
    # Like ``python -m``: agents in the current directory are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from fulmen.cli.store import run_async

    return run_async(lambda: _main(args))


async def _main(args: argparse.Namespace) -> int:
    from fulmen.agent.config import RunnerConfig
    from fulmen.agent.runner import Runner
    from fulmen.cli.store import cli_settings, store_address, store_options
    from fulmen.store import open_store
    from fulmen.tracing.backoff import Backoff, retry_call

    settings = cli_settings(args)
    options: dict[str, Any] = {
        "concurrency": args.concurrency,
        "gateway_url": args.gateway,
        "gateway_api_key": args.gateway_api_key or settings.gateway_token,
        "modes": [Mode(m) for m in args.mode] if args.mode else None,
        "sync_isolation": args.sync_isolation,
        "async_isolation": args.async_isolation,
        "store_retry_s": args.store_retry_s,
        "store_retry_max_delay": args.store_retry_max_delay,
        "span_buffer_max": args.span_buffer_max,
        "heartbeat_interval": args.heartbeat_interval,
        "poll_interval": args.poll_interval,
        "shutdown_grace_s": args.shutdown_grace,
        "frameworks": [] if args.no_instrument else args.instrument,
        "spill_dir": settings.spill_dir,
    }
    if args.worker_id:
        options["worker_id"] = args.worker_id
    config = RunnerConfig(**options)
    url, token = store_address(args)
    # A store that is down or failing when the runner starts is waited for, like one that
    # fails later; a wrong token or URL (4xx, config) fails at once.
    backoff = Backoff(maximum=config.store_retry_max_delay, deadline=config.store_retry_s)
    store = await retry_call(
        lambda: open_store(url, **store_options(url, token)),
        backoff=backoff,
        what=f"connect to the store at {url}",
    )
    try:
        runner = Runner(store, args.agent, config)
        runner.install_signal_handlers()
        stats = await runner.run(max_rollouts=args.max_rollouts, until_idle=args.until_idle)
    finally:
        await store.aclose()
    print(json.dumps({"worker_id": runner.worker_id, **asdict(stats)}), flush=True)
    return 0
