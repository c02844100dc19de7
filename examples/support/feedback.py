"""The feedback job: once a ticket is closed, post its reward to the store by session id.

A help desk learns whether the bot routed a customer right only later, when the ticket is
closed by the team that could solve it (or moved to it). This job reads the closed tickets
(``tickets.jsonl``, written by ``traffic.py``) and posts, for each conversation, the reward 1.0
when the bot's first route was the team that solved it and 0.0 otherwise, by session id, with
the ticket as idempotency key (running the job twice stores nothing twice). The rollouts
``session-<id>`` had finished long before; the adapter uses this latest reward.

    python examples/support/feedback.py --out runs/support
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from fulmen.store import open_store
from fulmen.types import RewardCreate

__all__ = ["post_feedback"]


async def post_feedback(out: Path) -> dict[str, Any]:
    """Post one reward per ticket of ``out/tickets.jsonl`` to ``out/traffic.db``."""
    tickets = [json.loads(line) for line in (out / "tickets.jsonl").read_text().splitlines()]
    async with open_store(f"sqlite:///{out / 'traffic.db'}", watchdog_interval=None) as store:
        for ticket in tickets:
            solved_first_time = ticket["routed_to"] == ticket["department"]
            await store.add_reward(
                RewardCreate(
                    session_id=ticket["session_id"],
                    values={"reward": 1.0 if solved_first_time else 0.0},
                    key=f"ticket-{ticket['session_id']}",
                    metadata={"source": "ticket closed", "solved_by": ticket["department"]},
                )
            )
    rewarded = sum(t["routed_to"] == t["department"] for t in tickets)
    return {"rewards_posted": len(tickets), "rewarded_1": rewarded}


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    print(json.dumps(asyncio.run(post_feedback(parser.parse_args().out))))


if __name__ == "__main__":
    main()
