"""The ``transitions:`` section every weight-training algorithm shares.

Agent selection, merging and credit, validated once, with the rule the adapter's own model
cannot check.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from fulmen.adapter.transitions import TransitionOptions

__all__ = ["transition_options"]


def transition_options(raw: Mapping[str, JsonValue]) -> TransitionOptions:
    """Build the adapter's ``TransitionOptions`` from an ``algorithm.transitions`` mapping.

    Raises:
        ValueError: an unknown option, or ``gamma`` with a credit strategy other than
            ``discounted`` (it would have no effect).
    """
    options = TransitionOptions.model_validate(dict(raw))
    if options.gamma is not None and options.credit != "discounted":
        raise ValueError("algorithm.transitions.gamma has effect only with credit 'discounted'")
    return options
