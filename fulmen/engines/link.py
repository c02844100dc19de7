"""A client of a running inference engine: serve a model version, name tokens.

Both engines fulmen runs (the built-in server and vLLM) take ``POST /v1/load_lora_adapter``
(``{"lora_name", "lora_path"}``) to serve an adapter under a model name, replacing one already
loaded under that name; the built-in server also takes ``POST /v1/reload_weights`` for a full
checkpoint (vLLM's reload is a route only the launcher that started it may call,
``fulmen.engines.vllm``) and ``POST /detokenize``,
which the dashboard's token view uses to print each token's text. The dashboard and
``fulmen models serve|compare`` use it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import httpx

from fulmen.errors import EngineError
from fulmen.tls import tls_context

if TYPE_CHECKING:
    from fulmen.types import ModelVersion

__all__ = ["EngineLink"]

_TEXT_CACHE = 50_000


class EngineLink:
    """Calls one engine at ``url`` (its root, or its ``/v1`` base URL).

    Args:
        url: where the engine listens, e.g. ``http://127.0.0.1:8000``.
        transport: an httpx transport to use instead of the network (tests).
        token: the engine's admin token, sent as a bearer token (``None``: none).
    """

    def __init__(
        self,
        url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        root = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        self.url = root[: -len("/v1")] if root.endswith("/v1") else root
        self._transport = transport
        self._texts: OrderedDict[int, str] = OrderedDict()

    async def _post(self, path: str, body: dict[str, Any], timeout: float) -> httpx.Response:
        try:
            async with httpx.AsyncClient(
                timeout=timeout,
                transport=self._transport,
                headers=self._headers,
                verify=tls_context(),
            ) as client:
                response = await client.post(f"{self.url}{path}", json=body)
        except httpx.HTTPError as exc:
            raise EngineError(f"engine at {self.url} did not answer {path}: {exc}") from exc
        if response.status_code >= 400:
            raise EngineError(
                f"engine at {self.url} refused {path} ({response.status_code}): "
                f"{response.text[:500]}",
                detail={"status": response.status_code},
            )
        return response

    async def serve(self, version: ModelVersion, name: str) -> dict[str, Any]:
        """Make the engine serve ``version``: an adapter under model ``name``, or full weights.

        Returns what the engine answered (its new policy version when it reports one).
        """
        if version.kind == "adapter":
            body = {"lora_name": name, "lora_path": version.path, "load_inplace": True}
            response = await self._post("/v1/load_lora_adapter", body, timeout=600)
            served = {"model": name}
        else:
            response = await self._post("/v1/reload_weights", {"path": version.path}, timeout=600)
            served = {"model": "base weights"}
        header = response.headers.get("x-fulmen-policy-version")
        return {
            **served,
            "path": version.path,
            "policy_version": int(header) if header is not None else None,
        }

    async def token_texts(self, ids: list[int]) -> dict[int, str]:
        """Return the text of each distinct token id (one ``/detokenize`` call per new id)."""
        import asyncio

        missing = sorted({i for i in ids if i not in self._texts})

        async def one(token: int) -> tuple[int, str]:
            response = await self._post("/detokenize", {"tokens": [token]}, timeout=30)
            text = response.json().get("prompt")
            return token, text if isinstance(text, str) else ""

        for token, text in await asyncio.gather(*(one(t) for t in missing)):
            self._texts[token] = text
        while len(self._texts) > _TEXT_CACHE:
            self._texts.popitem(last=False)
        return {i: self._texts[i] for i in set(ids) if i in self._texts}
