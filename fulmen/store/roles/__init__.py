"""The roles of the store's face: what each consumer of the store depends on.

``RolloutQueue`` (rollouts, attempts, workers, resources, waiting), ``RecordLog`` (spans, LLM
calls, rewards), ``RunLog`` (runs, metrics, model versions) and ``ReleaseBook`` (releases);
``fulmen.store.base.Store`` is all four. Each role writes its public methods once, with their
argument checks and the store's locking policy (``fulmen.store.roles.core``); a backend
implements the ``_``-prefixed work methods.
"""

from fulmen.store.roles.core import Capabilities, ReconcileReport
from fulmen.store.roles.queue import RolloutQueue
from fulmen.store.roles.records import RecordLog
from fulmen.store.roles.releases import ReleaseBook
from fulmen.store.roles.runs import RunLog

__all__ = [
    "Capabilities",
    "ReconcileReport",
    "RecordLog",
    "ReleaseBook",
    "RolloutQueue",
    "RunLog",
]
