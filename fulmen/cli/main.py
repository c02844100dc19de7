"""The root ``fulmen`` command: builds the parser from the subcommand modules and runs one.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code). Modules are
imported when the parser is built, and they import their heavy dependencies only inside
``func``, so ``fulmen --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from fulmen import __version__
from fulmen.cli.output import run_command
from fulmen.errors import FulmenError
from fulmen.extras import install_hint
from fulmen.settings import Settings

__all__ = ["build_parser", "main"]

# Subcommand modules under fulmen.cli, in the order --help lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "train",
    "plan",
    "store",
    "rollouts",
    "resources",
    "prompts",
    "rewards",
    "runs",
    "models",
    "release",
    "export",
    "replay",
    "rescore",
    "ab",
    "dashboard",
    "runner",
    "serve",
    "gateway",
    "deploy",
    "doctor",
    "completion",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="fulmen", description="Train any LLM agent from its own runs."
    )
    parser.add_argument("--version", action="version", version=f"fulmen {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"fulmen.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # The one read of the FULMEN_* environment; commands take their defaults from it.
    args.settings = Settings.from_env()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Per-request lines of the HTTP clients drown the progress output.
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return run_command(func, args)  # a closed output pipe (`| head`) ends it quietly
    except FulmenError as exc:
        print(f"fulmen: error: {exc.message}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        hint = install_hint(exc)
        if hint is None:
            raise
        print(f"fulmen: error: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
