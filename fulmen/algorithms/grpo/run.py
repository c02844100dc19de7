"""``run_grpo``: ``algorithm: grpo``'s run function, which picks the loop the config asks for.

The loops are subclasses of ``GRPOLoop`` (``loop``); choosing among them here, not in the base
class, keeps every loop module free of imports of the others.
"""

from __future__ import annotations

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig

__all__ = ["run_grpo"]


async def run_grpo(
    config: GRPOAlgorithmConfig, context: AlgorithmContext
) -> list[dict[str, float]]:
    """Run ``config.steps`` GRPO steps, resuming the stage's progress.

    Returns the metrics of each step run now. With ``config.source`` the steps learn
    off-policy from that store's recorded rollouts (``offline_loop``); with ``config.async_``
    the rollouts run while the trainer updates (``async_loop``); with ``config.adapters`` each
    role trains its own adapter (``role_loop``); else the synchronous loop (``loop``).
    """
    if config.source is not None:
        from fulmen.algorithms.grpo.offline_loop import OfflineGRPOLoop

        return await OfflineGRPOLoop(config, context).run()
    if config.async_ is not None:
        from fulmen.algorithms.grpo.async_loop import AsyncGRPOLoop

        return await AsyncGRPOLoop(config, context).run()
    if config.adapters is not None:
        from fulmen.algorithms.grpo.role_loop import RoleGRPOLoop

        return await RoleGRPOLoop(config, context).run()
    from fulmen.algorithms.grpo.loop import GRPOLoop

    return await GRPOLoop(config, context).run()
