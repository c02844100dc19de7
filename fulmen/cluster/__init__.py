"""Running the fleet beyond one machine: the store service, engine replicas and runners on Ray.

``ClusterConfig`` is the ``cluster:`` section of a training config; ``fulmen.cluster.services``
places a run's services as Ray actors, ``fulmen.cluster.replicas`` hands new weights to every
engine replica, and ``fulmen.cluster.runners`` is ``fulmen runner --ray``. Ray is imported only
when a fleet starts (``pip install 'fulmen[ray]'``). See ``docs/cluster.md``.
"""

from __future__ import annotations

from fulmen.cluster.config import ClusterConfig

__all__ = ["ClusterConfig"]
