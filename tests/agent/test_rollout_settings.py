"""A training run's runners get the same settings wherever they run.

In the trainer's process (``runner_options``) and as a ``fulmen runner`` process on Ray or in
a ``fulmen deploy`` layout (``runner_flags``): the flags, parsed by the real ``fulmen runner``
parser, give the options back.
"""

from __future__ import annotations

import argparse

from fulmen.agent.rollouts import RolloutSettings
from fulmen.cli import runner as runner_cli


def test_runner_flags_parse_back_to_the_in_process_options() -> None:
    settings = RolloutSettings(concurrency=3, sync_isolation="process")
    parser = argparse.ArgumentParser()
    runner_cli.register(parser.add_subparsers())
    args = parser.parse_args(["runner", "--agent", "pkg:agent", *settings.runner_flags()])
    parsed = {name: getattr(args, name) for name in settings.runner_options()}
    assert parsed == settings.runner_options()
    assert parsed["heartbeat_interval"] * 3 < settings.heartbeat_timeout_s
