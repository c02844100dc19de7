"""``apo_debug.py``'s ``debug_with_trainer`` alone, with the imports it uses (the guide's
answer to the refused runner and tracer imports: debug with ``Trainer.dev``)."""

from __future__ import annotations

from typing import Any, cast

from fulmen.compat.agentlightning.types import Dataset, PromptTemplate

from fulmen.compat.agentlightning import Trainer, setup_logging


def debug_with_trainer(agent: Any, **kw: Any) -> Any:
    setup_logging()
    dataset = cast(Dataset[str], ["Explain why the sky appears blue.", "What's the capital?"])
    resource = PromptTemplate(
        template="You are a helpful assistant. {any_question}", engine="f-string"
    )
    trainer = Trainer(n_workers=1, initial_resources={"main_prompt": resource}, **kw)
    return trainer.dev(agent, dataset)
