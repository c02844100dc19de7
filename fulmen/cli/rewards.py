"""``fulmen rewards add``: post a reward for a rollout that may have finished long ago.

The rollout is named by ``--rollout``, ``--response`` (the id of one of its LLM calls'
responses) or ``--session`` (a production session). The reward is one number (``--value``,
stored as ``reward``) or named numbers (``--named k=v ...``, with ``--primary`` naming the one
that is the rollout's reward). ``--key`` makes the post idempotent: run it again and the reward
is stored once; the same key with another value is refused. Prints the stored reward as JSON.

``--gateway URL`` posts through a gateway's ``POST /v1/rewards`` instead of the store: with
production capture, a reward for a session the gateway still holds waits with it (printed as
``{"status": "held", ...}``) and can get an unsampled session kept (``docs/production.md``).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from fulmen.cli.parsers import add_command, add_command_group, arg, one_of
from fulmen.cli.store import add_store_options, cli_settings, open_cli_store, run_async
from fulmen.errors import ConfigError

__all__ = ["register"]


def _named_value(text: str) -> tuple[str, float]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}")
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{name}: {raw!r} is not a finite number")
    return name, value


def _finite(text: str) -> float:
    return _named_value(f"reward={text}")[1]


def _add(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from fulmen.types import RewardCreate

    values = {"reward": args.value} if args.value is not None else dict(args.named)
    try:
        request = RewardCreate(
            rollout_id=args.rollout,
            response_id=args.response,
            session_id=args.session,
            values=values,
            primary=args.primary,
            key=args.key,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid reward{f' {where}' if where else ''}: {first['msg']}") from None

    async def main() -> dict[str, Any]:
        if args.gateway is not None:
            from fulmen.gateway.reward_client import post_reward
            from fulmen.gateway.sessions import HeldReward

            token = args.gateway_token or cli_settings(args).gateway_token
            answer = await post_reward(args.gateway, request, token=token)
            return (
                answer.body() if isinstance(answer, HeldReward) else answer.model_dump(mode="json")
            )
        async with open_cli_store(args) as store:
            return (await store.add_reward(request)).model_dump(mode="json")

    print(json.dumps(run_async(main), indent=2))
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen rewards`` and its subcommand ``add``."""
    commands = add_command_group(
        subparsers,
        "rewards",
        help="post a reward for a rollout after it ran",
        description="Rewards that arrive after a rollout finished (feedback, a closed ticket).",
    )
    add_command(
        commands,
        "add",
        _add,
        add_store_options,
        arg(
            "--gateway",
            metavar="URL",
            help="post through this gateway's POST /v1/rewards instead of the store (production "
            "sessions the gateway still holds)",
        ),
        arg(
            "--gateway-token",
            metavar="TOKEN",
            help="the gateway's bearer token (default: $FULMEN_GATEWAY_TOKEN, else $FULMEN_TOKEN)",
        ),
        one_of(
            arg("--rollout", metavar="ID", help="the rollout's id"),
            arg("--response", metavar="ID", help="the id of an LLM call's response"),
            arg("--session", metavar="ID", help="a production session's id"),
        ),
        one_of(
            arg("--value", type=_finite, metavar="X", help="a scalar reward"),
            arg(
                "--named",
                nargs="+",
                type=_named_value,
                metavar="NAME=X",
                help="named reward values (e.g. --named thumbs=1 resolved=0)",
            ),
        ),
        arg(
            "--primary",
            metavar="NAME",
            help="which --named value is the rollout's reward (default: 'reward', or the only one)",
        ),
        arg(
            "--key",
            metavar="IDEMPOTENCY_KEY",
            help="a key of your choice: a repeated post with it is stored once",
        ),
        help="post a reward by rollout, response or session id",
        description="Post a reward; transitions and exports use a rollout's latest reward.",
    )
