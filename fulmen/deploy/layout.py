"""What a deployment runs, independent of where: the services, their commands, ports and secrets.

``plan_services(config, options, ...)`` turns a training config and the deploy options into a
list of :class:`ServiceSpec`: the store service (``fulmen store serve`` on PostgreSQL), the
inference engine (``fulmen serve``), the gateway, the runners and the trainer, each with the
real flags and ``FULMEN_*`` variables its command reads. The Docker and Kubernetes renderers
only translate these into their own formats, so both deployments start the same commands.

Weight-training algorithms (``grpo``, ``sft``) hot-load each new adapter into the engine the
trainer starts itself, by file path; that engine is not reachable from other pods, so for
those plans the trainer runs its own engine, gateway and runner, and the runner fleet is
scaled to zero (runners pointed at the shared engine would request adapters it never
received). Prompt-only plans (``apo``, ``demos``) use the shared engine through
``engine.kind: endpoint``, and the fleet runs their rollouts.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from fulmen.agent.spec import AgentSpec, runner_agent_args
from fulmen.algorithms.registry import prompt_only
from fulmen.errors import ConfigError
from fulmen.trainer.config import TrainConfig
from fulmen.version import __version__

__all__ = [
    "APP_DIR",
    "CACHE_DIR",
    "RUN_DIR",
    "DeployOptions",
    "DeploySecrets",
    "ServiceSpec",
    "plan_services",
    "trains_weights",
]

#: Where the build context (the config's project) lives inside the image.
APP_DIR = PurePosixPath("/app")
#: The trainer's run directory inside its container (a volume, so a restarted trainer resumes).
RUN_DIR = PurePosixPath("/var/lib/fulmen/run")
#: The model cache inside containers (``$FULMEN_CACHE_DIR``).
CACHE_DIR = PurePosixPath("/var/cache/fulmen/models")


class DeployOptions(BaseModel):
    """How to deploy a training config; every value has a flag in ``fulmen deploy``.

    Attributes:
        image: the image every fulmen service runs (built from the generated Dockerfile).
        database_url: an external PostgreSQL (``postgresql://user:password@host/db``) for the
            store; ``None`` deploys PostgreSQL next to the services.
        runners: runner replicas; ``None`` means 2 for prompt-only plans and 0 for plans that
            train weights (see the module docstring).
        engine: ``builtin`` or ``vllm``; ``None`` takes the config's ``engine.kind``.
        gpus: GPUs requested by each pod that runs vLLM (the engine, and the trainer when it
            trains weights on vLLM).
        namespace: the Kubernetes namespace.
        store_port / gateway_port / engine_port: the ports the services listen on.
        fulmen_requirement: what ``pip install`` installs fulmen from in the image (a
            requirement, or a wheel path inside the build context with its extras).
        vllm_requirement: what the image installs vLLM from (only with the vLLM engine; into
            its own virtual environment, as ``$FULMEN_VLLM_PYTHON``).
        python_image: the base image.
        postgres_image: the image of the in-cluster PostgreSQL.
        storage: the size of the PostgreSQL and trainer volumes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(default=f"fulmen:{__version__}", min_length=1)
    database_url: str | None = None
    runners: int | None = Field(default=None, ge=0)
    engine: Literal["builtin", "vllm"] | None = None
    gpus: int = Field(default=1, ge=0)
    namespace: str = Field(default="fulmen", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    store_port: int = Field(default=4747, ge=1, le=65535)
    gateway_port: int = Field(default=8100, ge=1, le=65535)
    engine_port: int = Field(default=8000, ge=1, le=65535)
    fulmen_requirement: str = f"fulmen[train,postgres,examples]=={__version__}"
    vllm_requirement: str = "vllm==0.32.0"
    python_image: str = "python:3.11-slim-bookworm"
    postgres_image: str = "postgres:15-bookworm"
    storage: str = Field(default="10Gi", pattern=r"^[0-9]+(Mi|Gi|Ti)$")


@dataclass(frozen=True)
class DeploySecrets:
    """The secret values of one deployment, by the key they have in the Secret / ``.env``.

    ``store-token`` (``$FULMEN_STORE_TOKEN``), ``gateway-token`` (``$FULMEN_GATEWAY_TOKEN``),
    ``database-url`` (``$FULMEN_STORE_DB`` of the store service) and, with the in-cluster
    database, ``postgres-password``.
    """

    values: Mapping[str, str]

    @classmethod
    def create(
        cls,
        options: DeployOptions,
        *,
        store_token: str | None,
        gateway_token: str | None,
        postgres_host: str,
    ) -> DeploySecrets:
        """Take the given tokens (fresh random ones when ``None``) and build the database URL."""
        values = {
            "store-token": store_token or secrets.token_hex(16),
            "gateway-token": gateway_token or secrets.token_hex(16),
        }
        if options.database_url is not None:
            values["database-url"] = options.database_url
        else:
            password = secrets.token_hex(16)
            values["postgres-password"] = password
            values["database-url"] = (
                f"postgresql://fulmen:{quote(password, safe='')}@{postgres_host}:5432/fulmen"
            )
        return cls(values)


@dataclass(frozen=True)
class ServiceSpec:
    """One fulmen service: the ``fulmen`` arguments it runs and what it needs around it.

    Attributes:
        name: short name (``store``, ``engine``, ``gateway``, ``runner``, ``trainer``).
        args: the arguments after ``fulmen``.
        port: the port it listens on (``None``: it serves nothing).
        health_path: the HTTP path its probes call (``None``: no HTTP endpoint).
        env: plain environment variables.
        secret_env: environment variables taken from the secret, by secret key.
        replicas: how many copies run.
        gpus: GPUs each copy requests.
        is_job: a run to completion (the trainer) rather than a long-running service.
        needs: the services it talks to.
        volume: a path that must outlive the container (the trainer's run directory).
    """

    name: str
    args: tuple[str, ...]
    port: int | None = None
    health_path: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    replicas: int = 1
    gpus: int = 0
    is_job: bool = False
    needs: tuple[str, ...] = ()
    volume: PurePosixPath | None = None


def trains_weights(config: TrainConfig) -> bool:
    """Return True when some stage of ``config`` updates model weights (not only prompts)."""
    return any(stage.name not in prompt_only() for stage in config.plan())


def plan_services(
    config: TrainConfig,
    options: DeployOptions,
    *,
    config_file: Path,
    context: Path,
    host: Callable[[str], str],
    overrides: Sequence[str] = (),
) -> list[ServiceSpec]:
    """Return the fulmen services of a deployment of ``config``, in start order.

    Args:
        config: the training config, already validated (``load_config(config_file)``).
        options: the deploy options.
        config_file: the config file on this machine.
        context: the directory copied into the image at ``APP_DIR`` (the build context); the
            config, its ``python_path`` entries and its ``.jsonl`` data must lie inside it.
        host: the network name under which a service (by short name) is reached.
        overrides: the ``--set key=value`` overrides ``config`` was loaded with; the trainer
            gets them too.
    """
    in_image = _ImagePaths(context)
    config_path = in_image(config_file, "the config file")
    model = _model_argument(config.model, in_image)
    engine_kind = options.engine or _engine_kind(config)
    weights = trains_weights(config)
    runners = _runner_count(options.runners, weights)
    store_url = f"http://{host('store')}:{options.store_port}"
    engine_url = f"http://{host('engine')}:{options.engine_port}/v1"
    gateway_url = f"http://{host('gateway')}:{options.gateway_port}"
    store_token = {"FULMEN_STORE_TOKEN": "store-token"}
    cache = {"FULMEN_CACHE_DIR": str(CACHE_DIR)}
    is_vllm = engine_kind == "vllm"
    runner = ["runner", "--store", store_url, *_agent_args(config, in_image)]
    runner += ["--gateway", gateway_url]
    runner += config.rollouts.runner_flags()
    gateway = ["gateway", "--store", store_url, "--upstream", engine_url]
    gateway += ["--host", "0.0.0.0", "--port", str(options.gateway_port)]
    train = _train_args(config, config_path, store_url, engine_url, engine_kind, weights)
    train += [arg for override in overrides for arg in ("--set", override)]
    if model != config.model:
        train += ["--set", f"model={model}"]
    python_path = {"PYTHONPATH": _python_path(config, in_image, config_path)}
    return [
        ServiceSpec(
            name="store",
            args=("store", "serve", "--host", "0.0.0.0", "--port", str(options.store_port)),
            port=options.store_port,
            health_path="/health",
            secret_env={**store_token, "FULMEN_STORE_DB": "database-url"},
            needs=("postgres",) if options.database_url is None else (),
        ),
        ServiceSpec(
            name="engine",
            args=_serve_args(config, options, model, engine_kind),
            port=options.engine_port,
            health_path="/health",
            env=cache,
            gpus=options.gpus if is_vllm else 0,
        ),
        ServiceSpec(
            name="gateway",
            args=tuple(gateway),
            port=options.gateway_port,
            health_path="/healthz",
            secret_env={**store_token, "FULMEN_GATEWAY_TOKEN": "gateway-token"},
            needs=("store", "engine"),
        ),
        ServiceSpec(
            name="runner",
            args=tuple(runner),
            env=python_path,
            secret_env={**store_token, "FULMEN_GATEWAY_TOKEN": "gateway-token"},
            replicas=runners,
            needs=("store", "gateway"),
        ),
        ServiceSpec(
            name="trainer",
            args=tuple(train),
            env={**cache, **python_path},
            secret_env=store_token,
            gpus=options.gpus if is_vllm and weights else 0,
            is_job=True,
            needs=("store",) if weights else ("store", "gateway"),
            volume=RUN_DIR,
        ),
    ]


def _serve_args(
    config: TrainConfig, options: DeployOptions, model: str, engine_kind: str
) -> tuple[str, ...]:
    """``fulmen serve`` for the engine service, listening on every address of its pod."""
    serve = ["serve", "--model", model, "--engine", engine_kind]
    serve += ["--host", "0.0.0.0", "--port", str(options.engine_port), "--allow-remote"]
    serve += ["--max-lora-rank", str(config.engine.max_lora_rank)]
    if engine_kind == "builtin":
        serve += ["--max-batch", str(config.engine.max_batch)]
        serve += ["--threads", str(config.engine.threads)]
        serve += config.engine.builtin_serve_flags()
    else:
        serve += ["--dtype", config.engine.dtype]
    return tuple(serve)


def _python_path(config: TrainConfig, in_image: _ImagePaths, config_path: PurePosixPath) -> str:
    """``$PYTHONPATH`` in the image; also checks the config's data files are in the context."""
    for source in (config.data.train, config.data.val):
        if source is not None and source.endswith(".jsonl"):
            in_image(Path(source), "data file")
    paths = [in_image(p, "python_path entry") for p in config.python_path]
    return ":".join(str(p) for p in paths or [config_path.parent])


def _engine_kind(config: TrainConfig) -> Literal["builtin", "vllm"]:
    kind = config.engine.kind
    return "builtin" if kind == "endpoint" else kind


def _runner_count(requested: int | None, weights: bool) -> int:
    if requested is None:
        return 0 if weights else 2
    if weights and requested > 0:
        raise ConfigError(
            f"--runners {requested}: this config trains weights, and the trainer hot-loads each "
            "new adapter into the engine it starts itself, which runners in other pods cannot "
            "reach; its own runner runs the rollouts. Use --runners 0 (the default here), or a "
            "prompt-only algorithm (apo, demos) to use a runner fleet"
        )
    return requested


def _train_args(
    config: TrainConfig,
    config_path: PurePosixPath,
    store_url: str,
    engine_url: str,
    engine_kind: str,
    weights: bool,
) -> list[str]:
    args = ["train", str(config_path), "--store", store_url, "--set", f"run_dir={RUN_DIR}"]
    if not weights:
        args += ["--set", f"engine={{kind: endpoint, url: '{engine_url}'}}"]
    elif config.engine.kind != engine_kind:
        # the other kind's own options would be refused; the dtype applies to both
        args += ["--set", f"engine={{kind: {engine_kind}, dtype: {config.engine.dtype}}}"]
    return args


class _ImagePaths:
    """Maps paths on this machine to where the build context puts them in the image."""

    def __init__(self, context: Path) -> None:
        self._context = context.resolve()

    def __call__(self, path: Path, what: str) -> PurePosixPath:
        resolved = path.resolve()
        if not resolved.is_relative_to(self._context):
            raise ConfigError(
                f"{what} {path} is outside the build context {self._context}: the image holds "
                "only the context; pass --context with a directory that contains it"
            )
        return APP_DIR.joinpath(*resolved.relative_to(self._context).parts)


def _agent_args(config: TrainConfig, in_image: _ImagePaths) -> list[str]:
    """Return the runner's agent options, an agent spec's files as the image has them."""
    agent = config.agent
    if agent is None:
        return []
    if isinstance(agent, AgentSpec):
        agent = agent.in_image(in_image)
    return runner_agent_args(agent)


def _model_argument(model: str, in_image: _ImagePaths) -> str:
    """Return the model as the image names it: a fulmen model name, or a path in the image."""
    if Path(model).is_dir():
        return str(in_image(Path(model), "model directory"))
    return model
