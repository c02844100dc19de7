"""The ``x-fulmen-agent`` header: each LLM call names its agent, with no extra package.

While a rollout runs, every request that an ``httpx`` or ``httpx2`` client (openai 3 uses the
latter) sends to the attempt's gateway URL carries the name of the agent making it: the
innermost ``as_agent`` name, or else the framework's own name for the running step (a LangGraph
node, read from LangChain's runnable config; an OpenAI Agents SDK agent, read from the SDK's
span scope; an AutoGen AgentChat agent's ``name`` or a CrewAI agent's ``role``, set by the thin
hook of ``fulmen.tracing.framework_agents``). The gateway stores it on the call record, so
agent selection works without OpenInference, which stays an optional enrichment.

``install_agent_header`` patches ``Client.send`` and ``AsyncClient.send`` of those libraries,
and the agent classes of AutoGen and CrewAI when the agent has imported them, once per process
(a second call changes nothing). The hook reads only contextvars: concurrent rollouts never
see each other's names, a request outside any rollout or to another host is
left alone, and a header the agent set itself wins. Its limit: a call made from a thread or task
that did not inherit the rollout's context (a thread pool without ``contextvars.copy_context``)
is not named; ``fulmen.transitions.attribution`` warns when calls cannot be attributed.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote

from fulmen.tracing.context import current_agent_name, current_trace
from fulmen.tracing.framework_agents import (
    framework_agent_name,
    install_framework_agent_hooks,
    uninstall_framework_agent_hooks,
)
from fulmen.types.records import AGENT_NAME_HEADER

__all__ = [
    "FRAMEWORK_AGENT_NAMES",
    "agent_name_for",
    "install_agent_header",
    "langgraph_node_name",
    "openai_agents_agent_name",
    "uninstall_agent_header",
]

# HTTP client libraries whose clients get the hook, when installed.
_CLIENT_MODULES: Final = ("httpx", "httpx2")
# Marks a patched ``send`` (so installing twice wraps once) and keeps the original.
_MARK: Final = "__fulmen_agent_header__"


def langgraph_node_name() -> str | None:
    """Return the LangGraph node running in this context, read from LangChain's config.

    LangChain keeps the running runnable's config in a contextvar; LangGraph puts the node's
    name in its metadata (``langgraph_node``), and a chat model called inside the node runs
    under it. ``None`` when LangChain is not loaded or no node runs.
    """
    module = sys.modules.get("langchain_core.runnables.config")
    if module is None:
        return None
    config: Any = module.var_child_runnable_config.get()
    metadata = config.get("metadata") if isinstance(config, dict) else None
    node = metadata.get("langgraph_node") if isinstance(metadata, dict) else None
    return node if isinstance(node, str) and node else None


def openai_agents_agent_name() -> str | None:
    """Return the OpenAI Agents SDK agent running in this context, from the SDK's span scope.

    The SDK opens an agent span (``AgentSpanData.name``) around each agent's turn and a model
    span inside it, with tracing on or off (off, its spans are no-ops that still keep their
    data). Each span remembers the span it replaced as current, so the walk goes from the model
    call's span up to the nearest agent span. That link is the SDK's private
    ``_prev_span_token``; when a release changes it, this returns ``None`` (``as_agent`` still
    works).
    """
    scope = sys.modules.get("agents.tracing.scope")
    if scope is None:
        return None
    span: Any = scope.Scope.get_current_span()
    for _ in range(64):  # a chain of nested spans, never a cycle; bounded all the same
        if span is None:
            return None
        data = getattr(span, "span_data", None)
        if getattr(data, "type", None) == "agent":
            name = getattr(data, "name", None)
            return name if isinstance(name, str) and name else None
        token = getattr(span, "_prev_span_token", None)
        previous = getattr(token, "old_value", None)
        span = None if previous is contextvars.Token.MISSING else previous
    return None


# Framework name readers, tried in order when no ``as_agent`` name is set.
FRAMEWORK_AGENT_NAMES: Final[tuple[Callable[[], str | None], ...]] = (
    langgraph_node_name,
    openai_agents_agent_name,
    framework_agent_name,
)


def agent_name_for(path: str) -> str | None:
    """Return the agent name to stamp on a request for URL ``path``, or ``None``.

    Only requests to the current attempt's gateway path (``/rollout/{r}/attempt/{a}/``) are
    named; ``as_agent`` wins over framework names.
    """
    trace = current_trace()
    if trace is None or f"/rollout/{trace.rollout_id}/attempt/{trace.attempt_id}/" not in path:
        return None
    name = current_agent_name()
    if name:
        return name
    for read in FRAMEWORK_AGENT_NAMES:
        name = read()
        if name:
            return name
    return None


def _stamp(request: Any) -> None:
    headers = request.headers
    if AGENT_NAME_HEADER in headers:
        return
    name = agent_name_for(request.url.path)
    if name is not None:
        # Header values are ASCII; names may not be.
        headers[AGENT_NAME_HEADER] = quote(name, safe="")


def _hooked_send(original: Callable[..., Any], *, is_async: bool) -> Callable[..., Any]:
    if is_async:

        async def send_async(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            _stamp(request)
            return await original(self, request, *args, **kwargs)

        hooked: Callable[..., Any] = send_async
    else:

        def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            _stamp(request)
            return original(self, request, *args, **kwargs)

        hooked = send
    functools.update_wrapper(hooked, original)
    setattr(hooked, _MARK, True)
    return hooked


def install_agent_header() -> list[str]:
    """Install the hook on ``httpx``/``httpx2`` clients; return the modules it now covers.

    Also hooks the agent classes of AutoGen AgentChat and CrewAI if they are imported by now
    (the runner installs this after loading the agent, so a framework imported at the top of
    the agent's module is covered). Idempotent and process-wide by nature (the clients are the
    libraries' classes); the hooks do nothing outside a rollout, so they may stay installed.
    """
    hooked: list[str] = []
    for name in _CLIENT_MODULES:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        for cls_name, is_async in (("Client", False), ("AsyncClient", True)):
            cls = getattr(module, cls_name)
            if not getattr(cls.send, _MARK, False):
                cls.send = _hooked_send(cls.send, is_async=is_async)
        hooked.append(name)
    install_framework_agent_hooks()
    return hooked


def uninstall_agent_header() -> None:
    """Remove the hook from every client class and framework agent class that has it."""
    uninstall_framework_agent_hooks()
    for name in _CLIENT_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        for cls_name in ("Client", "AsyncClient"):
            cls = getattr(module, cls_name)
            if getattr(cls.send, _MARK, False):
                cls.send = cls.send.__wrapped__
