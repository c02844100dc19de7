"""``generate_bundle``: every file ``fulmen deploy docker|k8s`` writes, and writing them.

Both targets get the image's ``Dockerfile`` and its ``Dockerfile.dockerignore`` (BuildKit reads
the ignore file next to the Dockerfile, so the project directory needs none). ``docker`` adds
``compose.yaml`` and the ``.env`` it reads the secrets from; ``k8s`` adds ``k8s/*.yaml``, the
manifests ``kubectl apply -f k8s/`` applies in order. Files holding secrets are written
readable by their owner only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from fulmen.deploy import docker, kubernetes
from fulmen.deploy.layout import DeployOptions, DeploySecrets, ServiceSpec, plan_services
from fulmen.trainer.config import TrainConfig

__all__ = ["BundleFile", "Target", "generate_bundle", "write_bundle"]

Target = Literal["docker", "k8s"]


@dataclass(frozen=True)
class BundleFile:
    """One generated file: its path under the output directory and its text."""

    path: str
    text: str
    is_secret: bool = False


def generate_bundle(
    target: Target,
    config: TrainConfig,
    options: DeployOptions,
    *,
    config_file: Path,
    context: Path,
    out: Path,
    overrides: Sequence[str] = (),
    store_token: str | None = None,
    gateway_token: str | None = None,
) -> tuple[list[BundleFile], list[ServiceSpec]]:
    """Return the files of a ``target`` deployment of ``config`` and the services they run.

    Args:
        target: ``docker`` (compose) or ``k8s``.
        config: the training config loaded from ``config_file``.
        options: the deploy options.
        config_file: the config on this machine.
        context: the build context (copied to ``/app`` in the image).
        out: the output directory (kept out of the image when it lies inside the context).
        overrides: the ``--set`` overrides ``config`` was loaded with (the trainer gets them).
        store_token: the store's token; a random one when ``None``.
        gateway_token: the gateway's token; a random one when ``None``.
    """
    if target == "docker":
        host = str
        postgres_host = "postgres"
    else:
        host = kubernetes.resource_name
        postgres_host = kubernetes.resource_name("postgres")
    services = plan_services(
        config, options, config_file=config_file, context=context, host=host, overrides=overrides
    )
    secrets = DeploySecrets.create(
        options, store_token=store_token, gateway_token=gateway_token, postgres_host=postgres_host
    )
    is_vllm = any(s.name == "engine" and "vllm" in s.args for s in services)
    ignore = docker.dockerignore()
    resolved_out, resolved_context = out.resolve(), context.resolve()
    if resolved_out.is_relative_to(resolved_context) and resolved_out != resolved_context:
        ignore += f"{resolved_out.relative_to(resolved_context).as_posix()}\n"
    files = [
        BundleFile(
            "Dockerfile", docker.dockerfile(options, is_vllm=is_vllm, source=config_file.name)
        ),
        BundleFile("Dockerfile.dockerignore", ignore),
    ]
    if target == "docker":
        with_postgres = options.database_url is None
        compose = docker.compose_file(services, options, with_postgres=with_postgres)
        files.append(BundleFile("compose.yaml", compose))
        files.append(BundleFile(".env", docker.env_file(secrets), is_secret=True))
    else:
        for name, objects in kubernetes.manifests(services, options, secrets).items():
            text = yaml.safe_dump_all(objects, sort_keys=False, width=100)
            files.append(BundleFile(f"k8s/{name}", text, is_secret=name == "01-secret.yaml"))
    return files, services


def write_bundle(files: list[BundleFile], out: Path) -> list[Path]:
    """Write ``files`` under ``out`` (secrets with mode 0600) and return their paths."""
    written: list[Path] = []
    for item in files:
        path = out / item.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if item.is_secret:
            # Created 0600 before anything is written, so the secret is never world-readable.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(item.text)
        else:
            path.write_text(item.text, encoding="utf-8")
        written.append(path)
    return written
