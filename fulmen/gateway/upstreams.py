"""Upstream engines and the choice of one per call: sticky per rollout, least-loaded otherwise.

A rollout's calls go to the same engine while it is healthy (its KV prefix cache stays warm and
one rollout sees one policy version). The order is rendezvous hashing of ``(upstream, rollout)``:
adding or removing an engine moves only the rollouts that hashed to it. Untracked calls go to the
engine with the fewest calls in flight. An engine that refused a connection is tried last for a
while, so failover does not keep knocking on a dead door.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fulmen.errors import ConfigError

__all__ = ["Upstream", "UpstreamPool"]


class Upstream(BaseModel):
    """One OpenAI-compatible engine.

    Attributes:
        base_url: the OpenAI base URL (``http://host:8000/v1``); a URL with no path gets ``/v1``.
        api_key: sent upstream as a bearer token (hosted APIs); ``None`` forwards the agent's
            own ``Authorization`` unless the gateway has a token of its own.
        is_token_level: the engine returns token ids and logprobs when asked (vLLM, fulmen's
            engine). ``False`` for hosted APIs, which reject or ignore those fields.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)
    api_key: str | None = None
    is_token_level: bool = True

    @field_validator("base_url")
    @classmethod
    def _normalise(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream URL must be http(s)://host[:port][/path], got {value!r}")
        path = parts.path.rstrip("/")
        return f"{parts.scheme}://{parts.netloc}{path or '/v1'}"


class UpstreamPool:
    """The engines a gateway forwards to, with in-flight counts and recent connection failures.

    Args:
        upstreams: at least one engine; base URLs must be distinct.
        unhealthy_s: how long an engine that refused a connection is ranked last.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        upstreams: Sequence[Upstream],
        *,
        unhealthy_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not upstreams:
            raise ConfigError("the gateway needs at least one upstream")
        urls = [u.base_url for u in upstreams]
        if len(set(urls)) != len(urls):
            raise ConfigError(f"upstream URLs must be distinct, got {urls}")
        self._upstreams = tuple(upstreams)
        self._unhealthy_s = unhealthy_s
        self._clock = clock
        self._in_flight: dict[str, int] = dict.fromkeys(urls, 0)
        self._down_until: dict[str, float] = {}
        self._text_only: set[str] = set()

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """The engines, in the order given."""
        return self._upstreams

    def ranked(self, rollout_id: str | None) -> list[Upstream]:
        """Engines in the order to try them for a call of ``rollout_id`` (``None``: untracked)."""
        if len(self._upstreams) == 1:
            return list(self._upstreams)
        if rollout_id is None:
            order = sorted(self._upstreams, key=lambda u: self._in_flight[u.base_url])
        else:
            order = sorted(self._upstreams, key=lambda u: _affinity(u.base_url, rollout_id))
        now = self._clock()
        # A stable sort keeps the affinity order among healthy engines and among unhealthy ones.
        return sorted(order, key=lambda u: self._down_until.get(u.base_url, 0.0) > now)

    def acquire(self, upstream: Upstream) -> None:
        """Count a call in flight to ``upstream``."""
        self._in_flight[upstream.base_url] += 1

    def release(self, upstream: Upstream) -> None:
        """Count a call to ``upstream`` as finished."""
        self._in_flight[upstream.base_url] -= 1

    def in_flight(self, upstream: Upstream) -> int:
        """Count the calls currently in flight to ``upstream``."""
        return self._in_flight[upstream.base_url]

    def mark_down(self, upstream: Upstream) -> None:
        """Rank ``upstream`` last for ``unhealthy_s`` seconds after it refused a connection."""
        self._down_until[upstream.base_url] = self._clock() + self._unhealthy_s

    def mark_text_only(self, upstream: Upstream) -> None:
        """Remember that ``upstream`` rejected the token-id fields: stop sending them."""
        self._text_only.add(upstream.base_url)

    def is_token_level(self, upstream: Upstream) -> bool:
        """Whether to ask ``upstream`` for token ids and logprobs."""
        return upstream.is_token_level and upstream.base_url not in self._text_only


def _affinity(url: str, rollout_id: str) -> bytes:
    return hashlib.blake2b(f"{url}\0{rollout_id}".encode(), digest_size=8).digest()
