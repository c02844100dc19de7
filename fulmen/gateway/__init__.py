"""The LLM gateway: an OpenAI-compatible proxy that records every model call of an agent.

Agents point their ``base_url`` at ``{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1``;
the gateway forwards to the inference engines, asks them for token ids and logprobs, shows the
agent the reply it asked for, and writes one ``LLMCallCreate`` per call to the store.
Names load lazily: ``fulmen.gateway.config`` alone does not import Starlette or httptools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.importing import lazy_attributes

__all__ = [
    "CallRecorder",
    "CaptureConfig",
    "Gateway",
    "GatewayConfig",
    "RedactionConfig",
    "SessionKeyConfig",
    "Upstream",
    "UpstreamPool",
    "create_app",
]

# public name → module that defines it
_LAZY: dict[str, str] = {
    "CallRecorder": "fulmen.gateway.recorder",
    "CaptureConfig": "fulmen.gateway.capture_config",
    "Gateway": "fulmen.gateway.proxy",
    "GatewayConfig": "fulmen.gateway.config",
    "RedactionConfig": "fulmen.gateway.capture_config",
    "SessionKeyConfig": "fulmen.gateway.capture_config",
    "Upstream": "fulmen.gateway.upstreams",
    "UpstreamPool": "fulmen.gateway.upstreams",
    "create_app": "fulmen.gateway.app",
}

if TYPE_CHECKING:
    from fulmen.gateway.app import create_app
    from fulmen.gateway.capture_config import CaptureConfig, RedactionConfig, SessionKeyConfig
    from fulmen.gateway.config import GatewayConfig
    from fulmen.gateway.proxy import Gateway
    from fulmen.gateway.recorder import CallRecorder
    from fulmen.gateway.upstreams import Upstream, UpstreamPool


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(__all__)
