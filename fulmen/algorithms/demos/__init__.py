"""``algorithm: demos``: few-shot demonstrations bootstrapped from the agent's own runs.

Successful training rollouts become demonstrations (the task's input fields and the model's
own recorded turns); a random search over subsets and orders, scored by validation rollouts,
picks the set that is published as the new prompt version (``docs/demos.md``). Importing this
package loads the config only; the search runs from ``fulmen.algorithms.demos.optimizer``.
"""

from __future__ import annotations

from fulmen.algorithms.demos.config import DemosConfig

__all__ = ["DemosConfig"]
