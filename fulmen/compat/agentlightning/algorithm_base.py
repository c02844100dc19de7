"""0.x's ``Algorithm`` base class, ``@algo`` and the helpers custom algorithms use.

A 0.x algorithm is an object whose ``run(train_dataset, val_dataset)`` drives the store: it
publishes resources, enqueues rollouts, waits for them and reads their spans and rewards. The
trainer hands it the store (``get_store()``), the adapter and the initial resources before
calling ``run``. ``agl.Trainer`` does the same on fulmen (``fulmen.compat.agentlightning.
driver``): the store is a ``LightningStore`` facade over the run's store, and fulmen's runner
and gateway execute the rollouts the algorithm enqueues.

``APO`` and ``VERL`` are algorithms fulmen runs itself (``fulmen_section`` names the fulmen
algorithm); every other subclass, ``Baseline`` included, is driven through its ``run``.
"""

from __future__ import annotations

import functools
import inspect
import random
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from fulmen.compat.agentlightning.errors import NotSupported

__all__ = [
    "Algorithm",
    "FastAlgorithm",
    "FunctionalAlgorithm",
    "algo",
    "batch_iter_over_dataset",
    "with_store",
]

T = TypeVar("T")
A = TypeVar("A", bound="Algorithm")
P = ParamSpec("P")
R = TypeVar("R")


class Algorithm:
    """0.x's algorithm base: override ``run`` (async); the trainer wires the rest.

    The getters raise ``ValueError`` before the trainer set their value, as in 0.x.
    """

    _trainer_ref: weakref.ReferenceType[Any] | None = None
    _store: Any = None
    _adapter: Any = None
    _initial_resources: dict[str, Any] | None = None

    def fulmen_section(self) -> dict[str, Any] | None:
        """Return the fulmen ``algorithm:`` section that replaces ``run``; ``None``: run it."""
        return None

    def is_async(self) -> bool:
        """Whether ``run`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.run)

    def set_trainer(self, trainer: Any) -> None:
        """Remember the ``agl.Trainer`` running this algorithm."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """Return the trainer; ``ValueError`` before ``set_trainer``."""
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if trainer is None:
            raise ValueError("Trainer has not been set for this algorithm.")
        return trainer

    def set_store(self, store: Any) -> None:
        """Set the ``LightningStore`` the algorithm drives."""
        self._store = store

    def get_store(self) -> Any:
        """Return the store; ``ValueError`` before ``set_store``."""
        if self._store is None:
            raise ValueError("Store has not been set for this algorithm.")
        return self._store

    def set_adapter(self, adapter: Any) -> None:
        """Set the trace adapter (``agl.TraceToMessages`` reads a rollout's conversations)."""
        self._adapter = adapter

    def get_adapter(self) -> Any:
        """Return the adapter; ``ValueError`` when none was set."""
        if self._adapter is None:
            raise ValueError("Adapter has not been set for this algorithm.")
        return self._adapter

    def set_initial_resources(self, resources: dict[str, Any]) -> None:
        """Set the resources ``agl.Trainer(initial_resources=...)`` was given."""
        self._initial_resources = resources

    def get_initial_resources(self) -> dict[str, Any] | None:
        """Return the initial resources (fulmen adds ``main_llm``: the model it serves)."""
        return self._initial_resources

    def set_llm_proxy(self, llm_proxy: Any) -> None:
        """Refused unless ``None``: fulmen's gateway is the proxy."""
        if llm_proxy is not None:
            raise NotSupported(
                "Algorithm.set_llm_proxy",
                why="fulmen's gateway records every call",
                instead="the llm resource's URL",
            )

    def get_llm_proxy(self) -> None:
        """Return ``None``: there is no 0.x proxy (calls go through fulmen's gateway)."""
        return None

    def get_client(self) -> Any:
        """Refused: 0.x's deprecated client/server algorithms."""
        raise NotSupported(
            "Algorithm.get_client",
            why="0.x's legacy client/server (fit_v0) has no counterpart",
            instead="use get_store() in run()",
        )

    def run(self, train_dataset: Any = None, val_dataset: Any = None) -> Awaitable[None] | None:
        """Run the algorithm (subclasses implement it; async on fulmen)."""
        raise NotImplementedError("Subclasses must implement run().")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call ``run``."""
        return self.run(*args, **kwargs)


class FastAlgorithm(Algorithm):
    """0.x's base of quick developer algorithms (``Baseline``); driven like any other."""


class FunctionalAlgorithm(Algorithm):
    """An algorithm made of a function; ``run`` passes the arguments its signature names.

    The function may take ``store``, ``adapter``, ``llm_proxy`` (always ``None``: fulmen's
    gateway is the proxy), ``initial_resources``, ``train_dataset`` and ``val_dataset``.
    """

    def __init__(self, algorithm_func: Callable[..., Any]) -> None:
        self._algorithm_func = algorithm_func
        self._params = inspect.signature(algorithm_func).parameters
        self._is_async = inspect.iscoroutinefunction(algorithm_func)
        functools.update_wrapper(self, algorithm_func)  # type: ignore[arg-type]

    def is_async(self) -> bool:
        """Whether the function is a coroutine function."""
        return self._is_async

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function unchanged."""
        return self._algorithm_func(*args, **kwargs)

    def run(self, train_dataset: Any = None, val_dataset: Any = None) -> Any:
        """Call the function with what it asks for; ``TypeError`` for a dataset it cannot take."""
        available: dict[str, Callable[[], Any]] = {
            "store": self.get_store,
            "adapter": self.get_adapter,
            "llm_proxy": self.get_llm_proxy,
            "initial_resources": self.get_initial_resources,
        }
        kwargs = {name: get() for name, get in available.items() if name in self._params}
        for name, dataset in (("train_dataset", train_dataset), ("val_dataset", val_dataset)):
            if name in self._params:
                kwargs[name] = dataset
            elif dataset is not None:
                raise TypeError(
                    f"{name} is provided but not supported by the algorithm function: "
                    f"{self._algorithm_func}"
                )
        return self._algorithm_func(**kwargs)


def algo(func: Callable[..., Any]) -> FunctionalAlgorithm:
    """Make an algorithm of ``func`` (``@algo``), as 0.x's decorator."""
    return FunctionalAlgorithm(func)


def batch_iter_over_dataset(dataset: Any, batch_size: int) -> Iterator[Sequence[Any]]:
    """Yield batches of ``batch_size`` tasks forever, each task once per shuffled pass.

    A batch size at least the dataset's length yields the whole dataset, shuffled, each time.
    Uses the ``random`` module's state, as 0.x did.
    """
    size = len(dataset)
    if size == 0:
        raise ValueError("batch_iter_over_dataset needs a non-empty dataset")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if batch_size >= size:
        while True:
            items = [dataset[i] for i in range(size)]
            random.shuffle(items)
            yield items
    batch: list[int] = []
    while True:
        order = list(range(size))
        random.shuffle(order)
        for index in order:
            if index in batch:
                continue
            batch.append(index)
            if len(batch) == batch_size:
                yield [dataset[i] for i in batch]
                batch = []


def with_store(
    func: Callable[Concatenate[A, Any, P], Awaitable[R]],
) -> Callable[Concatenate[A, P], Awaitable[R]]:
    """Pass the algorithm's store as the first argument after ``self`` (0.x's decorator)."""

    @functools.wraps(func)
    async def wrapper(self: A, *args: P.args, **kwargs: P.kwargs) -> R:
        return await func(self, self.get_store(), *args, **kwargs)

    return wrapper
