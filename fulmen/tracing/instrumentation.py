"""Optional OpenInference instrumentation of agent frameworks, on fulmen's own provider.

With an ``openinference-instrumentation-*`` package installed, framework calls (LangChain and
LangGraph nodes, OpenAI Agents SDK agents, AutoGen agents, plain ``openai`` calls) become spans
under the runner's provider, stamped with the rollout and the current ``as_agent`` name, and
carrying the response id the gateway saw, so ``agent_names_by_response_id`` can attribute each
recorded call. Without those packages nothing happens here; calls are still named by the
``x-fulmen-agent`` header (``fulmen.tracing.agent_header``), which these spans only enrich.

OpenInference instrumentors patch libraries process-wide, so the first provider to instrument a
framework keeps it until ``uninstrument``; a second runner in the same process is told so in the
log and shares nothing else.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["FRAMEWORKS", "instrument", "uninstrument"]

logger = logging.getLogger(__name__)

# framework name → (the framework's top module, OpenInference module, instrumentor class)
FRAMEWORKS: Final[dict[str, tuple[str, str, str]]] = {
    "openai": ("openai", "openinference.instrumentation.openai", "OpenAIInstrumentor"),
    "langchain": (
        "langchain_core",
        "openinference.instrumentation.langchain",
        "LangChainInstrumentor",
    ),
    "openai_agents": (
        "agents",
        "openinference.instrumentation.openai_agents",
        "OpenAIAgentsInstrumentor",
    ),
    "autogen_agentchat": (
        "autogen_agentchat",
        "openinference.instrumentation.autogen_agentchat",
        "AutogenAgentChatInstrumentor",
    ),
    "llama_index": (
        "llama_index",
        "openinference.instrumentation.llama_index",
        "LlamaIndexInstrumentor",
    ),
    "crewai": ("crewai", "openinference.instrumentation.crewai", "CrewAIInstrumentor"),
    "litellm": ("litellm", "openinference.instrumentation.litellm", "LiteLLMInstrumentor"),
}


def _instrumentor(name: str) -> Any | None:
    if name not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {name!r}; known: {sorted(FRAMEWORKS)}")
    _, module_name, class_name = FRAMEWORKS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(module, class_name)()


def instrument(provider: TracerProvider, frameworks: Sequence[str] | None = None) -> list[str]:
    """Activate the installed OpenInference instrumentors on ``provider`` (never the global one).

    Args:
        provider: the runner's provider.
        frameworks: names from ``FRAMEWORKS``. By default, every framework the process has
            already imported (the agent module is loaded first) and whose OpenInference
            package is installed: importing a framework the agent does not use costs seconds.

    Returns:
        The frameworks this call instrumented; pass them to ``uninstrument`` when done.
    """
    done: list[str] = []
    if frameworks is None:
        frameworks_to_try = [n for n, (top, _, _) in FRAMEWORKS.items() if top in sys.modules]
    else:
        frameworks_to_try = list(frameworks)
    for name in frameworks_to_try:
        instrumentor = _instrumentor(name)
        if instrumentor is None:
            if frameworks is not None:
                logger.info("OpenInference instrumentation for %s is not installed", name)
            continue
        if instrumentor.is_instrumented_by_opentelemetry:
            logger.warning("%s is already instrumented by another provider; left as is", name)
            continue
        try:
            instrumentor.instrument(tracer_provider=provider)
        except Exception:  # a broken optional integration must not stop the runner
            logger.exception("could not instrument %s", name)
            continue
        if not instrumentor.is_instrumented_by_opentelemetry:  # e.g. a version conflict
            logger.warning("OpenInference refused to instrument %s (see its log)", name)
            continue
        done.append(name)
    return done


def uninstrument(frameworks: Sequence[str]) -> None:
    """Undo ``instrument`` for ``frameworks`` (the list it returned)."""
    for name in frameworks:
        instrumentor = _instrumentor(name)
        if instrumentor is not None and instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
