"""How an attempt's agent ended, read back from its records, in words a person can act on.

A command agent's run is stored as ``fulmen.command`` spans (``fulmen.agent.command.agent``):
``command_outcomes`` reads them back, and ``CommandOutcome.summary`` says how each one ended
("exited 1 before calling the model"). ``no_reward_reason`` says why an attempt that did not
fail produced no reward: its command crashed, its command gave none, or a Python agent returned
``None`` without emitting one. ``fulmen dev`` prints these per rollout; training names the first
of them when a step's rollouts gave no reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fulmen.tracing import semconv

if TYPE_CHECKING:
    from fulmen.types import Span

__all__ = ["CommandOutcome", "command_outcomes", "no_reward_reason"]

#: How many of its last stderr lines a crashed command is shown with.
STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class CommandOutcome:
    """How one command of an attempt ended (a ``fulmen.command`` span).

    Attributes:
        role: ``command`` (the agent) or ``verifier``.
        status: ``exited``, or why the sandbox stopped it (``timeout``, ``memory_limit``, ...).
        exit_code: its exit status (``None`` when the sandbox killed it).
        duration_s: how long it ran.
        stderr: what it printed to stderr (the middle cut out past the sandbox's kept size).
    """

    role: str
    status: str
    exit_code: int | None
    duration_s: float
    stderr: str

    @property
    def crashed(self) -> bool:
        """Whether it did not end by itself with status 0."""
        return self.status != "exited" or self.exit_code != 0

    def summary(self, *, calls: int) -> str:
        """Say how it ended, e.g. ``command exited 1 before calling the model (0.04 s)``.

        ``calls`` is how many model calls the attempt made; a command that crashed without
        one is said to have ended before calling the model (the verifier calls none).
        """
        how = (
            f"exited {self.exit_code}"
            if self.status == "exited"
            else f"was stopped: {self.status.replace('_', ' ')}"
        )
        when = ""
        if self.role == "command" and self.crashed:
            when = " before calling the model" if calls == 0 else f" after {calls} model calls"
        return f"{self.role} {how}{when} ({self.duration_s:.2f} s)"

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> list[str]:
        """Return the last ``lines`` lines of its stderr, trailing blank lines dropped."""
        return self.stderr.rstrip().splitlines()[-lines:] if self.stderr.strip() else []

    def last_words(self) -> str:
        """Return its last non-blank stderr line (a traceback's exception), or ``""``."""
        tail = self.stderr_tail(1)
        return tail[0].strip() if tail else ""


def command_outcomes(spans: Sequence[Span]) -> list[CommandOutcome]:
    """Return how each command of an attempt ended, in the order they ran."""
    found: list[CommandOutcome] = []
    for span in sorted(spans, key=lambda s: s.sequence):
        if span.name != semconv.SPAN_COMMAND:
            continue
        attributes = span.attributes
        code = attributes.get(semconv.COMMAND_EXIT_CODE)
        duration = attributes.get(semconv.COMMAND_DURATION_S)
        found.append(
            CommandOutcome(
                role=str(attributes.get(semconv.COMMAND_ROLE, "command")),
                status=str(attributes.get(semconv.COMMAND_STATUS, "exited")),
                exit_code=int(code) if isinstance(code, int | float) else None,
                duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
                stderr=str(attributes.get(semconv.COMMAND_STDERR, "")),
            )
        )
    return found


def no_reward_reason(spans: Sequence[Span], *, calls: int) -> str:
    """Say in one line why an attempt that did not fail gave no reward.

    A command that crashed is named with its status and the last line of its stderr; a command
    that exited 0 gave none itself (no verifier, no reward function, nothing posted); an attempt
    without a command is a Python agent that returned ``None`` and emitted no reward.
    """
    commands = [c for c in command_outcomes(spans) if c.role == "command"]
    if not commands:
        return (
            "the agent returned None and emitted no reward (return a number, or call "
            "fulmen.emit_reward)"
        )
    command = commands[-1]
    if command.crashed:
        said = command.last_words()
        return f"the {command.summary(calls=calls)}" + (
            f"; its stderr ended with: {said}" if said else "; it printed nothing to stderr"
        )
    return (
        f"the command exited 0 after {calls} model calls and gave no reward (no verifier or "
        "reward_function, and nothing posted to $FULMEN_REWARD_URL)"
    )
