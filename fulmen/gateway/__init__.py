"""The LLM gateway: an OpenAI-compatible proxy that records every model call of an agent.

Agents point their ``base_url`` at ``{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1``;
the gateway forwards to the inference engines, asks them for token ids and logprobs, shows the
agent the reply it asked for, and writes one ``LLMCallCreate`` per call to the store.
Importing this package loads Starlette and httpx; ``import fulmen`` does not import it.
"""

from __future__ import annotations

from fulmen.gateway.app import create_app
from fulmen.gateway.config import GatewayConfig
from fulmen.gateway.proxy import Gateway
from fulmen.gateway.recorder import CallRecorder
from fulmen.gateway.upstreams import Upstream, UpstreamPool

__all__ = ["CallRecorder", "Gateway", "GatewayConfig", "Upstream", "UpstreamPool", "create_app"]
