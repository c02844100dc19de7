"""``@rollout``, ``@llm_rollout``, ``@prompt_rollout``: a 0.x agent from one function.

As in 0.x, the function's first parameter is ``task``; it also takes ``llm`` (the first LLM
resource, already routed to this attempt's recording URL), ``prompt_template`` (the first
prompt-template resource) and ``rollout`` (the ``AttemptedRollout``), in any combination, and
may be sync or async. The result is a ``LitAgent`` that stays callable as the plain function.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar, overload

from fulmen.compat.agentlightning.lit_agent import LitAgent
from fulmen.compat.agentlightning.resources import LLM, MAIN_LLM, PromptTemplate, ProxyLLM

__all__ = ["FunctionalLitAgent", "llm_rollout", "prompt_rollout", "rollout"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class FunctionalLitAgent(LitAgent[T]):
    """A ``LitAgent`` that calls one function with the arguments its signature names.

    Args:
        rollout_func: ``[async] (task, [llm], [prompt_template], [rollout])``.
        strip_proxy: hand ``llm`` already routed to the attempt (default, as 0.x); ``False``
            hands a ``ProxyLLM`` whose ``get_base_url(rollout_id, attempt_id)`` routes it.
    """

    def __init__(self, rollout_func: Callable[..., Any], *, strip_proxy: bool = True) -> None:
        super().__init__()
        self._rollout_func = rollout_func
        self.strip_proxy = strip_proxy
        self._is_async = inspect.iscoroutinefunction(rollout_func)
        self._params = inspect.signature(rollout_func).parameters
        functools.update_wrapper(self, rollout_func)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function unchanged."""
        return self._rollout_func(*args, **kwargs)

    def is_async(self) -> bool:
        """Whether the function is a coroutine function."""
        return self._is_async

    def rollout(self, task: T, resources: dict[str, Any], rollout: Any) -> Any:
        """Call the sync function; ``RuntimeError`` for an async one (as 0.x)."""
        if self._is_async:
            raise RuntimeError(f"{self._rollout_func} is asynchronous; use rollout_async")
        return self._rollout_func(task, **self._arguments(resources, rollout))

    async def rollout_async(self, task: T, resources: dict[str, Any], rollout: Any) -> Any:
        """Await the async function; ``RuntimeError`` for a sync one (as 0.x)."""
        if not self._is_async:
            raise RuntimeError(f"{self._rollout_func} is synchronous; use rollout")
        return await self._rollout_func(task, **self._arguments(resources, rollout))

    def _arguments(self, resources: dict[str, Any], rollout: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if "rollout" in self._params:
            kwargs["rollout"] = rollout
        if "llm" in self._params:
            kwargs["llm"] = self._first_llm(resources, rollout)
        if "prompt_template" in self._params:
            kwargs["prompt_template"] = _first(resources, PromptTemplate, "prompt template")
        return kwargs

    def _first_llm(self, resources: dict[str, Any], rollout: Any) -> LLM:
        # ``main_llm`` beside ``llm`` is the alias the bridge adds; it is not a second LLM.
        alias = resources.get(MAIN_LLM) is resources.get("llm")
        llm = _first({k: v for k, v in resources.items() if k != MAIN_LLM or not alias}, LLM, "LLM")
        if self.strip_proxy and isinstance(llm, ProxyLLM):
            return llm.with_attempted_rollout(rollout)
        return llm


def _first(resources: dict[str, Any], kind: type, what: str) -> Any:
    found = [(name, res) for name, res in resources.items() if isinstance(res, kind)]
    if not found:
        raise ValueError(f"No {what} resource found in the provided resources.")
    if len(found) > 1:
        logger.warning("several %s resources; using the first one, %r", what, found[0][0])
    return found[0][1]


def _check(func: Callable[..., Any], needs: str) -> None:
    params = list(inspect.signature(func).parameters)
    if len(params) < 2 or params[0] != "task" or needs not in params:
        raise ValueError(
            f"{func} must take 'task' first and a parameter named {needs!r} (got {params})"
        )


@overload
def llm_rollout(func: Callable[..., Any], /) -> FunctionalLitAgent[Any]: ...
@overload
def llm_rollout(
    *, strip_proxy: bool = True
) -> Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]: ...
def llm_rollout(
    func: Callable[..., Any] | None = None, /, *, strip_proxy: bool = True
) -> FunctionalLitAgent[Any] | Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]:
    """Make an agent of ``[async] (task, llm, [rollout])``; ``@llm_rollout(strip_proxy=False)``."""

    def decorate(f: Callable[..., Any]) -> FunctionalLitAgent[Any]:
        _check(f, "llm")
        return FunctionalLitAgent(f, strip_proxy=strip_proxy)

    return decorate if func is None else decorate(func)


@overload
def prompt_rollout(func: Callable[..., Any], /) -> FunctionalLitAgent[Any]: ...
@overload
def prompt_rollout() -> Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]: ...
def prompt_rollout(
    func: Callable[..., Any] | None = None, /
) -> FunctionalLitAgent[Any] | Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]:
    """Make an agent of ``[async] (task, prompt_template, [rollout])``."""

    def decorate(f: Callable[..., Any]) -> FunctionalLitAgent[Any]:
        _check(f, "prompt_template")
        return FunctionalLitAgent(f)

    return decorate if func is None else decorate(func)


def rollout(func: Callable[..., Any]) -> FunctionalLitAgent[Any]:
    """Make an agent of any supported signature: ``task``, then ``llm`` or ``prompt_template``.

    ``NotImplementedError`` for another signature, as 0.x.
    """
    params = list(inspect.signature(func).parameters)
    takes_resource = "llm" in params or "prompt_template" in params
    if len(params) >= 2 and params[0] == "task" and takes_resource:
        return FunctionalLitAgent(func)
    raise NotImplementedError(
        f"rollout function signature {params} matches no 0.x pattern: expected "
        "(task, llm[, rollout]) or (task, prompt_template[, rollout]), sync or async"
    )
