"""The APO room selector of 0.x v0.3.0 (``examples/apo/room_selector.py`` and
``room_selector_apo.py``).

``room_selector`` is the example's agent: a ``@rollout`` function taking ``task`` and
``prompt_template`` that calls a hosted model with ``OpenAI()`` and a tool listing the rooms,
graded against the expected room (the example asked a judge model; here the grade is exact
match). ``room_selector_llm`` is the same agent after the guide's change for fulmen: the
client is built on the ``llm`` resource, so its calls go through the recording gateway.
``main`` is ``room_selector_apo.py``'s: APO with a client, ``n_runners=8``, the baseline
prompt in ``initial_resources``, the ``TraceToMessages`` adapter, and the tasks split in half
for training and validation.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict, cast

from fulmen.compat.agentlightning.adapter import TraceToMessages
from fulmen.compat.agentlightning.algorithm.apo import APO
from fulmen.compat.agentlightning.litagent import rollout
from fulmen.compat.agentlightning.types import LLM, Dataset, PromptTemplate
from openai import AsyncOpenAI, OpenAI

from fulmen.compat.agentlightning import Trainer, setup_logging

ROOMS = [
    {"id": "Birch", "capacity": 4, "booked": ["09:00"]},
    {"id": "Maple", "capacity": 12, "booked": []},
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_rooms_and_availability",
            "description": "Return meeting rooms with capacity and booked time slots.",
            "parameters": {
                "type": "object",
                "properties": {"time": {"type": "string"}},
                "required": ["time"],
            },
        },
    }
]


class RoomSelectionTask(TypedDict):
    id: str
    task_input: dict[str, Any]
    expected_choice: str


def load_room_tasks() -> list[RoomSelectionTask]:
    out: list[RoomSelectionTask] = []
    for i, (time, attendees) in enumerate(
        [("09:00", 3), ("10:00", 8), ("11:00", 2), ("09:00", 10)]
    ):
        free = [r for r in ROOMS if time not in r["booked"] and r["capacity"] >= attendees]
        out.append(
            RoomSelectionTask(
                id=f"room-{i}",
                task_input={"time": time, "attendees": attendees},
                expected_choice=min(free, key=lambda r: r["capacity"])["id"] if free else "none",
            )
        )
    return out


def prompt_template_baseline() -> PromptTemplate:
    return PromptTemplate(
        template="Find a room at {time} for {attendees} attendees. Answer with its name.",
        engine="f-string",
    )


def grade(final_message: str | None, expected_choice: str) -> float:
    return float(expected_choice.lower() in (final_message or "").lower())


def _select(client: OpenAI, model: str, task: RoomSelectionTask, prompt: PromptTemplate) -> float:
    messages: list[Any] = [{"role": "user", "content": prompt.format(**task["task_input"])}]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=8
    )
    messages.append({"role": "assistant", "content": first.choices[0].message.content or ""})
    messages.append({"role": "user", "content": json.dumps(ROOMS)})
    final = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    return grade(final.choices[0].message.content, task["expected_choice"])


@rollout
def room_selector(task: RoomSelectionTask, prompt_template: PromptTemplate) -> float:
    with OpenAI() as client:  # the example's hosted model (closed here, for tests)
        return _select(client, "gpt-4.1-nano", task, prompt_template)


@rollout
def room_selector_llm(task: RoomSelectionTask, prompt_template: PromptTemplate, llm: LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused")
    try:
        return _select(client, llm.model, task, prompt_template)
    finally:
        client.close()


def load_train_val_dataset() -> tuple[Dataset[RoomSelectionTask], Dataset[RoomSelectionTask]]:
    dataset_full = load_room_tasks()
    train_split = len(dataset_full) // 2
    dataset_train = [dataset_full[i] for i in range(train_split)]
    dataset_val = [dataset_full[i] for i in range(train_split, len(dataset_full))]
    return cast(Dataset[RoomSelectionTask], dataset_train), cast(
        Dataset[RoomSelectionTask], dataset_val
    )


def main(agent: Any = room_selector, client: Any = "hosted", **kw: Any) -> Any:
    setup_logging()
    openai_client = AsyncOpenAI() if client == "hosted" else client
    algo = APO[RoomSelectionTask](
        openai_client,
        val_batch_size=10,
        gradient_batch_size=2,
        beam_width=1,
        branch_factor=1,
        beam_rounds=1,
        _poml_trace=True,
    )
    trainer = Trainer(
        algorithm=algo,
        n_runners=8,
        initial_resources={"prompt_template": prompt_template_baseline()},
        adapter=TraceToMessages(),
        **kw,
    )
    dataset_train, dataset_val = load_train_val_dataset()
    return trainer.fit(agent=agent, train_dataset=dataset_train, val_dataset=dataset_val)
