"""``fulmen dashboard``: the web page over a store (runs, rollouts, calls, prompts, models)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from fulmen.cli.parsers import add_command, arg
from fulmen.cli.store import add_store_options, run_async, store_address, store_options

if TYPE_CHECKING:
    from fulmen.dashboard.debug_api import DebugTools

__all__ = ["register"]


def _dashboard(args: argparse.Namespace) -> int:
    from fulmen.cli.store import open_cli_store
    from fulmen.dashboard.server import run_dashboard

    url, token = store_address(args)
    with_token = store_options(url, token)
    # A missing SQLite file is an error, not an empty dashboard (open_cli_store checks it).
    open_cli_store(args)
    options: dict[str, Any] = with_token or {"watchdog_interval": None}
    debug = _debug_tools(args)
    run_async(
        lambda: run_dashboard(
            url,
            store_options=options,
            host=args.host,
            port=args.port,
            token=token,
            engine_url=args.engine,
            debug=debug,
        )
    )
    return 0


def _debug_tools(args: argparse.Namespace) -> DebugTools:
    """Load ``--config`` and ``--reward`` now: a bad one stops the command before it serves."""
    from pathlib import Path

    from fulmen.dashboard.debug_api import DebugTools
    from fulmen.debugging.rescore import load_reward_function
    from fulmen.importing import put_first_on_sys_path
    from fulmen.trainer.config import load_config
    from fulmen.trainer.preflight import check_before_start

    config = load_config(args.config) if args.config else None
    python_path = [*(config.python_path if config else []), Path(".")]
    if config is not None:
        # the agent and its tasks import from here in replay and A/B
        put_first_on_sys_path(python_path)
        check_before_start(config.agent, python_path)
    reward = load_reward_function(args.reward, python_path=python_path) if args.reward else None
    return DebugTools(config=config, reward=reward, reward_spec=args.reward)


def register(subparsers: Any) -> None:
    """Add ``fulmen dashboard``."""
    add_command(
        subparsers,
        "dashboard",
        _dashboard,
        add_store_options,
        arg("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"),
        arg("--port", type=int, default=4780, help="TCP port, 0 for any free one (default: 4780)"),
        arg(
            "--engine",
            metavar="URL",
            default=None,
            help="a running engine (fulmen serve or vLLM) that the 'serve this version' action "
            "loads model versions into and that names tokens in the token view; 'auto' follows the "
            "engine of the latest resources' llm (what fulmen train links)",
        ),
        arg(
            "--config",
            metavar="CONFIG",
            default=None,
            help="the training config (agent, tasks, engine): enables the page's replay and A/B "
            "actions (fulmen train passes its own)",
        ),
        arg(
            "--reward",
            metavar="MODULE:FN",
            default=None,
            help="a reward function (as for fulmen rescore) the rollouts page can re-score with; "
            "chosen here, never by the page, and never written to the store",
        ),
        help="web page over a store: runs, rollouts, calls, tokens, prompts, model versions",
        description="Serve the dashboard over a store (any backend). The page reads the store "
        "through its API only and updates itself while runs go on. Its API requires the "
        "store's bearer token (--token / $FULMEN_STORE_TOKEN) when one is set; binding "
        "anything but loopback requires one. Stops on SIGTERM or Ctrl-C.",
        epilog="examples:\n"
        "  fulmen dashboard --store runs/toy/store.db\n"
        "  fulmen dashboard --store runs/toy/store.db --config examples/toy/config.yaml "
        "--reward my_rewards:strict\n"
        "  fulmen dashboard --store http://HOST:4747 --token $TOKEN --engine "
        "http://127.0.0.1:8000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
