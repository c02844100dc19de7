"""Compatibility layers that let code written for another framework run on fulmen.

``fulmen.compat.agentlightning`` takes the public names of Agent Lightning 0.x (versions before
0.4), so a 0.x agent or training script moves to fulmen by changing one import line
(``docs/migrate-from-agent-lightning.md``).
"""

from __future__ import annotations

__all__: list[str] = []
