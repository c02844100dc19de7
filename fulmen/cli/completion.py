"""``fulmen completion bash|zsh``: print a shell completion script for ``fulmen``.

The script is generated from the same argument parser the command uses (with ``shtab``), so it
completes every subcommand, option and choice; file arguments complete file names. Install it
once, e.g. ``fulmen completion bash > ~/.local/share/bash-completion/completions/fulmen`` or
``fulmen completion zsh > "${fpath[1]}/_fulmen"``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from fulmen.cli.parsers import add_command, arg

__all__ = ["completion_script", "register"]

_SHELLS = ("bash", "zsh")
# Arguments that name files; everything else completes from its choices or not at all.
_FILE_ARGS = {"config", "file", "tasks", "resources", "out", "db"}


def _mark_files(parser: argparse.ArgumentParser, files: Mapping[str, Any]) -> None:
    for action in parser._actions:
        if action.dest in _FILE_ARGS:
            action.complete = files  # type: ignore[attr-defined]  # read by shtab
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _mark_files(child, files)


def completion_script(shell: str) -> str:
    """Return the completion script of the whole ``fulmen`` command for ``shell``."""
    import shtab

    from fulmen.cli.main import build_parser

    parser = build_parser()
    _mark_files(parser, shtab.FILE)
    return shtab.complete(parser, shell=shell)


def _print(args: argparse.Namespace) -> int:
    print(completion_script(args.shell))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``completion`` subcommand."""
    add_command(
        subparsers,
        "completion",
        _print,
        arg("shell", choices=_SHELLS, help="the shell to complete in"),
        help="print a shell completion script (bash, zsh)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        epilog="examples:\n"
        "  fulmen completion bash > ~/.local/share/bash-completion/completions/fulmen\n"
        '  fulmen completion zsh > "${fpath[1]}/_fulmen"\n'
        "  source <(fulmen completion bash)   # this shell only",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
