from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fulmen.store import Store, open_store
from fulmen.types import LLMResource, PromptTemplate, ResourcesCreate

FAST = {"heartbeat_interval": 0.1, "poll_interval": 0.02, "span_interval": 0.02}


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with open_store("memory://", watchdog_interval=0.05) as s:
        await s.add_resources(
            ResourcesCreate(
                resources={
                    "llm": LLMResource(base_url="http://engine/v1", model="policy"),
                    "prompt": PromptTemplate(template="{x}"),
                }
            )
        )
        yield s
