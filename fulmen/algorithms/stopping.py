"""Stopping an update at its next safe point when the run is asked to stop (SIGTERM, SIGINT).

An update runs on a worker thread (``asyncio.to_thread``), and cancelling the task that awaits
it does not stop the thread: the process then waited for the whole update (over three minutes
for a long sequence) before it could exit. ``fulmen train`` opens a :func:`stop_scope` around
the run and sets its event on the first SIGTERM or SIGINT. asyncio copies the context into
every task and into every ``to_thread`` worker, so the updater's thread sees the same event
without anything passing it along.

The policy checks it at safe points: before each decoder layer runs (:func:`watch_layers`
hooks every layer of the model's layer lists, so the recompute of checkpointed activations in
the backward checks too), before each chunk of the LM head, and between micro-batches.
:func:`check_stop` raises :class:`UpdateStopped` there; the update drops the gradients it had
accumulated and takes no optimizer step, so the weights stay those of the last finished step,
whose checkpoint the next run resumes from. Without a scope (a library call, a test) nothing
is ever stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from torch import nn

from fulmen.errors import FulmenError

__all__ = ["UpdateStopped", "check_stop", "stop_scope", "watch_layers"]

_STOP: ContextVar[threading.Event | None] = ContextVar("fulmen_stop", default=None)


class UpdateStopped(FulmenError):
    """The run was asked to stop; the update stopped at a safe point, its step not taken."""

    code = "update_stopped"
    http_status = 503


@contextmanager
def stop_scope(event: threading.Event) -> Iterator[threading.Event]:
    """Make ``event`` the stop signal of the code run in this context (and tasks it starts)."""
    token = _STOP.set(event)
    try:
        yield event
    finally:
        _STOP.reset(token)


def check_stop() -> None:
    """Raise :class:`UpdateStopped` if this context's stop event is set (a safe point)."""
    event = _STOP.get()
    if event is not None and event.is_set():
        raise UpdateStopped("the run was asked to stop; the update stopped at a safe point")


def _before_layer(module: nn.Module, args: Any) -> None:
    del module, args
    check_stop()


def watch_layers(model: nn.Module) -> int:
    """Add a stop check before every layer of ``model``'s layer lists; return the count.

    The decoder layers are the members of an ``nn.ModuleList``; a model already watched is
    left as it is (idempotent).
    """
    if getattr(model, "_fulmen_stop_watched", False):
        return 0
    hooked = 0
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            for layer in module:
                layer.register_forward_pre_hook(_before_layer)
                hooked += 1
    model._fulmen_stop_watched = True  # type: ignore[assignment]  # a plain marker attribute
    return hooked
