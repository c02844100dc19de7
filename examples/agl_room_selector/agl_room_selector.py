"""The APO tutorial's room selector, as an Agent Lightning 0.x agent run by fulmen.

Written in 0.x style: the only fulmen line is the import (``agentlightning`` in 0.x). The agent
asks the model to pick a meeting room for a booking request, lets it call a tool that lists
the rooms and their bookings, and scores the final answer against the expected room. Its
prompt template is a resource APO rewrites.

0.x's tutorial called a hosted model with ``OpenAI()`` and graded with a judge model; this
version calls the ``llm`` resource (so every call is recorded and APO's critic can read it) and
grades by exact match, so it runs offline with the ``tiny`` model.
"""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI

import fulmen.compat.agentlightning as agl

ROOMS: list[dict[str, Any]] = [
    {"id": "Birch", "seats": 4, "kit": ["tv"], "step_free": True, "booked": ["09:00", "14:00"]},
    {"id": "Cedar", "seats": 8, "kit": ["projector"], "step_free": False, "booked": ["10:00"]},
    {"id": "Maple", "seats": 12, "kit": ["projector", "phone"], "step_free": True, "booked": []},
    {"id": "Alder", "seats": 6, "kit": ["tv", "phone"], "step_free": True, "booked": ["11:00"]},
]

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "list_rooms",
            "description": "Rooms with seats, equipment, step-free access and whether free.",
            "parameters": {
                "type": "object",
                "properties": {"time": {"type": "string", "description": "HH:MM"}},
                "required": ["time"],
            },
        },
    }
]

BASELINE_PROMPT = agl.PromptTemplate(
    template="Book a room at {time} for {people} people needing {needs}. "
    "Step-free access needed: {step_free}. Answer with the room name.",
    engine="f-string",
)


def prompt_template_baseline() -> agl.PromptTemplate:
    """The starting prompt (0.x scripts passed it in ``initial_resources``)."""
    return BASELINE_PROMPT


def list_rooms(time: str) -> list[dict[str, Any]]:
    """Every room, with whether it is free at ``time``."""
    return [{**room, "free": time not in room["booked"]} for room in ROOMS]


def best_room(request: dict[str, Any]) -> str:
    """The smallest free room that fits the request (the expected answer)."""
    fits = [
        room
        for room in list_rooms(request["time"])
        if room["free"]
        and room["seats"] >= request["people"]
        and all(item in room["kit"] for item in request["needs"])
        and (room["step_free"] or not request["step_free"])
    ]
    return min(fits, key=lambda room: room["seats"])["id"] if fits else "none"


def room_tasks() -> list[dict[str, Any]]:
    """Booking requests with their expected room, for training and scoring."""
    tasks = []
    for i, (time, people, needs, step_free) in enumerate(
        [
            ("09:00", 3, ["tv"], True),
            ("10:00", 7, ["projector"], False),
            ("11:00", 5, ["phone"], True),
            ("14:00", 2, [], False),
            ("10:00", 10, ["phone"], True),
            ("11:00", 4, ["tv"], False),
            ("09:00", 6, ["projector"], False),
            ("14:00", 5, ["tv", "phone"], True),
        ]
    ):
        request = {"time": time, "people": people, "needs": needs, "step_free": step_free}
        tasks.append({"id": f"room{i}", "task_input": request, "expected": best_room(request)})
    return tasks


def grade(answer: str, expected: str) -> float:
    """1.0 when the answer names the expected room and no other."""
    named = {room["id"] for room in ROOMS if room["id"].lower() in answer.lower()}
    return 1.0 if named == {expected} else 0.0


@agl.rollout
def room_selector(task: dict[str, Any], prompt_template: agl.PromptTemplate, llm: agl.LLM) -> float:
    """Pick a room with the model and one tool; the reward is the exact-match grade."""
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none")
    request = task["task_input"]
    needs = ", ".join(request["needs"]) or "nothing"
    messages: list[Any] = [
        {"role": "system", "content": "You book meeting rooms."},
        {"role": "user", "content": prompt_template.format(**{**request, "needs": needs})},
    ]
    try:
        reply = client.chat.completions.create(
            model=llm.model, messages=messages, tools=TOOLS, max_tokens=32
        )
        message = reply.choices[0].message
        if message.tool_calls:
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                args = json.loads(call.function.arguments or "{}")
                rooms = list_rooms(str(args.get("time", request["time"])))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(rooms)}
                )
            reply = client.chat.completions.create(
                model=llm.model, messages=messages, max_tokens=32
            )
            message = reply.choices[0].message
    finally:
        client.close()
    return grade(message.content or "", task["expected"])
