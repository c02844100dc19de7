"""``fulmen store``: serve a store over HTTP, print its statistics or OpenAPI spec, prune it.

Also home of the options every store-reading command shares (``--store``, ``--token``) and of
``run_async``, which runs a command's coroutine on uvloop when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from fulmen.cli.parsers import add_command, add_command_group, arg, json_flag
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.settings import Settings
    from fulmen.store import Store

__all__ = [
    "STORE_TOKEN_OPTION",
    "add_store_options",
    "cli_settings",
    "open_cli_store",
    "parse_duration",
    "register",
    "run_async",
    "run_in_store",
    "store_address",
    "store_options",
]

_T = TypeVar("_T")
DEFAULT_STORE_URL = "sqlite:///fulmen.db"


def run_async(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``main()`` to completion on a new event loop (uvloop when installed)."""
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def run_in_store(
    args: argparse.Namespace, work: Callable[[Store], Awaitable[_T]], *, create: bool = False
) -> _T:
    """Open the command's store (``open_cli_store``), await ``work(store)`` in it, close it."""

    async def main() -> _T:
        async with open_cli_store(args, create=create) as store:
            return await work(store)

    return run_async(main)


#: ``--token``: what every store-opening command takes, also those with a ``--store`` of their own.
STORE_TOKEN_OPTION = arg(
    "--token",
    default=None,
    help="bearer token of a protected http:// store (default: $FULMEN_STORE_TOKEN)",
)


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--store`` and ``--token`` to a command that opens a store.

    Both default to the settings (``$FULMEN_STORE_URL``, ``$FULMEN_STORE_TOKEN``); read them
    with ``store_address(args)``, never from the namespace directly.
    """
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="store to open: http://host:port (a running `fulmen store serve`), "
        f"sqlite:///path.db or postgresql://... (default: $FULMEN_STORE_URL, else "
        f"{DEFAULT_STORE_URL})",
    )
    STORE_TOKEN_OPTION(parser)


def cli_settings(args: argparse.Namespace) -> Settings:
    """Return the settings ``fulmen.cli.main`` read once for this command."""
    from fulmen.settings import Settings

    settings = getattr(args, "settings", None)
    return settings if isinstance(settings, Settings) else Settings.from_env()


def store_address(args: argparse.Namespace) -> tuple[str, str | None]:
    """Return the store URL and token of a command: its flags, else the settings."""
    settings = cli_settings(args)
    url = args.store or settings.store_url or DEFAULT_STORE_URL
    return url, args.token or settings.store_token


def store_options(url: str, token: str | None) -> dict[str, Any]:
    """Return ``open_store`` options that pass ``token`` to an ``http(s)://`` store only."""
    from fulmen.store.urls import is_service_url

    if token and is_service_url(url):
        return {"token": token}
    return {}


def open_cli_store(
    args: argparse.Namespace, *, create: bool = False
) -> AbstractAsyncContextManager[Store]:
    """Open the store named by ``--store`` for a short command, without a watchdog of its own.

    Unless ``create`` is set (commands that write, like ``rollouts enqueue``), a SQLite store
    whose file does not exist is a ``ConfigError``: a mistyped ``--store`` must not read as an
    empty store, nor leave a new empty file behind.
    """
    from fulmen.store import open_store

    # httpx logs every request at INFO; a command's output should not drown in it.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    url, token = store_address(args)
    if not create:
        _require_existing(url, given=bool(args.store or cli_settings(args).store_url))
    options = store_options(url, token)
    if options:
        return open_store(url, **options)
    # A read-only command must not end other people's attempts: no watchdog here.
    return open_store(url, watchdog_interval=None)


def _require_existing(url: str, *, given: bool) -> None:
    """Raise ``ConfigError`` when ``url`` is a SQLite store whose file does not exist."""
    from fulmen.store.urls import sqlite_file

    database = sqlite_file(url)
    if database is None:
        return
    if not database.is_file():
        origin = "" if given else " (the default; no --store or $FULMEN_STORE_URL given)"
        raise ConfigError(
            f"no store at {url}{origin}: {database.resolve()} does not exist; "
            "pass "
            "--store with an existing store (sqlite:///PATH.db, http://HOST:PORT, "
            "postgresql://...) or set $FULMEN_STORE_URL"
        )


def _serve(args: argparse.Namespace) -> int:
    from fulmen.store.service import run_service

    run_async(
        lambda: run_service(
            args.db or cli_settings(args).store_db or DEFAULT_STORE_URL,
            host=args.host,
            port=args.port,
            token=args.token or cli_settings(args).store_token,
            max_body_bytes=args.max_body_mb * 1024 * 1024,
            watchdog_interval=args.watchdog_interval,
            access_log=args.access_log,
        )
    )
    return 0


