"""Deployments generated from a training config: a Docker image, Docker Compose, Kubernetes.

``fulmen deploy docker|k8s CONFIG --out DIR`` writes them (``docs/deploy.md``).
``fulmen.deploy.layout`` decides what runs (commands, ports, secrets), the ``docker`` and
``kubernetes`` modules render it, ``fulmen.deploy.bundle`` collects and writes the files.
Importing this package imports PyYAML and the training config, not torch.
"""

from __future__ import annotations

from fulmen.deploy.bundle import BundleFile, generate_bundle, write_bundle
from fulmen.deploy.layout import DeployOptions, ServiceSpec

__all__ = ["BundleFile", "DeployOptions", "ServiceSpec", "generate_bundle", "write_bundle"]
