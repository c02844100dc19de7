"""Framework capture tests reuse the gateway fixtures: scripted upstream, store, gateway."""

from __future__ import annotations

from tests.gateway.conftest import (
    config,
    gw,
    script,
    store,
    time_limit,
    upstream_client,
    upstream_url,
)

__all__ = ["config", "gw", "script", "store", "time_limit", "upstream_client", "upstream_url"]
