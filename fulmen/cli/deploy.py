"""``fulmen deploy docker|k8s CONFIG --out DIR``: generate a deployment of a training config.

::

    fulmen deploy k8s examples/toy/config.yaml --out deploy/ --image registry.example/toy:1
    docker build -f deploy/Dockerfile -t registry.example/toy:1 examples/toy
    kubectl apply -f deploy/k8s/

The tokens are ``--token`` / ``--gateway-token`` (default: ``$FULMEN_STORE_TOKEN`` /
``$FULMEN_GATEWAY_TOKEN``, else fresh random ones), written to ``.env`` (docker) or the Secret
(k8s) with mode 0600.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``deploy`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "deploy",
        help="generate a Dockerfile and a Compose file or Kubernetes manifests from a config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", choices=["docker", "k8s"], help="what to generate")
    parser.add_argument("config", type=Path, help="the training config (YAML)")
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument(
        "--context",
        type=Path,
        help="the build context copied into the image; it must hold the config, the agent "
        "code (python_path) and .jsonl data (default: the config's directory)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, as in `fulmen train`")  # fmt: skip
    parser.add_argument("--image", help="image name the services run (default: fulmen:VERSION)")
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="an external PostgreSQL (postgresql://user:password@host/db) for the store; "
        "default: deploy PostgreSQL with the services",
    )
    parser.add_argument(
        "--runners",
        type=int,
        help="runner replicas (default: 2, or 0 when the config trains weights: see docs)",
    )
    parser.add_argument(
        "--engine", choices=["builtin", "vllm"], help="engine kind (default: the config's)"
    )
    parser.add_argument("--gpus", type=int, help="GPUs per pod that runs vLLM (default: 1)")
    parser.add_argument("--namespace", help="Kubernetes namespace (default: fulmen)")
    parser.add_argument("--fulmen-requirement", metavar="SPEC",
                        help="what the image pip-installs fulmen from")  # fmt: skip
    parser.add_argument("--vllm-requirement", metavar="SPEC",
                        help="what the image pip-installs vLLM from")  # fmt: skip
    parser.add_argument("--storage", help="size of the PostgreSQL and trainer volumes (10Gi)")
    parser.add_argument("--token", help="the store token (default: $FULMEN_STORE_TOKEN)")
    parser.add_argument(
        "--gateway-token", help="the gateway token (default: $FULMEN_GATEWAY_TOKEN)"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from fulmen.cli.store import cli_settings
    from fulmen.deploy import DeployOptions, generate_bundle, write_bundle
    from fulmen.errors import ConfigError
    from fulmen.trainer.config import load_config

    config = load_config(args.config, overrides=args.set)
    chosen = {
        "image": args.image,
        "database_url": args.database_url,
        "runners": args.runners,
        "engine": args.engine,
        "gpus": args.gpus,
        "namespace": args.namespace,
        "fulmen_requirement": args.fulmen_requirement,
        "vllm_requirement": args.vllm_requirement,
        "storage": args.storage,
    }
    try:
        options = DeployOptions(**{k: v for k, v in chosen.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(f"--{e['loc'][0]}: {e['msg']}".replace("_", "-") for e in exc.errors())
        raise ConfigError(f"invalid deploy option: {problems}") from exc
    settings = cli_settings(args)
    files, services = generate_bundle(
        args.target,
        config,
        options,
        config_file=args.config,
        context=args.context or args.config.parent,
        out=args.out,
        overrides=args.set,
        store_token=args.token or settings.store_token,
        gateway_token=args.gateway_token or settings.gateway_token,
    )
    for path in write_bundle(files, args.out):
        print(path)
    runners = next(s.replicas for s in services if s.name == "runner")
    if runners == 0:
        print(
            "note: this config trains weights; the trainer runs its own engine, gateway and "
            "runner (new adapters reach only that engine), so the runner fleet is at 0 replicas"
        )
    return 0
