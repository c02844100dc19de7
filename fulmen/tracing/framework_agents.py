"""AutoGen and CrewAI agent names for the ``x-fulmen-agent`` header: a thin hook on their agents.

Neither framework keeps the running agent where an HTTP request can read it. AutoGen AgentChat
names its agent only on an OpenTelemetry span opened through the global tracer provider, a
no-op span without attributes unless the application installs one; CrewAI hands its agent down
the call chain as an argument (``from_agent``) and to its event bus, whose handlers run on other
threads. So, once per process and only for a framework the agent has already imported, fulmen
wraps the agent class's public entry points so that a contextvar holds the agent's own name
while they run:

- AutoGen AgentChat: ``on_messages`` and ``on_messages_stream`` of ``BaseChatAgent`` and its
  subclasses (``run``, ``run_stream`` and a team's turn all go through them); the name is the
  agent's ``name``.
- CrewAI: ``execute_task``, ``aexecute_task``, ``kickoff``, ``kickoff_async`` and ``akickoff``
  of ``Agent`` and its subclasses; the name is the agent's ``role``.

A method a release no longer has is simply not wrapped, and an agent whose name attribute is
missing or not a string is named ``None``: a change in the framework loses the name, never
raises and never gives a wrong one. The wrappers set the contextvar only while the framework's
own code runs (for a stream: during each step, not while the consumer holds an item), so code
after an agent's turn is not named after it. Subclasses defined after the hook is installed
inherit it unless they override those methods.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "FRAMEWORK_AGENT_HOOKS",
    "AgentClassHook",
    "framework_agent_name",
    "install_framework_agent_hooks",
    "uninstall_framework_agent_hooks",
]

_RUNNING_AGENT: ContextVar[str | None] = ContextVar("fulmen_framework_agent", default=None)
# Marks a wrapped method (so installing twice wraps once) and keeps the original.
_MARK: Final = "__fulmen_framework_agent__"


@dataclass(frozen=True)
class AgentClassHook:
    """Where a framework's agent class lives and how its agents' turns are hooked.

    ``methods`` are the class's methods that run an agent's turn, ``name_attribute`` the
    agent's attribute that holds its name. ``module`` is only looked up in ``sys.modules``:
    fulmen never imports a framework itself.
    """

    module: str
    class_name: str
    methods: tuple[str, ...]
    name_attribute: str


FRAMEWORK_AGENT_HOOKS: Final[tuple[AgentClassHook, ...]] = (
    AgentClassHook(
        module="autogen_agentchat.agents",
        class_name="BaseChatAgent",
        methods=("on_messages", "on_messages_stream"),
        name_attribute="name",
    ),
    AgentClassHook(
        module="crewai.agent.core",
        class_name="Agent",
        methods=("execute_task", "aexecute_task", "kickoff", "kickoff_async", "akickoff"),
        name_attribute="role",
    ),
)


def framework_agent_name() -> str | None:
    """Return the AutoGen or CrewAI agent whose turn is running in this context, or ``None``."""
    return _RUNNING_AGENT.get()


def _name_of(agent: object, attribute: str) -> str | None:
    name = getattr(agent, attribute, None)
    return name if isinstance(name, str) and name else None


def _wrap(method: Callable[..., Any], attribute: str) -> Callable[..., Any]:
    wrapped: Callable[..., Any]
    if inspect.isasyncgenfunction(method):

        async def stream(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            inner = method(self, *args, **kwargs)
            name = _name_of(self, attribute)
            try:
                while True:
                    # Set and reset within one step: a consumer that stops early never
                    # leaves the name behind in its own context.
                    token = _RUNNING_AGENT.set(name)
                    try:
                        item = await anext(inner)
                    except StopAsyncIteration:
                        return
                    finally:
                        _RUNNING_AGENT.reset(token)
                    yield item
            finally:
                await inner.aclose()

        wrapped = stream
    elif inspect.iscoroutinefunction(method):

        async def coroutine(self: Any, *args: Any, **kwargs: Any) -> Any:
            token = _RUNNING_AGENT.set(_name_of(self, attribute))
            try:
                return await method(self, *args, **kwargs)
            finally:
                _RUNNING_AGENT.reset(token)

        wrapped = coroutine
    else:

        def function(self: Any, *args: Any, **kwargs: Any) -> Any:
            token = _RUNNING_AGENT.set(_name_of(self, attribute))
            try:
                return method(self, *args, **kwargs)
            finally:
                _RUNNING_AGENT.reset(token)

        wrapped = function
    functools.update_wrapper(wrapped, method)
    setattr(wrapped, _MARK, True)
    return wrapped


def _class_tree(root: type) -> Iterator[type]:
    seen: set[type] = set()
    pending = [root]
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        yield cls
        pending.extend(cls.__subclasses__())


def _root_class(hook: AgentClassHook) -> type | None:
    module = sys.modules.get(hook.module)
    root = getattr(module, hook.class_name, None) if module is not None else None
    return root if isinstance(root, type) else None


def _own_methods(root: type, names: tuple[str, ...]) -> Iterator[tuple[type, str, Any]]:
    """Each class of ``root``'s tree with what it defines itself (``None`` if not) of ``names``."""
    for cls in _class_tree(root):
        for name in names:
            yield cls, name, cls.__dict__.get(name)


def install_framework_agent_hooks(
    hooks: tuple[AgentClassHook, ...] = FRAMEWORK_AGENT_HOOKS,
) -> list[str]:
    """Wrap the agent methods of every hooked framework already imported; return their modules.

    Each class of the hierarchy gets its own definitions of ``hook.methods`` wrapped (abstract
    ones and inherited ones are left alone, so no method is wrapped twice); idempotent.
    """
    installed: list[str] = []
    for hook in hooks:
        root = _root_class(hook)
        if root is None:
            continue
        for cls, name, method in _own_methods(root, hook.methods):
            if not inspect.isfunction(method) or getattr(method, _MARK, False):
                continue
            if not getattr(method, "__isabstractmethod__", False):
                setattr(cls, name, _wrap(method, hook.name_attribute))
        installed.append(hook.module)
    return installed


def uninstall_framework_agent_hooks(
    hooks: tuple[AgentClassHook, ...] = FRAMEWORK_AGENT_HOOKS,
) -> None:
    """Put back the original methods wherever ``install_framework_agent_hooks`` wrapped them."""
    for hook in hooks:
        root = _root_class(hook)
        if root is None:
            continue
        for cls, name, method in _own_methods(root, hook.methods):
            if getattr(method, _MARK, False):
                setattr(cls, name, method.__wrapped__)
