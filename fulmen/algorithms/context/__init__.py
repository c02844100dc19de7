"""``AlgorithmContext``: what the trainer offers an algorithm's run function, as Protocols.

An algorithm (``grpo``, ``sft``, ``dpo``, ``ppo``, ``apo``, ``demos``) is a config model plus
one coroutine, ``run(config, context) -> list[dict[str, float]]``. The context is the only way
it reaches the running services, and it is five small capability objects, each the Protocol of
its own module here:

* ``context.run`` (``RunFacts``): the stage's directory, the base model, the seed, the success
  threshold, the services' addresses, the environment as the run read it, and a check that the
  services still run;
* ``context.tasks`` (``Tasks``): the training and validation tasks, their ids and the seeded
  draw of each step;
* ``context.rollouts`` (``Rollouts``): publish resources (the current policy endpoint plus any
  prompt templates), run tasks through the normal store -> runner -> gateway path and read back
  their rewards, records and transitions, or read another store's;
* ``context.policy`` (``PolicyServer``): what the engine serves (an adapter, one per role, full
  weights) and serving a new one;
* ``context.progress`` (``Progress``): the stage's saved step and checkpoint, saving them so a
  killed run resumes where it stopped, validating and logging metrics.

The trainer implements them (``fulmen.trainer.context``); algorithms import only these
Protocols, so they never touch the store, engine or gateway directly.
"""

from __future__ import annotations

from typing import Protocol

from fulmen.algorithms.context.policy import PolicyServer
from fulmen.algorithms.context.progress import Progress
from fulmen.algorithms.context.rollouts import Rollouts
from fulmen.algorithms.context.run import RunFacts
from fulmen.algorithms.context.tasks import Tasks

__all__ = ["AlgorithmContext", "PolicyServer", "Progress", "Rollouts", "RunFacts", "Tasks"]


class AlgorithmContext(Protocol):
    """The services of one stage of a training run (see the module docstring).

    Steps passed to ``progress`` and ``policy`` count from 0 within the stage; the trainer
    numbers them in the run's metrics stream (stages follow each other).
    """

    @property
    def run(self) -> RunFacts:
        """The facts of the run: directory, model, seed, threshold, services."""
        ...

    @property
    def tasks(self) -> Tasks:
        """The tasks and the seeded draw of each step."""
        ...

    @property
    def rollouts(self) -> Rollouts:
        """Publishing resources, running tasks and reading what the rollouts recorded."""
        ...

    @property
    def policy(self) -> PolicyServer:
        """What the engine serves, and serving a new policy."""
        ...

    @property
    def progress(self) -> Progress:
        """The stage's saved progress, saving it, validating and logging."""
        ...
