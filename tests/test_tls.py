"""The shared TLS context: built once, and as strict as the one each client would build."""

from __future__ import annotations

import ssl

from fulmen.agent.context import LLM
from fulmen.environments.chat import chat_client
from fulmen.tls import tls_context


def test_every_caller_gets_the_same_context() -> None:
    assert tls_context() is tls_context()


def test_it_verifies_certificates_and_host_names_against_loaded_authorities() -> None:
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded, not an empty store


async def test_a_rollouts_client_uses_it() -> None:
    llm = LLM(name="main", base_url="http://127.0.0.1:1/v1", model="m", api_key="k")
    async with chat_client(llm) as http:
        pool = http._transport._pool  # type: ignore[attr-defined]
        assert pool._ssl_context is tls_context()
        assert http.headers["Authorization"] == "Bearer k"
