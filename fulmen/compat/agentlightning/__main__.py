"""``python -m fulmen.compat.agentlightning verl-report CONFIG``: the VERL translation report.

``CONFIG`` is a JSON or YAML file holding the dict a 0.x script passed to ``agl.VERL(...)``.
The report says, key by key, what fulmen honours, translates (to which option) or refuses;
the exit status is 1 when a refusal would change what is learned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fulmen.compat.agentlightning.verl_config import translate_verl_config

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the report of the VERL config named on the command line; 1 if any key blocks."""
    import yaml

    parser = argparse.ArgumentParser(prog="python -m fulmen.compat.agentlightning")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("verl-report", help="what fulmen does with a VERL config")
    report.add_argument("config", type=Path, help="the VERL config dict as JSON or YAML")
    args = parser.parse_args(argv)
    data = yaml.safe_load(args.config.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        parser.error(f"{args.config} must hold a mapping (the dict passed to agl.VERL)")
    translation = translate_verl_config(data)  # pyright: ignore[reportUnknownArgumentType]
    print(translation.render())
    return 1 if translation.blocking() else 0


if __name__ == "__main__":
    sys.exit(main())
