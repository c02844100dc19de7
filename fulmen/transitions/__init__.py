"""Transitions: attempts' call records and spans → transitions, credit, and exports.

Nothing here imports torch; the algorithms turn transitions into tensors.
"""

from __future__ import annotations

from fulmen.transitions.credit import (
    CREDIT_STRATEGIES,
    CallCredit,
    CreditFn,
    CreditInput,
    resolve_credit,
)
from fulmen.transitions.trajectory import (
    AttemptRecords,
    TransitionOptions,
    build_trajectory,
    load_attempt,
    load_trajectory,
)
from fulmen.types.transitions import Trajectory, Transition, TransitionDiagnostics

__all__ = [
    "CREDIT_STRATEGIES",
    "TransitionDiagnostics",
    "AttemptRecords",
    "CallCredit",
    "CreditFn",
    "CreditInput",
    "Trajectory",
    "Transition",
    "TransitionOptions",
    "build_trajectory",
    "load_attempt",
    "load_trajectory",
    "resolve_credit",
]
