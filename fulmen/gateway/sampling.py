"""Which production sessions are kept: a seeded hash of the session id against ``base_rate``.

The decision depends on nothing but the seed and the session id, so it is made once per
session, every call of a session gets the same answer, and several gateways (or a restarted
one) keep the same sessions.
"""

from __future__ import annotations

import hashlib

__all__ = ["is_sampled", "sample_point"]

_SCALE = float(1 << 64)


def sample_point(session_id: str, *, seed: int) -> float:
    """Return the session's point in ``[0, 1)``, uniform over ids, fixed by ``seed``."""
    digest = hashlib.blake2b(
        session_id.encode(), digest_size=8, key=seed.to_bytes(8, "big", signed=True)
    )
    return int.from_bytes(digest.digest(), "big") / _SCALE


def is_sampled(session_id: str, *, base_rate: float, seed: int) -> bool:
    """Whether the session is kept at ``base_rate`` (every session at 1, none at 0)."""
    return sample_point(session_id, seed=seed) < base_rate
