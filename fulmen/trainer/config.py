"""``TrainConfig``: everything ``fulmen train CONFIG.yaml`` and ``Trainer`` need, validated once.

An option that has no effect in the chosen setup is an error, not silently ignored: an
``engine.url`` with the built-in engine, LoRA settings with full fine-tuning, validation settings
without validation data, a KL estimator without a KL coefficient, and so on.
"""

from __future__ import annotations

import difflib
import functools
import operator
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fulmen.agent.kinds import DEFAULT_KIND, agent_kinds, spec_union
from fulmen.agent.rollouts import RolloutSettings
from fulmen.agent.spec import AgentSpec
from fulmen.algorithms.registry import (
    DEFAULT,
    algorithm,
    available,
    names,
    offline,
    prompt_only,
    registered,
)
from fulmen.algorithms.section import AlgorithmSection
from fulmen.algorithms.source import StoreFilter
from fulmen.cluster.config import ClusterConfig
from fulmen.config_file import ConfigFile
from fulmen.engines.config import EngineConfig
from fulmen.environments.config import EnvironmentConfig, apply_environment
from fulmen.errors import ConfigError
from fulmen.rewards.config import RewardConfig
from fulmen.store.urls import is_service_url
from fulmen.trainer.overrides import apply_override
from fulmen.trainer.sinks.config import MetricsConfig, require_sink
from fulmen.transitions.trajectory import TransitionOptions

__all__ = [
    "AlgorithmConfig",
    "DataConfig",
    "RUN_STORE_FILE",
    "TrainConfig",
    "ValidationConfig",
    "load_config",
]

#: the file in ``run_dir`` a run records in when no ``store_url`` is set
RUN_STORE_FILE = "store.db"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """Where tasks come from, or, for offline training, the store whose rollouts are learned.

    Each task source is ``"module:callable"`` (called with no arguments, returns a list of JSON
    tasks) or a path to a ``.jsonl`` file (one task per line).

    Attributes:
        train: the training tasks.
        val: held-out tasks for validation (optional).
        task_id_key: the key of a task dict that names it (rollouts of one task form a GRPO
            group); tasks without it are numbered.
        from_store: instead of tasks, learn from the finished rollouts already in this store
            (kept production traffic with delayed rewards, an earlier run): no agent runs;
            ``algorithm: sft`` fine-tunes on the rewarded ones, ``algorithm: grpo`` takes
            off-policy steps on them, ``algorithm: dpo`` prefers each task's best over its
            worst (``docs/offline.md``). Its token, if it needs one, is not
            supported: use a SQLite/PostgreSQL URL or an open ``http://`` store.
        filter: which of its rollouts (``fulmen.algorithms.source.StoreFilter``: mode,
            min_reward, ended_after/ended_before, agent, task_id, max_rollouts, ...).
    """

    train: str | None = None
    val: str | None = None
    task_id_key: str = "id"
    from_store: str | None = Field(default=None, min_length=1)
    filter: StoreFilter | None = None

    @model_validator(mode="before")
    @classmethod
    def _task_files_beside_the_config(cls, data: Any, info: ValidationInfo) -> Any:
        found = ConfigFile.section(data, info)
        if found is None:
            return data
        file, out = found
        for key in ("train", "val"):
            value = out.get(key)
            if isinstance(value, str) and value.endswith(".jsonl"):
                out[key] = file.resolve(f"data.{key}", value)
        return out

    @model_validator(mode="after")
    def _tasks_or_store(self) -> DataConfig:
        if self.from_store is None:
            if self.train is None:
                raise ValueError("data needs train (the training tasks) or from_store")
            if self.filter is not None:
                raise ValueError("data.filter has no effect without data.from_store")
            return self
        dead = sorted({"train", "val", "task_id_key"} & self.model_fields_set)
        if dead:
            raise ValueError(
                f"data.{', data.'.join(dead)} has no effect with data.from_store (offline "
                "training learns from the store's rollouts and runs no tasks)"
            )
        return self


