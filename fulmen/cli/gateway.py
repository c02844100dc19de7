"""``fulmen gateway``: serve the LLM gateway in front of one or more inference engines.

Example::

    fulmen gateway --store sqlite:///runs.db --upstream http://127.0.0.1:8000/v1 --port 8100
    fulmen gateway --store http://127.0.0.1:4747 --token "$STORE_TOKEN" --upstream ...
    fulmen gateway --config gateway.yaml --store ... --upstream ...   # capture:, release:, ...
    fulmen gateway --model-map '*=policy' --store ... --upstream ...  # any model name → policy

Agents then use ``http://127.0.0.1:8100/rollout/{rollout_id}/attempt/{attempt_id}/v1`` as
their OpenAI base URL (plain ``/v1`` works too, recorded as untracked calls).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import socket
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cli.store import add_store_options, cli_settings, store_address, store_options
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.gateway.config import GatewayConfig

__all__ = ["gateway_config", "loop_factory", "register"]


def register(subparsers: Any) -> None:
    """Add the ``gateway`` subcommand."""
    parser = subparsers.add_parser(
        "gateway",
        help="run the OpenAI-compatible gateway that records every model call",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_store_options(parser)
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL",
        help="engine that returns token ids (vLLM, fulmen's engine); repeat for several. "
        "$FULMEN_ENGINE_TOKEN, when set, is sent to them as their API key",
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
        "--gateway-token",
        metavar="TOKEN",
        default=None,
        help="bearer token agents must send to the gateway (default: $FULMEN_GATEWAY_TOKEN, "
        "else $FULMEN_TOKEN); required unless --host is a loopback address",
    )
    parser.add_argument(
        "--spill-dir",
        metavar="DIR",
        type=Path,
        default=None,
        help="where call records are spilled while the store is away (default: "
        "$FULMEN_SPILL_DIR, else ~/.cache/fulmen/spill)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        type=Path,
        default=None,
        help="GatewayConfig as YAML, such as its capture: and redaction: sections for "
        "production traffic (docs/production.md); the options below override it",
    )
    parser.add_argument(
        "--model-map",
        action="append",
        type=_model_map_entry,
        default=None,
        metavar="NAME=MODEL",
        help="send calls asking for model NAME to the engine's MODEL ('*' matches every name "
        "not listed); repeatable, added to the config file's model_map",
    )
    _add_config_options(parser)
    parser.set_defaults(func=_run)


def _model_map_entry(text: str) -> tuple[str, str]:
    name, sep, model = text.partition("=")
    if not sep or not name or not model:
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL, got {text!r}")
    return name, model


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    """One ``--option`` per scalar ``GatewayConfig`` field, its help taken from the docstring."""
    from fulmen.gateway.config import GatewayConfig

    helps = _attribute_docs(GatewayConfig.__doc__ or "")
    group = parser.add_argument_group("gateway options (GatewayConfig)")
    for name, field in GatewayConfig.model_fields.items():
        kind: object = field.annotation
        flag = "--" + name.replace("_", "-")
        text = f"{helps.get(name, '')} (default {field.default})"
        if typing.get_origin(kind) is typing.Literal:  # a choice among names
            choices = [str(c) for c in typing.get_args(kind)]
            group.add_argument(flag, choices=choices, default=None, dest=name, help=text)
            continue
        if name == "session_headers":  # a list of header names
            group.add_argument(flag, nargs="+", default=None, dest=name, metavar="NAME", help=text)
            continue
        if kind is not int and kind is not float and kind is not bool:
            continue
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            group.add_argument(flag, type=kind, default=None, dest=name, help=text)


def _attribute_docs(doc: str) -> dict[str, str]:
    """Map each ``name: text`` entry of a Google-style ``Attributes:`` section to its text."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in doc.split("Attributes:", 1)[-1].splitlines():
        stripped = line.strip()
        head, sep, rest = stripped.partition(": ")
        is_entry = line.startswith(" " * 8) and not line.startswith(" " * 9)
        if sep and head.isidentifier() and is_entry:
            current = head
            out[head] = rest
        elif current and stripped:
            out[current] += " " + stripped
    return out


