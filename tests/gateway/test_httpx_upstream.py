"""The gateway with an injected upstream client (httpx): the same forwarding and recording pass.

``benchmarks/httpx_upstream.py`` exists to be measured against the gateway's own client
(``benchmarks/gateway_overhead.py --compare-clients``), injected through
``create_app(..., upstream_client=...)``; these are the openai-client and forwarding tests run
over it, which also proves the injection seam.
"""

from __future__ import annotations

import pytest

from benchmarks.httpx_upstream import HttpxClient
from fulmen.gateway.upstream_client import UpstreamClientFactory
from tests.gateway.test_forwarding import (  # noqa: F401  (collected here with this config)
    test_engine_gets_the_agents_request_as_sent_and_redirects_come_back,
    test_engine_is_reached_through_the_environments_proxy,
)
from tests.gateway.test_openai_client import (  # noqa: F401
    test_async_client_many_calls_in_one_attempt,
    test_streaming_records_token_ids_from_chunks,
    test_streaming_tool_calls_are_accumulated,
    test_sync_client_call_is_recorded_with_token_ids,
    test_tool_calls_round_trip,
)


@pytest.fixture
def upstream_client() -> UpstreamClientFactory:
    return HttpxClient
