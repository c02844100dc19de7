"""Canary releases above the gateway: the arms' figures, the promotion gate, their report.

The gateway routes sessions between a release's arms (``fulmen.gateway.release``); this
package reads what came of those sessions from the store (``outcomes``), compares the arms
(``figures``), and decides: ``gate`` promotes or rolls back from the figures, window by
window, each decision an event of the release. See ``docs/releases.md``.
"""

from __future__ import annotations

from fulmen.release.figures import ArmFigures, ReleaseFigures, release_figures
from fulmen.release.gate import Gate, Verdict, judge
from fulmen.release.outcomes import ReleaseOutcomes

__all__ = [
    "ArmFigures",
    "Gate",
    "ReleaseFigures",
    "ReleaseOutcomes",
    "Verdict",
    "judge",
    "release_figures",
]
