"""``fulmen serve``: serve a model over an OpenAI-compatible API (built-in engine or vLLM)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from pathlib import Path
from typing import Any

from fulmen.errors import ConfigError

__all__ = ["main", "register"]

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible API",
        description="Serve a model (tiny, tiny-long, gemma-3-270m or a local HF directory) with "
        "token ids, logprobs, tool calls and runtime LoRA loading.",
    )
    p.add_argument(
        "--model", required=True, help="tiny, tiny-long, gemma-3-270m, or a local model directory"
    )
    p.add_argument("--engine", choices=["builtin", "vllm"], default="builtin")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--served-model-name",
        default=None,
        help="name clients pass as model (default: the --model argument)",
    )
    p.add_argument("--max-batch", type=int, default=8, help="most sequences decoded together")
    p.add_argument("--max-lora-rank", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the built-in engine (1 is fastest on a shared machine)",
    )
    p.add_argument(
        "--attn-implementation",
        choices=["blockwise", "eager", "sdpa"],
        default="blockwise",
        help="built-in engine: blockwise (default: long prompts without a score matrix), eager "
        "(a whole score matrix per layer) or transformers' sdpa",
    )
    p.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="built-in engine: reuse the KV cache of prompt prefixes seen before (default: on)",
    )
    p.add_argument(
        "--prefix-cache-mb",
        type=int,
        default=None,
        help="built-in engine: most MiB of cached prefix KV, least recently used blocks going "
        "first (default: 512, or one whole context's KV if larger)",
    )
    p.add_argument(
        "--kv-cache-mb",
        type=int,
        default=None,
        help="built-in engine: most MiB of KV the running batch may hold (rows x widest row, "
        "each sequence at prompt plus max_tokens); requests wait beyond it (default: "
        "--max-batch whole contexts)",
    )
    p.add_argument(
        "--prefill-chunk-tokens",
        type=int,
        default=2048,
        help="built-in engine: most prompt tokens one prefill pass computes; longer prompts "
        "take several passes (default: 2048)",
    )
    p.add_argument(
        "--vllm-python",
        default=None,
        help="python with vllm installed (default: $FULMEN_VLLM_PYTHON, else this python if "
        "vllm is importable)",
    )
    p.add_argument(
        "--adapter-root",
        action="append",
        default=None,
        metavar="DIR",
        help="load adapters and weights only from under DIR (repeatable; default: anywhere). "
        "With $FULMEN_ENGINE_TOKEN set, the routes that change the served weights require it "
        "as a bearer token (vLLM: every /v1 route does, as VLLM_API_KEY)",
    )
    p.add_argument(
        "--instance",
        default=None,
        metavar="ID",
        help="built-in engine: an id /health echoes in its x-fulmen-instance header; engine "
        "launchers pass a random one to tell their own server from another on the same port",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding a non-loopback address (the API has no authentication)",
    )
    p.set_defaults(func=_run)


def _check_host(host: str, allow_remote: bool) -> None:
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise ConfigError(
            f"refusing to bind {host!r}: the API has no authentication; "
            "pass --allow-remote to bind a non-loopback address"
        )


def _engine_token(args: argparse.Namespace) -> str | None:
    """Return ``$FULMEN_ENGINE_TOKEN``: a token on the command line would show in ``ps``."""
    from fulmen.cli.store import cli_settings

    return cli_settings(args).engine_token


def _run(args: argparse.Namespace) -> int:
    _check_host(args.host, args.allow_remote)
    name = args.served_model_name or args.model
    if args.engine == "vllm":
        from fulmen.engines.vllm import VLLMLauncher

        launcher = VLLMLauncher(
            args.model,
            token=_engine_token(args),
            host=args.host,
            port=args.port,
            served_model_name=name,
            max_lora_rank=args.max_lora_rank,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            python=args.vllm_python,
        )
        return launcher.run_forever()

    import torch
    import uvicorn

    from fulmen.engines.builtin.model import ServedModel
    from fulmen.engines.builtin.prefix_cache import PrefixCache
    from fulmen.engines.builtin.server import create_app
    from fulmen.engines.models import resolve_model

    torch.set_num_threads(args.threads)
    model = ServedModel(
        resolve_model(args.model),
        served_name=name,
        max_lora_rank=args.max_lora_rank,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        attn_implementation=args.attn_implementation,
    )
    for flag in ("prefix_cache_mb", "kv_cache_mb", "prefill_chunk_tokens", "max_batch"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise ConfigError(f"--{flag.replace('_', '-')} must be positive, got {value}")
    per_token = model.kv_shape.bytes_per_token
    context_bytes = model.max_model_len * per_token
    cache = None
    if args.prefix_cache:
        mb = args.prefix_cache_mb
        cache = PrefixCache(max_bytes=(mb << 20) if mb else max(512 << 20, context_bytes))
    budget = None if args.kv_cache_mb is None else max(1, (args.kv_cache_mb << 20) // per_token)
    app = create_app(
        model,
        max_batch=args.max_batch,
        threads=args.threads,
        prefix_cache=cache,
        prefill_chunk_tokens=args.prefill_chunk_tokens,
        kv_budget_tokens=budget,
        admin_token=_engine_token(args),
        adapter_roots=[Path(root) for root in args.adapter_root or ()],
        instance=args.instance,
    )
    kv_tokens = app.state.engine.scheduler.kv_budget_tokens
    logger.info(
        "serving %s: context %d tokens, KV %d bytes per token; running batch up to %d KV "
        "tokens (%.0f MiB), prefix cache %s, prefill chunks of %d tokens",
        name,
        model.max_model_len,
        per_token,
        kv_tokens,
        kv_tokens * per_token / 2**20,
        f"{cache.max_bytes / 2**20:.0f} MiB" if cache is not None else "off",
        args.prefill_chunk_tokens,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``serve`` alone (``python -m fulmen.cli.serve ...``), as engine launchers do."""
    parser = argparse.ArgumentParser(prog="fulmen")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _exit_with_parent()
    return int(args.func(args))


def _exit_with_parent(interval: float = 1.0) -> None:
    """Stop this server when the process that launched it dies.

    A launcher killed by SIGKILL (or any signal Python does not turn into cleanup) cannot stop
    its engine; without this the engine would keep its port and memory forever. SIGTERM lets
    uvicorn shut down cleanly.
    """
    import os
    import signal
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="fulmen-parent-watch", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
