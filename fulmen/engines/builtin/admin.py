"""Who may change what the built-in engine serves: the trainer's token, paths it owns.

``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and ``/v1/reload_weights`` replace the
policy every rollout samples from. With an admin token (``fulmen serve`` reads
``$FULMEN_ENGINE_TOKEN``; a ``fulmen train`` run makes one per run) they require it as a bearer
token, and a path they load must lie under one of the engine's adapter roots (the run folder),
so that nothing an agent could write elsewhere can become the policy. A refused path is
answered the same whether it exists or not: the engine reveals nothing of the file system.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fulmen.engines.builtin.errors import APIError

__all__ = ["ADMIN_PATHS", "AdminGate", "check_served_path"]

#: The routes that change the served weights.
ADMIN_PATHS = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/reload_weights"})


class AdminGate:
    """Pure-ASGI check of the admin token on ``ADMIN_PATHS`` (401 in OpenAI's error shape)."""

    def __init__(self, app: Any, *, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass the request on unless it is an admin call without the token."""
        if scope["type"] == "http" and scope["path"] in ADMIN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                from starlette.responses import JSONResponse

                error = APIError(
                    f"{scope['path']} needs the engine's admin token",
                    status=401,
                    type="AuthenticationError",
                )
                await JSONResponse(error.body(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def check_served_path(path: str, roots: Sequence[Path], *, param: str) -> None:
    """Raise a 403 ``APIError`` unless ``path`` lies under one of ``roots`` (none: any path).

    Symlinks are resolved first, so a link under a root that points elsewhere is refused too.
    """
    if not roots:
        return
    resolved = Path(os.path.realpath(path))
    if any(resolved.is_relative_to(root) for root in roots):
        return
    raise APIError(
        f"{param} is outside the folders this engine serves weights from",
        status=403,
        type="PermissionDeniedError",
        param=param,
    )
