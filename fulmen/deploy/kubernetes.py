"""Kubernetes manifests: a Secret, PostgreSQL, and a Deployment or Job plus Service per service.

``manifests(...)`` returns ``{file name: [objects]}``: the namespace, the Secret holding the
tokens and the database URL, PostgreSQL as a StatefulSet with its Service (unless the store
uses an external database), then for each fulmen service a Deployment (the trainer: a Job
with a volume for its run directory, so a restarted pod resumes) and, when it listens, a
Service. HTTP services get readiness and liveness probes on their health endpoint, and the
engine a startup probe long enough to load a model; pods that run vLLM request GPUs.
"""

from __future__ import annotations

from typing import Any

from fulmen.deploy.layout import CACHE_DIR, DeployOptions, DeploySecrets, ServiceSpec

__all__ = ["SECRET_NAME", "manifests", "resource_name"]

SECRET_NAME = "fulmen-secrets"
_UID = 10001
_GPU = "nvidia.com/gpu"


def resource_name(service: str) -> str:
    """Return the Kubernetes name of a fulmen service (``store`` -> ``fulmen-store``)."""
    return f"fulmen-{service}"


def manifests(
    services: list[ServiceSpec], options: DeployOptions, secrets: DeploySecrets
) -> dict[str, list[dict[str, Any]]]:
    """Return the manifests by file name, in the order ``kubectl apply -f DIR`` applies them."""
    ns = options.namespace
    files: dict[str, list[dict[str, Any]]] = {
        "00-namespace.yaml": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}],
        "01-secret.yaml": [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _metadata(SECRET_NAME, ns, "secrets"),
                "type": "Opaque",
                "stringData": dict(secrets.values),
            }
        ],
    }
    if options.database_url is None:
        files["10-postgres.yaml"] = _postgres(options)
    for index, spec in enumerate(services, start=2):
        objects = [_job(spec, options) if spec.is_job else _deployment(spec, options)]
        if spec.port is not None:
            objects.append(_service(spec.name, spec.port, ns))
        if spec.volume is not None:
            objects.insert(0, _claim(f"{resource_name(spec.name)}-data", options))
        files[f"{index}0-{spec.name}.yaml"] = objects
    return files


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "fulmen", "app.kubernetes.io/component": component}


def _metadata(name: str, namespace: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": _labels(component)}


def _service(component: str, port: int, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(resource_name(component), namespace, component),
        "spec": {
            "selector": _labels(component),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _claim(name: str, options: DeployOptions) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(name, options.namespace, "trainer"),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": options.storage}},
        },
    }


def _secret_env(variable: str, key: str) -> dict[str, Any]:
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": SECRET_NAME, "key": key}}}


def _container(spec: ServiceSpec, options: DeployOptions) -> dict[str, Any]:
    env = [{"name": name, "value": value} for name, value in spec.env.items()]
    env += [_secret_env(name, key) for name, key in spec.secret_env.items()]
    container: dict[str, Any] = {
        "name": spec.name,
        "image": options.image,
        "args": list(spec.args),
        "env": env,
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if spec.port is not None:
        container["ports"] = [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}]
    if spec.port is not None and spec.health_path is not None:
        probe = {"httpGet": {"path": spec.health_path, "port": "http"}, "periodSeconds": 10}
        container["readinessProbe"] = {**probe, "timeoutSeconds": 3, "failureThreshold": 3}
        container["livenessProbe"] = {**probe, "timeoutSeconds": 5, "failureThreshold": 6}
        if spec.name == "engine":
            # Loading (or building) a model takes minutes; liveness starts counting after it.
            container["startupProbe"] = {**probe, "failureThreshold": 90}
    if spec.gpus:
        container["resources"] = {"limits": {_GPU: str(spec.gpus)}}
    mounts = []
    if "FULMEN_CACHE_DIR" in spec.env:
        mounts.append({"name": "model-cache", "mountPath": str(CACHE_DIR)})
    if spec.volume is not None:
        mounts.append({"name": "run", "mountPath": str(spec.volume)})
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _pod(spec: ServiceSpec, options: DeployOptions) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": _UID, "fsGroup": _UID},
        "containers": [_container(spec, options)],
    }
    volumes: list[dict[str, Any]] = []
    if "FULMEN_CACHE_DIR" in spec.env:
        volumes.append({"name": "model-cache", "emptyDir": {}})
    if spec.volume is not None:
        claim = {"claimName": f"{resource_name(spec.name)}-data"}
        volumes.append({"name": "run", "persistentVolumeClaim": claim})
    if volumes:
        pod["volumes"] = volumes
    return pod


def _deployment(spec: ServiceSpec, options: DeployOptions) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(resource_name(spec.name), options.namespace, spec.name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": _labels(spec.name)},
            "template": {"metadata": {"labels": _labels(spec.name)}, "spec": _pod(spec, options)},
        },
    }


def _job(spec: ServiceSpec, options: DeployOptions) -> dict[str, Any]:
    pod = {**_pod(spec, options), "restartPolicy": "OnFailure"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(resource_name(spec.name), options.namespace, spec.name),
        # A failed pod restarts and resumes from the run directory on its volume.
        "spec": {
            "backoffLimit": 6,
            "template": {"metadata": {"labels": _labels(spec.name)}, "spec": pod},
        },
    }


def _postgres(options: DeployOptions) -> list[dict[str, Any]]:
    name, ns = resource_name("postgres"), options.namespace
    ready = ["pg_isready", "-U", "fulmen", "-d", "fulmen", "-h", "127.0.0.1"]
    container = {
        "name": "postgres",
        "image": options.postgres_image,
        "env": [
            {"name": "POSTGRES_USER", "value": "fulmen"},
            {"name": "POSTGRES_DB", "value": "fulmen"},
            _secret_env("POSTGRES_PASSWORD", "postgres-password"),
            # The volume's root holds lost+found; initdb wants an empty directory.
            {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
        ],
        "ports": [{"name": "postgres", "containerPort": 5432, "protocol": "TCP"}],
        "readinessProbe": {"exec": {"command": ready}, "periodSeconds": 5},
        "livenessProbe": {"exec": {"command": ready}, "periodSeconds": 10, "failureThreshold": 6},
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, ns, "postgres"),
        "spec": {
            "selector": _labels("postgres"),
            "ports": [
                {"name": "postgres", "port": 5432, "targetPort": "postgres", "protocol": "TCP"}
            ],
        },
    }
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": options.storage}},
        },
    }
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(name, ns, "postgres"),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": _labels("postgres")},
            "template": {
                "metadata": {"labels": _labels("postgres")},
                "spec": {"containers": [container]},
            },
            "volumeClaimTemplates": [claim],
        },
    }
    return [service, statefulset]