def _run(args: argparse.Namespace) -> int:
    token = args.gateway_token or cli_settings(args).gateway_token
    if not _is_loopback(args.host) and token is None:
        raise ConfigError(
            f"refusing to bind {args.host!r} without a token: pass --gateway-token, set "
            "$FULMEN_GATEWAY_TOKEN or bind 127.0.0.1"
        )
    if not args.upstream and not args.hosted_upstream:
        raise ConfigError("give at least one --upstream or --hosted-upstream URL")
    config = gateway_config(args, spill_dir=cli_settings(args).spill_dir)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; a stop we asked for is a
    # clean exit (0), so the re-raised signal is swallowed here.
    previous = signal.signal(signal.SIGTERM, _ignore_signal)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_serve(args, token, config))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


async def _serve(args: argparse.Namespace, token: str | None, config: GatewayConfig) -> None:
    import uvicorn

    from fulmen.gateway import Upstream, create_app
    from fulmen.store import open_store
    from fulmen.tracing.backoff import Backoff, retry_call

    settings = cli_settings(args)
    env_name = args.upstream_api_key_env
    api_key = settings.variable(env_name) if env_name else None
    # An engine with an admin token ($FULMEN_ENGINE_TOKEN) may ask it on model calls too (vLLM
    # with an API key): the gateway sends it, agents never hold it.
    engine_key = settings.engine_token
    upstreams = [Upstream(base_url=url, api_key=engine_key) for url in args.upstream]
    upstreams += [
        Upstream(base_url=url, api_key=api_key, is_token_level=False)
        for url in args.hosted_upstream
    ]
    url, store_token = store_address(args)
    # A store that is down or failing when the gateway starts is waited for (a log line a
    # minute); a wrong token or URL fails at once; SIGTERM meanwhile stops the gateway.
    loop = asyncio.get_running_loop()
    waiting = asyncio.current_task()
    if waiting is not None:
        loop.add_signal_handler(signal.SIGTERM, waiting.cancel)
    try:
        store = await retry_call(
            lambda: open_store(url, **store_options(url, store_token)),
            backoff=Backoff(maximum=30.0, deadline=None),
            what=f"connect to the store at {url}",
        )
    except asyncio.CancelledError:
        return  # stopped before the store answered
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _ignore_signal)  # as _run set it (see there)
    gate: asyncio.Task[None] | None = None
    try:
        app = create_app(store, upstreams, token=token, config=config)
        server_config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="info", ws="none", lifespan="on"
        )
        release = config.release
        if release is not None and release.gate is not None:
            from fulmen.release import Gate

            # The gate judges the sessions this gateway (and any other) wrote; the release is
            # in the store once the app has started (its first window is window_s away).
            by = f"gate@{socket.gethostname()}"[:256]
            gate = asyncio.create_task(Gate(store, release.name, release.gate, by=by).run())
        await uvicorn.Server(server_config).serve()
    finally:
        if gate is not None:
            gate.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gate
        await store.aclose()


def gateway_config(args: argparse.Namespace, *, spill_dir: Path | None) -> GatewayConfig:
    """Build the ``GatewayConfig`` from ``--config FILE.yaml`` and the options that override it.

    A file that is not a YAML mapping of ``GatewayConfig`` fields raises ``ConfigError``
    naming the file and what is wrong.
    """
    import yaml
    from pydantic import ValidationError

    from fulmen.gateway import GatewayConfig

    chosen: dict[str, Any] = {}
    if args.config is not None:
        try:
            loaded = yaml.safe_load(args.config.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read gateway config {str(args.config)!r}: {exc}") from exc
        if not isinstance(loaded, dict | None):
            raise ConfigError(f"gateway config {str(args.config)!r} is not a YAML mapping")
        chosen.update(loaded or {})
    entries: list[tuple[str, str]] = getattr(args, "model_map", None) or []
    chosen.update(
        {
            n: v
            for n in GatewayConfig.model_fields
            if n != "model_map" and (v := getattr(args, n, None)) is not None
        }
    )
    if entries:
        # The flags add to (and override entries of) the file's map.
        chosen["model_map"] = {**(chosen.get("model_map") or {}), **dict(entries)}
    chosen["spill_dir"] = args.spill_dir or chosen.get("spill_dir") or spill_dir
    try:
        return GatewayConfig(**{n: v for n, v in chosen.items() if v is not None})
    except ValidationError as exc:
        where = f" in {str(args.config)!r}" if args.config is not None else ""
        raise ConfigError(f"invalid gateway config{where}: {exc}") from exc


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """Return uvloop's loop factory when uvloop is installed (the gateway's hot path is I/O)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _ignore_signal(signum: int, frame: object) -> None:
    del signum, frame


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