def _stats(args: argparse.Namespace) -> int:
    stats = run_in_store(args, lambda store: store.stats())
    if args.json:
        print(stats.model_dump_json(indent=2))
        return 0
    print(f"store {store_address(args)[0]}")
    for title, counts in (("rollouts", stats.rollouts), ("attempts", stats.attempts)):
        total = sum(counts.values())
        print(f"\n{title.upper():<12}{total:>10}")
        for status, count in counts.items():
            print(f"  {status.value:<10}{count:>10}")
    print()
    for label, value in (
        ("spans", stats.spans),
        ("llm calls", stats.llm_calls),
        ("resources", stats.resources_versions),
        ("workers", stats.workers),
    ):
        print(f"{label.upper():<12}{value:>10}")
    return 0


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """Parse ``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` into seconds."""
    number, unit = text[:-1], text[-1:].lower()
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h, 90m, 45s or 2w; got {text!r}"
        ) from None
    if not 0 <= seconds <= 1000 * 365 * 86400:
        raise argparse.ArgumentTypeError(f"duration {text!r} is out of range")
    return seconds


def _prune(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from fulmen.store.clock import utc_now
    from fulmen.types import PruneRequest

    request = PruneRequest(
        ended_before=utc_now() - timedelta(seconds=args.older_than),
        keep_rewarded=args.keep_rewarded,
        modes=args.mode,
        dry_run=args.dry_run,
    )

    report = run_in_store(args, lambda store: store.prune(request))
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    print(f"{verb} finished rollouts that ended before {request.ended_before:%Y-%m-%d %H:%M:%S}Z:")
    for label in ("rollouts", "attempts", "spans", "llm_calls", "rewards"):
        print(f"  {label.replace('_', ' '):<10}{getattr(report, label):>10}")
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from fulmen.store.openapi import openapi_json

    del args
    sys.stdout.write(openapi_json())
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen store`` and its subcommands."""
    commands = add_command_group(
        subparsers,
        "store",
        help="serve a store over HTTP, show its statistics, prune old rollouts",
        description="The store holds rollouts, attempts, spans, LLM calls and resources.",
    )
    add_command(
        commands,
        "serve",
        _serve,
        arg(
            "--db",
            default=None,
            metavar="PATH_OR_URL",
            help="backend to serve: a SQLite path or sqlite:///path.db, postgresql://..., or "
            f"memory:// (default: $FULMEN_STORE_DB, else {DEFAULT_STORE_URL})",
        ),
        arg("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"),
        arg("--port", type=int, default=4747, help="TCP port, 0 for any free one (default: 4747)"),
        arg(
            "--token",
            default=None,
            help="bearer token clients must send (default: $FULMEN_STORE_TOKEN); required "
            "unless --host is a loopback address",
        ),
        arg(
            "--max-body-mb", type=int, default=32, help="largest request body in MiB (default: 32)"
        ),
        arg(
            "--watchdog-interval",
            type=float,
            default=1.0,
            metavar="SECONDS",
            help="seconds between watchdog passes (default: 1.0)",
        ),
        arg("--access-log", action="store_true", help="log every request"),
        help="serve a store over HTTP for runners and algorithms on other machines",
        description="Serve a store backend over HTTP (OpenAPI: `fulmen store openapi`). "
        "Clients connect with open_store('http://HOST:PORT'). The server runs the watchdog "
        "that ends timed-out and lost attempts. Binding anything but loopback requires a "
        "token. Stops cleanly on SIGTERM or Ctrl-C.",
        epilog="examples:\n"
        "  fulmen store serve --db runs.db\n"
        "  FULMEN_STORE_TOKEN=$(openssl rand -hex 16) \\\n"
        "    fulmen store serve --db postgresql://user@db/fulmen --host 0.0.0.0 --port 4747\n"
        "  then, elsewhere: FULMEN_STORE_URL=http://HOST:4747 fulmen store stats",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_command(
        commands,
        "stats",
        _stats,
        add_store_options,
        json_flag("print JSON instead of a table"),
        help="count rollouts, attempts, spans, LLM calls, resources and workers",
        description="Print counts over the whole store, by status.",
    )
    add_command(
        commands,
        "openapi",
        _openapi,
        help="print the OpenAPI 3.1 spec of the store service",
        description="Print the OpenAPI spec generated from the code (docs/openapi.json holds "
        "the committed copy).",
    )
    add_command(
        commands,
        "prune",
        _prune,
        add_store_options,
        arg(
            "--older-than",
            type=parse_duration,
            required=True,
            metavar="AGE",
            help="how long ago a rollout must have ended: 30d, 12h, 90m, 45s, 2w",
        ),
        arg(
            "--keep-rewarded",
            action="store_true",
            help="keep rollouts with a reward (posted later, or emitted during the run)",
        ),
        arg(
            "--mode",
            action="append",
            choices=["train", "val", "test", "production"],
            help="only rollouts of this mode (repeat for several; default: every mode)",
        ),
        arg("--dry-run", action="store_true", help="count, delete nothing"),
        json_flag("print the counts as JSON"),
        help="delete old finished rollouts with their attempts, spans, calls and rewards",
        description="Delete rollouts that finished (succeeded, failed, cancelled) longer ago "
        "than --older-than, with everything recorded for them. Queued and running rollouts "
        "are never touched. Prints the counts deleted (with --dry-run: that would be).",
    )
