"""The gateway fixtures (scripted upstream, store, gateway) for running agents through a Runner."""

from __future__ import annotations

from tests.gateway.conftest import config, gw, script, store, time_limit, upstream_url

__all__ = ["config", "gw", "script", "store", "time_limit", "upstream_url"]