class ValidationConfig(_Strict):
    """When and on what to validate.

    Attributes:
        every: validate before training, then every this many steps, and after the last step.
        max_tasks: validate on at most this many validation tasks (``None``: all).
        keep_best: at the end of the whole run (after the last stage's closing validation),
            serve the version with the best validation score (its mean reward over the
            validation tasks, a failed rollout counted as ``failed_rollouts`` says) instead
            of the last one when an earlier version, the model before training included,
            scored higher (ties keep the later one): the engine serves it again, routed as
            the stage that validated it routed its calls, the last resources version names
            it and the end-of-run summary says so (``fulmen.trainer.best``). ``false``: the
            run ends serving its last version. A last validation more than two standard
            errors below the one before training is reported loudly either way.
        failed_rollouts: how ``keep_best`` and the end-of-run change before -> after count a
            validation rollout that failed or gave no reward: ``score_zero`` (default) as
            reward 0, so every version is scored on every validation task and one that fails
            tasks cannot outrank one that solves them; ``leave_out`` leaves it out: a
            version's score is the mean over the tasks it scored, and the change is paired
            over the tasks scored both times. ``val/reward_mean`` always leaves them out
            (they are counted in ``val/failed``).
    """

    every: int = Field(default=5, ge=1)
    max_tasks: int | None = Field(default=None, ge=1)
    keep_best: bool = True
    failed_rollouts: Literal["score_zero", "leave_out"] = "score_zero"


def _algorithm_union() -> Any:
    """Return every registered algorithm's config model as one union selected by ``name``."""
    models = tuple(row.config_model() for row in registered())
    return Annotated[functools.reduce(operator.or_, models), Field(discriminator="name")]


if TYPE_CHECKING:
    AlgorithmConfig: TypeAlias = AlgorithmSection
    AgentConfig: TypeAlias = AgentSpec
else:
    #: What ``agent:`` holds as a mapping, selected by ``kind`` (``command`` when it names
    #: none): the spec of every kind ``fulmen.agent.kinds`` registers.
    AgentConfig = spec_union()
    #: What ``algorithm:`` (or each entry of ``stages:``) holds, selected by ``name``: the
    #: config model of every algorithm ``fulmen.algorithms.registry`` registers.
    AlgorithmConfig = _algorithm_union()


def _default_algorithm() -> AlgorithmSection:
    return algorithm(DEFAULT).config_model().model_validate({})


