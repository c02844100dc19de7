"""``fulmen gateway``: serve the LLM gateway in front of one or more inference engines.

Example::

    fulmen gateway --store sqlite:///runs.db --upstream http://127.0.0.1:8000/v1 --port 8100

Agents then use ``http://127.0.0.1:8100/rollout/{rollout_id}/attempt/{attempt_id}/v1`` as
their OpenAI base URL (plain ``/v1`` works too, recorded as untracked calls).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
from typing import Any

from fulmen.errors import ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``gateway`` subcommand."""
    parser = subparsers.add_parser(
        "gateway",
        help="run the OpenAI-compatible gateway that records every model call",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--store", required=True, help="store URL (memory://, sqlite:///..., http://...)"
    )
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL",
        help="engine that returns token ids (vLLM, fulmen's engine); repeat for several",
    )
    parser.add_argument(
        "--hosted-upstream",
        action="append",
        default=[],
        metavar="URL",
        help="hosted API without token ids (recorded as text only); repeatable",
    )
    parser.add_argument(
        "--upstream-api-key-env",
        metavar="VAR",
        help="environment variable holding the API key sent to hosted upstreams",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8100, help="port (default 8100)")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        default="FULMEN_TOKEN",
        help="environment variable with the bearer token agents must send (default FULMEN_TOKEN)",
    )
    parser.add_argument(
        "--read-timeout", type=float, default=600.0, help="seconds to wait for upstream bytes"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import asyncio

    token = os.environ.get(args.token_env) or None
    if not _is_loopback(args.host) and token is None:
        raise ConfigError(
            f"refusing to bind {args.host!r} without a token: set ${args.token_env} "
            "or bind 127.0.0.1"
        )
    if not args.upstream and not args.hosted_upstream:
        raise ConfigError("give at least one --upstream or --hosted-upstream URL")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; a stop we asked for is a
    # clean exit (0), so the re-raised signal is swallowed here.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        asyncio.run(_serve(args, token))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


async def _serve(args: argparse.Namespace, token: str | None) -> None:
    import uvicorn

    from fulmen.gateway import GatewayConfig, Upstream, create_app
    from fulmen.store import open_store

    api_key = os.environ.get(args.upstream_api_key_env) if args.upstream_api_key_env else None
    upstreams = [Upstream(base_url=url) for url in args.upstream]
    upstreams += [
        Upstream(base_url=url, api_key=api_key, is_token_level=False)
        for url in args.hosted_upstream
    ]
    config = GatewayConfig(read_timeout_s=args.read_timeout)
    store = await open_store(args.store)
    try:
        app = create_app(store, upstreams, token=token, config=config)
        server_config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="info", ws="none", lifespan="on"
        )
        await uvicorn.Server(server_config).serve()
    finally:
        await store.aclose()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
