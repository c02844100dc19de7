"""The rollout API: ``@rollout`` on a plain function, or an ``Agent`` subclass.

A rollout function receives the task and, **by parameter name**, what it asks for:

=================  ===============================================================
``task``           the rollout's input (the first parameter gets it under any name)
``llm``            an ``LLM``: rollout-specific ``base_url``, ``model``, ``api_key``,
                   ``sampling``
``prompt``         the ``PromptTemplate`` named ``prompt`` (or the only one)
``context``        the ``RolloutContext`` (ids, mode, every resource)
``resources``      a dict of every resource (LLMs as ``LLM`` objects)
``mode``           ``Mode.TRAIN``/``VAL``/``TEST``; ``rollout_id``, ``attempt_id``
any resource name  that resource (an ``LLM`` for LLM resources)
=================  ===============================================================

A parameter with a default keeps it when the rollout's resources do not hold what it names
(``prompt: PromptTemplate = MY_PROMPT`` runs with ``MY_PROMPT`` until a prompt is published).

It returns a reward (a number), a dict of named rewards, or ``None`` when it emitted its
rewards with ``emit_reward``. Sync and async functions both work.

>>> @rollout
... def solve(task, llm):
...     return 1.0 if task["x"] == 2 else 0.0
>>> solve({"x": 2}, None)  # still a plain function when called directly
1.0
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from fulmen.errors import ConfigError
from fulmen.importing import import_object
from fulmen.types import LLMResource, Mode

if TYPE_CHECKING:
    from fulmen.agent.context import RolloutContext

__all__ = [
    "Agent",
    "RolloutFunction",
    "RolloutResult",
    "RolloutTarget",
    "bind_arguments",
    "check_result",
    "load_target",
    "rollout",
]

RolloutResult = float | dict[str, float] | None


class RolloutFunction:
    """A function marked with ``@rollout``; calling it calls the function unchanged."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise ConfigError(f"@rollout needs a function, got {fn!r}")
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function unchanged."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<rollout {getattr(self.fn, '__qualname__', self.fn)!r}>"


@overload
def rollout(fn: Callable[..., Any], /) -> RolloutFunction: ...
@overload
def rollout() -> Callable[[Callable[..., Any]], RolloutFunction]: ...
def rollout(
    fn: Callable[..., Any] | None = None, /
) -> RolloutFunction | Callable[[Callable[..., Any]], RolloutFunction]:
    """Mark a sync or async function as a rollout function (``@rollout`` or ``@rollout()``)."""
    if fn is None:
        return RolloutFunction
    return RolloutFunction(fn)


class Agent:
    """Base class for agents that need setup or behave differently in training and validation.

    Override ``training_rollout`` (and optionally ``validation_rollout``, used for ``val`` and
    ``test`` rollouts; it defaults to ``training_rollout``). Both take parameters by name as a
    rollout function does and may be async. ``setup`` runs once per runner (once per worker
    process for sync agents run in processes) before the first rollout.

    >>> class Echo(Agent):
    ...     def training_rollout(self, task):
    ...         return float(task)
    >>> RolloutTarget.of(Echo()).function_for(Mode.VAL)(3)
    3.0
    """

    def setup(self) -> Any:
        """Prepare the agent (load data, build clients); may be a coroutine function."""
        return None

    def training_rollout(self, task: Any, **resources: Any) -> Any:
        """Run one training rollout; see the module docstring for the parameters."""
        raise NotImplementedError(f"{type(self).__name__} must override training_rollout")

    def validation_rollout(self, task: Any, **resources: Any) -> Any:
        """Run one validation rollout; defaults to ``training_rollout``."""
        raise NotImplementedError(f"{type(self).__name__} must override validation_rollout")


