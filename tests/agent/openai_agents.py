"""A sync agent on the real ``openai`` client, run in worker processes by the end-to-end test.

``openai`` is imported at module top, as agents do, so the worker process activates the
OpenInference openai instrumentation for it by default.
"""

from __future__ import annotations

from typing import Any

import openai

from fulmen.agent.api import rollout
from fulmen.tracing.emitters import as_agent


@rollout
def sync_two_agents(task: Any, llm: Any) -> float:
    with openai.OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        with as_agent("planner"):
            plan = client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": f"plan {task['x']}"}]
            )
        with as_agent("critic"):
            client.chat.completions.create(
                model=llm.model,
                messages=[{"role": "user", "content": plan.choices[0].message.content or ""}],
            )
    return float(task["x"])
