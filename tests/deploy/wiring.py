"""A checker of generated Kubernetes manifests: every reference names something that exists.

``wiring_problems(objects)`` lists what is wrong, so a test can assert the list is empty for
the generated manifests and non-empty for a deliberately broken copy (the checker itself is
tested to catch what it claims to).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["wiring_problems"]

_URL = re.compile(r"(?:http|postgresql)://(?:[^@/\s]*@)?([a-z0-9-]+):(\d+)")
_WORKLOADS = ("Deployment", "StatefulSet", "Job")


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """(workload name, pod labels, pod spec) of every workload."""
    out = []
    for obj in objects:
        if obj["kind"] in _WORKLOADS:
            template = obj["spec"]["template"]
            out.append((obj["metadata"]["name"], template["metadata"]["labels"], template["spec"]))
    return out


def _container_ports(pod: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}


def wiring_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Return every broken reference in ``objects`` (all manifests of one deployment)."""
    problems: list[str] = []
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    pods = _pods(objects)
    # A Service port must reach a named container port of a pod its selector picks.
    service_ports: dict[tuple[str, int], bool] = {}
    for name, service in services.items():
        selector = service["spec"]["selector"]
        chosen = [p for _, labels, p in pods if selector.items() <= labels.items()]
        if not chosen:
            problems.append(f"Service {name} selects no pod")
        for port in service["spec"]["ports"]:
            reached = all(port["targetPort"] in _container_ports(p) for p in chosen)
            if not reached:
                problems.append(f"Service {name} port {port['port']} targets a missing port")
            service_ports[(name, port["port"])] = bool(chosen) and reached
    texts: list[tuple[str, str]] = []
    for workload, _, pod in pods:
        ports = _container_ports(pod)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for volume in volumes.values():
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in claims:
                problems.append(f"{workload} mounts the missing claim {claim}")
        templates = {
            t["metadata"]["name"]
            for o in objects
            if o["metadata"]["name"] == workload
            for t in o["spec"].get("volumeClaimTemplates", [])
        }
        for container in pod["containers"]:
            where = f"{workload}/{container['name']}"
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in volumes and mount["name"] not in templates:
                    problems.append(f"{where} mounts the undeclared volume {mount['name']}")
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = container.get(kind, {}).get("httpGet", {}).get("port")
                if port is not None and port not in ports:
                    problems.append(f"{where} {kind} calls port {port}, which it does not expose")
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    data = secrets.get(ref["name"], {}).get("stringData", {})
                    if ref["key"] not in data:
                        problems.append(f"{where} reads the missing secret key {ref['key']}")
                        continue
                    texts.append((f"{where} ${env['name']}", data[ref["key"]]))
                elif "value" in env:
                    texts.append((f"{where} ${env['name']}", env["value"]))
            texts += [(f"{where} args", arg) for arg in container.get("args", [])]
    for where, text in texts:
        for host, port in _URL.findall(text):
            if not service_ports.get((host, int(port))):
                problems.append(f"{where} points at {host}:{port}, which no Service serves")
    return problems