@dataclass(frozen=True)
class RolloutTarget:
    """Anything the runner can run, in one shape: a setup hook and a function per mode.

    Attributes:
        obj: what the user gave (a rollout function, an ``Agent``, a plain callable).
        spec: ``"module:attribute"`` that imports ``obj`` again in another process, if known.
    """

    obj: Any
    spec: str | None = None

    @classmethod
    def of(cls, obj: Any, spec: str | None = None) -> RolloutTarget:
        """Normalise ``obj`` (a class deriving from ``Agent`` is instantiated without args)."""
        if isinstance(obj, str):
            return load_target(obj)
        if hasattr(obj, "__fulmen_agent__"):
            # An agent of another framework's shape (fulmen.compat) says what fulmen runs;
            # the spec still names the original, which a worker process imports again.
            spec = spec if spec is not None else _spec_of(obj)
            obj = (obj() if isinstance(obj, type) else obj).__fulmen_agent__()
        if isinstance(obj, type) and issubclass(obj, Agent):
            obj = obj()
        if isinstance(obj, Agent):
            if type(obj).training_rollout is Agent.training_rollout:
                raise ConfigError(f"agent {type(obj).__name__} does not override training_rollout")
        elif not callable(obj):
            raise ConfigError(f"cannot run {obj!r}: expected a function or an Agent")
        return cls(obj, spec if spec is not None else _spec_of(obj))

    def setup(self) -> Any:
        """Call the agent's ``setup`` (its result may be awaitable); no-op for functions."""
        return self.obj.setup() if isinstance(self.obj, Agent) else None

    def function_for(self, mode: Mode) -> Callable[..., Any]:
        """Return the callable that runs a rollout of ``mode``."""
        if isinstance(self.obj, Agent):
            overrides_val = type(self.obj).validation_rollout is not Agent.validation_rollout
            if mode is not Mode.TRAIN and overrides_val:
                return self.obj.validation_rollout
            return self.obj.training_rollout
        if isinstance(self.obj, RolloutFunction):
            return self.obj.fn
        return self.obj

    def is_async(self, mode: Mode) -> bool:
        """Whether the function for ``mode`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.function_for(mode))


def _spec_of(obj: Any) -> str | None:
    """Find an import path that gives ``obj`` back (``None`` for closures, ``__main__``)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    spec = f"{module}:{qualname}"
    try:
        found = _import_attr(spec)
    except (ImportError, AttributeError):
        return None
    return spec if found is obj else None


def _import_attr(spec: str) -> Any:
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


def load_target(spec: str) -> RolloutTarget:
    """Import ``"package.module:object"`` and normalise it; ``ConfigError`` if it fails.

    The error is ``fulmen.importing.import_object``'s, its cause the import's own exception.
    """
    return RolloutTarget.of(import_object(spec, what="agent"), spec)


def _named_values(context: RolloutContext) -> dict[str, Callable[[], Any]]:
    """Parameter name → how to produce its value (lazily: an LLM is built only if asked)."""
    values: dict[str, Callable[[], Any]] = {
        "task": lambda: context.task,
        "llm": context.llm,
        "prompt": context.prompt,
        "context": lambda: context,
        "mode": lambda: context.mode,
        "rollout_id": lambda: context.rollout_id,
        "attempt_id": lambda: context.attempt_id,
        "resources": lambda: _all_resources(context),
    }
    for name, res in (context.resources.resources if context.resources else {}).items():
        if name not in values:
            values[name] = (
                functools.partial(context.llm, name)
                if isinstance(res, LLMResource)
                else functools.partial(context.prompt, name)
            )
    return values


def _all_resources(context: RolloutContext) -> dict[str, Any]:
    if context.resources is None:
        return {}
    return {
        name: context.llm(name) if isinstance(res, LLMResource) else res
        for name, res in context.resources.resources.items()
    }


def bind_arguments(
    fn: Callable[..., Any], context: RolloutContext
) -> tuple[list[Any], dict[str, Any]]:
    """Build the positional and keyword arguments to call ``fn`` with for this rollout.

    Raises ``ConfigError`` naming a required parameter that nothing provides.
    """
    producers = _named_values(context)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    has_task = any(p.name == "task" for p in params)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for index, param in enumerate(params):
        producer = producers.get(param.name)
        if producer is None and index == 0 and not has_task:
            producer = producers["task"]  # the first parameter is the task, whatever its name
        if producer is None:
            if param.default is not param.empty:
                continue
            raise ConfigError(
                f"rollout function {getattr(fn, '__qualname__', fn)!r} asks for "
                f"{param.name!r}, which is neither a known parameter ({sorted(producers)}) "
                "nor a resource"
            )
        try:
            value = producer()
        except ConfigError:
            # The resource it names is not in this rollout's version: the default stands in.
            if param.default is param.empty:
                raise
            continue
        if param.kind is param.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[param.name] = value
    return args, kwargs


def check_result(value: Any) -> RolloutResult:
    """Validate what a rollout function returned: a number, a dict of numbers, or ``None``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for key, item in value.items():
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise ConfigError(f"reward {key!r} returned by the agent is not a number: {item!r}")
            out[str(key)] = float(item)
        return out
    raise ConfigError(
        f"a rollout function must return a number, a dict of numbers or None; got {value!r}"
    )
