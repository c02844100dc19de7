"""The feedback job: once a ticket is closed, post its reward (and the reviewer's re-route).

A help desk learns whether the bot routed a customer right only later, when the ticket is
closed by the team that could solve it (or moved to it). This job reads the closed tickets
(``tickets.jsonl``, written by ``traffic.py``) and posts, for each conversation, the reward 1.0
when the bot's first route was the team that solved it and 0.0 otherwise, by session id, with
the ticket as idempotency key (running the job twice stores nothing twice). The rollouts
``session-<id>`` had finished long before; the adapter uses this latest reward.

With ``--corrections`` the job also records what the help desk did with each misrouted
ticket: a reviewer moved it to the team that solved it. That correction is stored next to the
captured session, as the production session ``<id>-reviewed`` whose one call is the captured
call (the same request, read back from the store) with the reviewer's ``ROUTE: <team>`` as
the reply, rewarded 1.0. It is text only (no token ids: the model never sampled it), so
offline SFT tokenizes it once with the student's template (``sft/retokenized``).

    python examples/support/feedback.py --out runs/support [--corrections]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from fulmen.store import Store, open_store
from fulmen.types import LLMCallCreate, RewardCreate
from fulmen.types.rewards import session_rollout_id
from fulmen.types.sessions import SessionCreate

__all__ = ["post_feedback", "record_correction"]


def _corrected_response(response: dict[str, Any], team: str) -> dict[str, Any]:
    """The captured response with the reviewer's route as choice 0's text."""
    corrected = copy.deepcopy(response)
    choice = corrected["choices"][0]
    choice["message"] = {"role": "assistant", "content": f"ROUTE: {team}"}
    choice.pop("logprobs", None)  # the model never sampled this reply
    return corrected


async def record_correction(store: Store, ticket: dict[str, Any]) -> bool:
    """Store the reviewer's re-route of a misrouted ticket as the session ``<id>-reviewed``.

    The call is rebuilt from the captured one (its request exactly as the bot sent it through
    the gateway); only the reply changes. Idempotent: the attempt and call ids derive from the
    ticket. ``False`` when the captured session has no successful call to correct.
    """
    session_id = ticket["session_id"]
    calls = (await store.query_llm_calls(session_rollout_id(session_id))).items
    captured = next((c for c in calls if c.error is None and c.response), None)
    if captured is None or captured.response is None:
        return False
    reviewed = f"{session_id}-reviewed"
    claim = await store.record_session(
        SessionCreate(
            session_id=reviewed,
            attempt_id=f"review-{session_id}",
            worker_id="help-desk",
            input={"session_id": reviewed, "corrects": session_id},
            metadata={"kept_by": "review", "corrects": session_id},
        )
    )
    await store.add_llm_calls(
        [
            LLMCallCreate(
                call_id=f"review-{captured.call_id}",
                rollout_id=claim.rollout.rollout_id,
                attempt_id=claim.attempt.attempt_id,
                endpoint=captured.endpoint,
                request=captured.request,
                response=_corrected_response(captured.response, ticket["department"]),
                model=captured.model,
                started_at=captured.started_at,
                agent_name=captured.agent_name,
            )
        ]
    )
    await store.add_reward(
        RewardCreate(
            session_id=reviewed,
            values={"reward": 1.0},
            key=f"review-{session_id}",
            metadata={"source": "reviewer re-route", "corrects": session_id},
        )
    )
    return True


async def post_feedback(out: Path, *, corrections: bool = False) -> dict[str, Any]:
    """Post one reward per ticket of ``out/tickets.jsonl`` to ``out/traffic.db``.

    With ``corrections``, every misrouted ticket's re-route is stored as well
    (:func:`record_correction`).
    """
    tickets = [json.loads(line) for line in (out / "tickets.jsonl").read_text().splitlines()]
    corrected = 0
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
            if corrections and not solved_first_time:
                corrected += await record_correction(store, ticket)
    rewarded = sum(t["routed_to"] == t["department"] for t in tickets)
    return {"rewards_posted": len(tickets), "rewarded_1": rewarded, "corrections": corrected}


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/support"))
    parser.add_argument(
        "--corrections", action="store_true", help="also store each misrouted ticket's re-route"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(post_feedback(args.out, corrections=args.corrections))))


if __name__ == "__main__":
    main()
