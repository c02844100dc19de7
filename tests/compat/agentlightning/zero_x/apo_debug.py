"""The APO debug script of 0.x v0.3.0 (``examples/apo/apo_debug.py``), its imports included.

Its first two ways of debugging build a ``LitAgentRunner`` with an ``OtelTracer`` or an
``AgentOpsTracer`` and a ``Hook``; the third, ``debug_with_trainer``, runs ``Trainer.dev`` with
the prompt to tune in ``initial_resources``. Importing this module as it is fails on those
imports (``agentlightning.runner``, ``agentlightning.tracer``), which fulmen refuses.
"""

from __future__ import annotations

from typing import Any, cast

from fulmen.compat.agentlightning.litagent import LitAgent  # noqa: F401
from fulmen.compat.agentlightning.runner import LitAgentRunner  # noqa: F401
from fulmen.compat.agentlightning.store import InMemoryLightningStore  # noqa: F401
from fulmen.compat.agentlightning.tracer import AgentOpsTracer, OtelTracer  # noqa: F401
from fulmen.compat.agentlightning.types import Dataset, Hook, PromptTemplate, Rollout  # noqa: F401

from fulmen.compat.agentlightning import Trainer, setup_logging


def debug_with_trainer(agent: Any, **kw: Any) -> Any:
    setup_logging()
    dataset = cast(Dataset[str], ["Explain why the sky appears blue.", "What's the capital?"])
    resource = PromptTemplate(
        template="You are a helpful assistant. {any_question}", engine="f-string"
    )
    trainer = Trainer(n_workers=1, initial_resources={"main_prompt": resource}, **kw)
    return trainer.dev(agent, dataset)