class TrainConfig(_Strict):
    """A whole training run.

    Attributes:
        model: a model name fulmen can build or load offline (``tiny``, ``gemma-3-270m``) or a
            local Hugging Face directory.
        agent: the agent as ``"module:object"`` (a ``@fulmen.rollout`` function or an
            ``Agent``), or a mapping whose ``kind`` names an agent kind: by default a program
            run per rollout (``{command: [...], ...}``, see
            ``fulmen.agent.command.CommandAgentConfig`` and ``docs/command-agents.md``), or a
            kind an installed package adds (``fulmen.agent.kinds``); left out only with
            ``data.from_store`` (offline training runs none).
        run_dir: where the store, checkpoints, adapters and metrics go; a second start with
            the same directory resumes its run, and one with another agent, model or data is
            refused (``fulmen.trainer.identity``). Default from a config file (``load_config``):
            ``runs/<config file name without .yaml>`` beside the file; built in Python:
            ``runs/fulmen`` in the working directory.
        store_url: an external store to use instead of ``RUN_DIR/store.db``: a ``fulmen store
            serve`` (``http://host:port``, so runners on other machines can claim the rollouts)
            or ``postgresql://...``. Its token is never in the config: ``fulmen train --token``
            or ``$FULMEN_STORE_TOKEN``. Rollout ids start with the run's id (``state.json``),
            so runs sharing a store never reuse each other's; on resume a run cancels the
            rollouts its earlier start left unfinished there, and only those.
        seed: seeds task sampling, the trainer and the model's samples in every rollout the
            trainer runs (``fulmen.types.sampling_seed``): the same config and seed sample the
            same tokens in another run.
        data / engine / rollouts / validation: see their classes.
        algorithm: what improves the agent, selected by ``name`` (``grpo`` when omitted; see
            ``AlgorithmConfig``); ``algorithm: sft`` is short for ``algorithm: {name: sft}``.
        stages: instead of ``algorithm``, a list of algorithm configs run one after the other,
            each starting from the resources (prompt versions, adapter) the previous one
            published (``docs/stages.md``).
        reward: score every rollout the run executes on a rubric instead of the reward the
            agent emits: criteria a judge model scores, ranks within a group, or a Python
            function checks (``fulmen.rewards.config.RewardConfig``, ``docs/rewards.md``).
        success_threshold: a rollout whose reward reaches this counts as a task success.
        tensorboard: also write TensorBoard event files (short for ``metrics: {sinks:
            [tensorboard]}``).
        metrics: tracking tools that get every step's metrics too: TensorBoard, Weights &
            Biases, MLflow (``fulmen.trainer.sinks.config.MetricsConfig``, ``docs/runs.md``).
        cluster: run the store service, runners and engine replicas as actors on a Ray
            cluster (``fulmen.cluster.config.ClusterConfig``, ``docs/cluster.md``); left out,
            everything runs on this machine.
        python_path: directories put at the front of ``sys.path``, in their order (the first
            listed wins), before importing the agent and data (relative to the config file).
        environment: tasks, held-out split, agent and reward from an environment library
            (Reasoning Gym, verifiers, OpenEnv, TextArena; ``docs/environments.md``): sets
            ``data`` and, unless given, ``agent``.
    """

    model: str
    agent: str | AgentConfig | None = None
    run_dir: Path = Path("runs/fulmen")
    store_url: str | None = Field(default=None, min_length=1)
    seed: int = 0
    data: DataConfig
    engine: EngineConfig = Field(default_factory=EngineConfig)
    rollouts: RolloutSettings = Field(default_factory=RolloutSettings)
    validation: ValidationConfig | None = None
    algorithm: AlgorithmConfig = Field(default_factory=_default_algorithm)
    stages: list[AlgorithmConfig] | None = Field(default=None, min_length=1)
    reward: RewardConfig | None = None
    success_threshold: float = 1.0
    tensorboard: bool = False
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    python_path: list[Path] = Field(default_factory=list)
    cluster: ClusterConfig | None = None
    environment: EnvironmentConfig | None = None

    @field_validator("tensorboard")
    @classmethod
    def _tensorboard_installed(cls, value: bool) -> bool:
        if value:  # refused now, as metrics.sinks would be, not when the run starts
            require_sink("tensorboard")
        return value

    @model_validator(mode="before")
    @classmethod
    def _paths_beside_the_config(cls, data: Any, info: ValidationInfo) -> Any:
        found = ConfigFile.section(data, info)
        if found is None:
            return data
        file, out = found
        # Without run_dir, a folder named after the config file beside it: two configs in one
        # folder never resume each other's run.
        run_dir = out.setdefault("run_dir", str(file.folder / "runs" / file.stem))
        if isinstance(run_dir, str | Path):
            out["run_dir"] = file.resolve("run_dir", run_dir)
        paths = out.get("python_path")
        if isinstance(paths, list):
            paths = cast("list[Any]", paths)
            out["python_path"] = [
                file.resolve("python_path", p) if isinstance(p, str | Path) else p for p in paths
            ]
        return out

    @model_validator(mode="before")
    @classmethod
    def _named_algorithms(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        raw = cast("dict[str, Any]", data)
        out = {k: v for k, v in raw.items() if not (k == "algorithm" and v is None)}
        if out.get("stages") is not None and "algorithm" in out:
            raise ValueError("set either algorithm or stages, not both")
        if out.get("stages") is None:
            out["algorithm"] = _algorithm_section(out.get("algorithm", {}), "algorithm")
        if isinstance(out.get("stages"), list):
            stages = cast("list[Any]", out["stages"])
            out["stages"] = [_algorithm_section(s, f"stages.{i}") for i, s in enumerate(stages)]
        out = apply_environment(out)  # its agent and data (fulmen.environments.config)
        _give_offline_source(out)
        from fulmen.algorithms.behaviour import align_behaviour_temperature

        return align_behaviour_temperature(out)

    @model_validator(mode="after")
    def _no_dead_options(self) -> TrainConfig:
        if self.validation is not None and self.data.val is None:
            raise ValueError("validation is configured but data.val is not set")
        prompts = prompt_only()
        weights = [s.name for s in self.plan() if s.name not in prompts]
        if self.engine.kind == "endpoint" and weights:
            raise ValueError(
                f"engine.kind 'endpoint' cannot take new weights ({', '.join(weights)}); use it "
                "with `fulmen dev` or algorithms that change only prompts "
                f"({', '.join(sorted(prompts))})"
            )
        full = [s.name for s in self.plan() if s.trains_full_weights()]
        if self.engine.kind == "vllm" and full and self.cluster is not None:
            raise ValueError(
                f"finetune 'full' ({', '.join(full)}) with engine.kind 'vllm' reloads weights "
                "through the vLLM server fulmen starts itself; a cluster's vLLM replicas take new "
                "policies only as LoRA adapters: use finetune: lora, engine.kind: builtin, or no "
                "cluster"
            )
        return self

    @model_validator(mode="after")
    def _cluster_options_take_effect(self) -> TrainConfig:
        cluster = self.cluster
        if cluster is None:
            return self
        if self.data.from_store is not None:
            raise ValueError(
                "cluster has no effect with data.from_store: offline training runs no runners"
            )
        dead = cluster.engine_options_set()
        if self.engine.kind == "endpoint" and dead:
            raise ValueError(
                f"cluster.{', cluster.'.join(dead)} has no effect with engine.kind 'endpoint' "
                "(no engine is started)"
            )
        if "threads" in self.engine.model_fields_set:
            raise ValueError(
                "engine.threads has no effect with cluster: each engine replica computes with "
                "cluster.engine_cpus threads"
            )
        if is_service_url(self.store_url or "") and "store_cpus" in cluster.model_fields_set:
            raise ValueError(
                "cluster.store_cpus has no effect with an http:// store_url (that store "
                "service is used as it is; none is started on Ray)"
            )
        return self

    @field_validator("agent", mode="before")
    @classmethod
    def _agent_kind(cls, agent: object) -> object:
        """Refuse a mapping whose ``kind`` no agent kind has, naming the kinds there are."""
        if isinstance(agent, dict):
            kind = cast("dict[str, Any]", agent).get("kind", DEFAULT_KIND)
            if kind not in agent_kinds():
                available = ", ".join(agent_kinds())
                raise ValueError(
                    f"agent.kind {kind!r}: no such agent kind (available: {available})"
                )
        return agent

    @field_validator("agent")
    @classmethod
    def _agent_named(cls, agent: str | AgentSpec | None) -> object:
        if isinstance(agent, str) and not agent.strip():
            raise ValueError("agent is empty: give 'module:object' or {command: [...]}")
        return agent

    @model_validator(mode="after")
    def _offline_has_no_agent(self) -> TrainConfig:
        if self.data.from_store is None:
            if self.agent is None:
                raise ValueError("agent is required (or data.from_store, to train offline)")
            return self
        if self.reward is not None:
            raise ValueError(
                "reward has no effect with data.from_store: offline training runs no rollouts "
                "to score"
            )
        if self.agent is not None:
            raise ValueError(
                "agent has no effect with data.from_store: offline training learns from the "
                "store's recorded rollouts and runs no agent (evaluate it afterwards)"
            )
        return self

    def run_store_url(self) -> str:
        """Return the store this run records in: ``store_url``, else ``RUN_DIR/store.db``."""
        return self.store_url or f"sqlite:///{self.run_dir / RUN_STORE_FILE}"

    def plan(self) -> list[AlgorithmConfig]:
        """List the algorithms this run executes, in order: ``stages``, or ``[algorithm]``."""
        return list(self.stages) if self.stages is not None else [self.algorithm]

    def transition_options(self) -> TransitionOptions:
        """Build the ``TransitionOptions`` of the first stage that has them.

        A plan without a ``transitions`` section gets the defaults.
        """
        for stage in self.plan():
            options = stage.transition_options()
            if options is not None:
                return options
        return TransitionOptions()


def _give_offline_source(raw: dict[str, Any]) -> None:
    """Hand ``data.from_store`` and ``data.filter`` to every algorithm section as ``source``.

    Each algorithm then reads the store the way its own ``source`` option would; one that
    cannot learn from recorded rollouts, or that names its own source too, is refused.
    """
    data = raw.get("data")
    if not isinstance(data, dict) or cast("dict[str, Any]", data).get("from_store") is None:
        return
    data = cast("dict[str, Any]", data)
    source = {"store": data["from_store"], "filter": data.get("filter") or {}}
    if raw.get("stages") is not None:
        places = list(enumerate(cast("list[Any]", raw["stages"])))
    else:
        places = [(None, raw.get("algorithm"))]
    for index, section in places:
        where = "algorithm" if index is None else f"stages.{index}"
        if not isinstance(section, dict):
            continue  # the model's own validation reports it
        section = cast("dict[str, Any]", section)
        name = section.get("name")
        if name not in offline():
            raise ValueError(
                f"{where}.name {name!r} cannot learn from data.from_store (offline training "
                f"supports: {', '.join(offline())})"
            )
        if section.get("source") is not None:
            raise ValueError(f"set data.from_store or {where}.source, not both")
        section["source"] = source


def _algorithm_section(value: Any, where: str) -> Any:
    """Expand ``sft`` to ``{name: sft}`` and default the name (``registry.DEFAULT``).

    A name no algorithm has is refused with the names there are
    (``fulmen.algorithms.registry``).
    """
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        return value  # the model's own validation reports it
    section = dict(cast("dict[str, Any]", value))
    name = section.setdefault("name", DEFAULT)
    if name not in names():
        raise ValueError(f"{where}.name {name!r}: no such algorithm (available: {available()})")
    return section


def load_config(path: str | Path, *, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML config file; relative paths in it are relative to the file's directory.

    ``overrides`` are ``"dotted.key=value"`` strings (value parsed as YAML) applied after the
    file is read, e.g. ``"algorithm.steps=3"``; a number picks a list item
    (``"stages.1.steps=3"``); a relative path given there is relative to the current directory.
    Each section resolves its own paths as it validates (``fulmen.config_file``). Errors name
    the bad key.
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_problem(path, text, exc)) from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must be a mapping of options")
    for override in overrides:
        apply_override(raw, override)
    given = frozenset(override.partition("=")[0] for override in overrides)
    file = ConfigFile(folder=path.parent.resolve(), stem=path.stem, given=given)
    try:
        return TrainConfig.model_validate(raw, context=file)
    except ValidationError as exc:
        problems = "; ".join(_problem(err["loc"], err["type"], err["msg"]) for err in exc.errors())
        raise ConfigError(f"invalid config {path}: {problems}") from exc


def _yaml_problem(path: Path, text: str, exc: Exception) -> str:
    """Say where in the config file its YAML breaks: ``FILE, line N, column M: ...``.

    PyYAML names the text it was given (``<unicode string>``), not the file; its marks count
    from 0.
    """
    import yaml

    mark = exc.problem_mark if isinstance(exc, yaml.MarkedYAMLError) else None
    if not isinstance(exc, yaml.MarkedYAMLError) or mark is None:
        return f"cannot read config {path}: not valid YAML ({exc})"
    what = exc.problem or "not valid YAML"
    if exc.context:
        what = f"{exc.context}, {what}"
        start = exc.context_mark
        if start is not None and start.line != mark.line:  # an unclosed [ or { further up
            what = f"{exc.context} (from line {start.line + 1}), {exc.problem}"
    lines = text.splitlines()
    shown = lines[mark.line].strip() if mark.line < len(lines) else ""
    return f"cannot read config {path}, line {mark.line + 1}, column {mark.column + 1}: {what}" + (
        f": {shown!r}" if shown else ""
    )


def _problem(loc: Sequence[int | str], kind: str, message: str) -> str:
    """One validation error as ``key.path: message``, with a suggestion for an unknown key.

    The path is the one written in the config: pydantic adds the algorithm's name after
    ``algorithm`` (and ``stages.N``), which is no key of the file. An unknown key names the
    closest option of its section (``did you mean algorithm.group_size?``), or lists them.
    """
    path = _config_path(loc)
    where = ".".join(str(p) for p in path) or "config"
    if kind != "extra_forbidden" or not path:
        return f"{where}: {message}"
    options = _options_at(loc)
    if not options:
        return f"{where}: {message}"
    close = difflib.get_close_matches(str(path[-1]), options, n=1, cutoff=0.6)
    if close:
        section = ".".join(str(p) for p in (*path[:-1], close[0]))
        return f"{where}: unknown option; did you mean {section}?"
    return f"{where}: unknown option (options here: {', '.join(sorted(options))})"


def _config_path(loc: Sequence[int | str]) -> list[int | str]:
    """``loc`` without the algorithm names pydantic's discriminated union inserts."""
    out: list[int | str] = []
    for index, part in enumerate(loc):
        previous = loc[index - 1] if index else None
        is_tag = part in names() and (
            previous == "algorithm"
            or (isinstance(previous, int) and index >= 2 and loc[index - 2] == "stages")
        )
        if not is_tag:
            out.append(part)
    return out


def _options_at(loc: Sequence[int | str]) -> list[str]:
    """Return the option names of the section holding the last key of ``loc`` (pydantic's)."""
    model: Any = TrainConfig
    parts = list(loc[:-1])
    index = 0
    while index < len(parts):
        fields = model.model_fields
        name = str(parts[index])
        info = fields.get(name) or next((f for f in fields.values() if f.alias == name), None)
        if info is None:
            return []
        model, index = _section_model(info.annotation, parts, index + 1)
        if model is None:
            return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _section_model(annotation: Any, parts: list[int | str], index: int) -> tuple[Any, int]:
    """Follow ``annotation`` (optional, list, discriminated union) to the model at ``parts``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _section_model(typing.get_args(annotation)[0], parts, index)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, index
    if origin is list and index < len(parts) and isinstance(parts[index], int):
        return _section_model(typing.get_args(annotation)[0], parts, index + 1)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _section_model(members[0], parts, index)
        for member in members:  # a discriminated union: the next part is the tag
            if (
                isinstance(member, type)
                and issubclass(member, BaseModel)
                and index < len(parts)
                and "name" in member.model_fields
                and member.model_fields["name"].default == parts[index]
            ):
                return member, index + 1
    return None, index
