"""The ``transitions:`` section every weight-training algorithm shares.

Agent selection, merging and credit, validated once, with the rule the adapter's own model
cannot check.
"""

from __future__ import annotations

from fulmen.adapter.transitions import TransitionOptions

__all__ = ["check_transitions"]


def check_transitions(options: TransitionOptions) -> None:
    """Check an ``algorithm.transitions`` section beyond what its model checks.

    Raises:
        ValueError: ``gamma`` with a credit strategy other than ``discounted`` (it would have
            no effect).
    """
    if options.gamma is not None and options.credit != "discounted":
        raise ValueError("algorithm.transitions.gamma has effect only with credit 'discounted'")
