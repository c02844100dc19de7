"""The parser shapes every command module's ``register(subparsers)`` shares, written once.

``add_command`` adds a command: its handler, its arguments in the order ``--help`` lists them,
its help and description. ``add_command_group`` adds a command with subcommands, each then
added to it with ``add_command``. An argument is ``arg(...)`` (one ``add_argument`` call),
``one_of(...)`` (a required mutually exclusive group) or any function that adds arguments to a
parser, such as ``add_store_options`` and the shared options below (``json_flag``, ...).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "Arg",
    "Argument",
    "add_command",
    "add_command_group",
    "arg",
    "config_overrides",
    "json_flag",
    "one_of",
    "python_path_option",
]

#: Something that adds its arguments to a parser: ``arg(...)``, ``add_store_options``, ...
Argument = Callable[[argparse.ArgumentParser], object]


class Arg:
    """One ``add_argument`` call, kept as data so that ``one_of`` can make it on a group."""

    # A plain class, not a dataclass: building one costs a millisecond of every `fulmen` start.
    def __init__(self, flags: tuple[str, ...], options: dict[str, Any]) -> None:
        self.flags = flags
        self.options = options

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        """Add the argument to ``parser``."""
        parser.add_argument(*self.flags, **self.options)


def arg(*flags: str, **options: Any) -> Arg:
    """Return the argument ``parser.add_argument(*flags, **options)`` adds."""
    return Arg(flags, options)


def one_of(*choices: Arg) -> Argument:
    """Return a required mutually exclusive group: the command takes exactly one of ``choices``."""

    def add(parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        for choice in choices:
            group.add_argument(*choice.flags, **choice.options)

    return add


def json_flag(help: str) -> Arg:
    """Return ``--json``: the command prints its records as JSON instead of text."""
    return arg("--json", action="store_true", help=help)


def config_overrides(help: str) -> Arg:
    """Return ``--set KEY=VALUE`` (repeatable): overrides of the training config's values."""
    return arg("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def python_path_option(help: str) -> Arg:
    """Return ``--python-path DIR`` (repeatable): where to import the user's code from."""
    return arg("--python-path", action="append", type=Path, default=[], metavar="DIR", help=help)


def add_command(
    subparsers: Subcommands,
    name: str,
    func: Callable[[argparse.Namespace], int],
    *arguments: Argument,
    help: str,
    description: str | None,
    **parser_options: Any,
) -> argparse.ArgumentParser:
    """Add the command ``name`` that runs ``func(args)``, with ``arguments`` in their order.

    ``parser_options`` go to ``add_parser`` (``epilog``, ``formatter_class``). A command whose
    output is piped on (a listing) passes its handler wrapped in ``quiet_broken_pipe``.
    """
    parser = subparsers.add_parser(name, help=help, description=description, **parser_options)
    for argument in arguments:
        argument(parser)
    parser.set_defaults(func=func)
    return parser


def add_command_group(
    subparsers: Subcommands, name: str, *, help: str, description: str | None
) -> Subcommands:
    """Add the command ``name`` that takes a SUBCOMMAND; return the subparsers to add them to.

    The chosen subcommand's name lands in ``args.<name>_command``.
    """
    parser = subparsers.add_parser(name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND", required=True)
