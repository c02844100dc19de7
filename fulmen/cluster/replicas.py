"""``EngineReplicas``: the ``Engine`` seam over several engine replicas on Ray.

The trainer hands new weights to ``stack.engine`` and carries on when the call returns; here
that call reaches every replica and returns only when all of them serve the new policy, so the
next step's rollouts, whichever replica the gateway sends them to, see one policy. The policy is
also written to the fleet's ``PolicyBoard`` first: a replica that Ray restarts meanwhile loads
it before it serves again. Adapter files are shipped through Ray's object store, so the nodes
need no shared disk for them (full weights are reloaded from a path every node must read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from fulmen.cluster.actors import ServedPolicy
from fulmen.engines.base import Capabilities
from fulmen.tls import tls_context

__all__ = ["EngineReplicas", "adapter_files"]

logger = logging.getLogger(__name__)


def adapter_files(directory: Path) -> dict[str, bytes]:
    """Read every file below ``directory`` as ``{relative path: bytes}``."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


class EngineReplicas:
    """Several engine replicas behind one ``Engine`` (see the module docstring).

    Args:
        handles: the replicas' actor handles (``ServiceActor`` running an engine).
        urls: their OpenAI base URLs (``http://NODE:PORT/v1``), in the same order.
        board: the ``PolicyBoard`` actor.
        capabilities: what the replicas' engine kind supports.
    """

    def __init__(
        self,
        handles: Sequence[Any],
        urls: Sequence[str],
        *,
        board: Any,
        capabilities: Capabilities,
    ) -> None:
        if not handles or len(handles) != len(urls):
            raise ValueError(f"need one URL per replica, got {len(handles)} and {len(urls)}")
        self._handles = list(handles)
        self.urls = list(urls)
        self._board = board
        self.capabilities = capabilities
        self._policy = ServedPolicy()

    @property
    def base_url(self) -> str:
        """The first replica's URL, what a published ``llm`` resource names.

        The gateway forwards each rollout to one replica of ``urls``.
        """
        return self.urls[0]

    async def health(self) -> bool:
        """Whether every replica answers its health check."""
        async with httpx.AsyncClient(timeout=5, verify=tls_context()) as client:
            try:
                answers = await asyncio.gather(
                    *(client.get(f"{url.removesuffix('/v1')}/health") for url in self.urls)
                )
            except httpx.HTTPError:
                return False
        return all(a.status_code == 200 for a in answers)

    async def load_adapter(self, name: str, path: str) -> int | None:
        """Hot-load the adapter at ``path`` as ``name`` on every replica."""
        import ray

        files = await asyncio.to_thread(adapter_files, Path(path))
        shipped = ray.put(files)
        kept = tuple(a for a in self._policy.adapters if a[0] != name)
        policy = ServedPolicy(weights=self._policy.weights, adapters=(*kept, (name, files)))
        await self._publish(policy)
        return await self._everywhere("load_adapter", name, shipped)

    async def unload_adapter(self, name: str) -> int | None:
        """Stop serving adapter ``name`` on every replica."""
        kept = tuple(a for a in self._policy.adapters if a[0] != name)
        await self._publish(ServedPolicy(weights=self._policy.weights, adapters=kept))
        return await self._everywhere("unload_adapter", name)

    async def reload_weights(self, path: str | None = None) -> int | None:
        """Reload the base weights of every replica from ``path`` (``None``: the original)."""
        await self._publish(ServedPolicy(weights=path, adapters=self._policy.adapters))
        return await self._everywhere("reload_weights", path)

    async def aclose(self) -> None:
        """Nothing to do: the fleet ends the replicas."""

    async def _publish(self, policy: ServedPolicy) -> None:
        self._policy = policy
        await self._board.set.remote(policy)

    async def _everywhere(self, method: str, *args: Any) -> int | None:
        """Call ``method`` on every replica at once; return the first replica's version.

        A call to a replica that Ray is restarting waits for the new process (the actors'
        ``max_task_retries``), which has loaded the board's policy by then; a replica Ray gave
        up on is skipped (the fleet reports it); any other failure is raised.
        """
        from ray.exceptions import RayActorError

        calls = [getattr(h, method).remote(*args) for h in self._handles]
        results = await asyncio.gather(*calls, return_exceptions=True)
        versions: list[int | None] = []
        for url, result in zip(self.urls, results, strict=True):
            if isinstance(result, RayActorError):
                logger.warning("engine replica %s is gone: %s", url, result)
                versions.append(None)
            elif isinstance(result, BaseException):
                raise result
            else:
                versions.append(result)
        return next((v for v in versions if v is not None), None)
