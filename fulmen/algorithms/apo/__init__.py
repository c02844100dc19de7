"""APO: automatic prompt optimization with textual gradients and beam or Pareto selection.

``config.py`` (``algorithm: apo`` settings), ``client.py`` (the critic's and editor's recorded
model calls), ``gradients.py`` (what they are shown and asked), ``selection.py`` (beam and
Pareto rules, pure), ``state.py`` (resume bookkeeping) and ``algorithm.py`` (``run_apo``).
"""

from __future__ import annotations

from fulmen.algorithms.apo.config import APOConfig, OptimizerEndpoint

__all__ = ["APOConfig", "OptimizerEndpoint"]
