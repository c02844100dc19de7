"""The fulmen ``TrainConfig`` an ``agl.Trainer`` call amounts to.

``build_config`` starts from the fulmen config file given (``config=``), or, without one,
from what the call says: a ``VERL`` config names the model (``actor_rollout_ref.model.path``)
and may name the run directory (``trainer.default_local_dir``); an ``LLM`` in
``initial_resources`` is the endpoint a driven algorithm or ``dev`` calls (``engine: {kind:
endpoint}``). Without a file the run directory is a fresh ``runs/agl-<time>``, so running a
script again starts again, as in 0.x (a fulmen run directory resumes); the config is written
there as ``agl-config.yaml``.

On top come the 0.x keywords (algorithm, ``n_runners``, ``store``, adapter) and what ``fit``
was given: the agent, the training tasks and validation tasks fill ``agent``, ``data.train``,
``data.val`` and ``validation`` when the file leaves them out, so a file naming only
``model`` and ``run_dir`` is enough.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.algorithms import APO, VERL
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.resources import LLM
from fulmen.types import PromptTemplate as FulmenPromptTemplate

if TYPE_CHECKING:
    from fulmen.compat.agentlightning.adapters import TraceAdapter
    from fulmen.compat.agentlightning.algorithm_base import Algorithm
    from fulmen.trainer.config import TrainConfig

__all__ = ["ConfigRequest", "build_config"]

logger = logging.getLogger(__name__)

# What the config records for tasks and agents that fit was given as objects.
FIT_TRAIN = "agl.Trainer.fit(train_dataset)"
FIT_VAL = "agl.Trainer.fit(val_dataset)"
DRIVEN_TASKS = "agl.Algorithm.run(): the algorithm enqueues its own tasks"


@dataclass
class ConfigRequest:
    """What an ``agl.Trainer`` call says, for ``build_config``.

    Attributes:
        path: the fulmen config file (``None``: build one).
        overrides: the user's ``key=value`` overrides (applied last: they win).
        algorithm: the 0.x algorithm (``None``: the config's).
        agent: the agent ``fit``/``dev`` got.
        train_tasks: how many training tasks ``fit`` got (``None``: none given).
        has_val: ``fit`` got validation tasks.
        n_runners: ``rollouts.concurrency``.
        store_url: the store facade's URL.
        initial_resources: 0.x's initial resources.
        adapter: the trace adapter (its ``agent_match``).
    """

    path: Path | None
    overrides: list[str] = field(default_factory=list[str])
    algorithm: Algorithm | None = None
    agent: Any = None
    train_tasks: int | None = None
    has_val: bool = False
    n_runners: int | None = None
    store_url: str | None = None
    initial_resources: dict[str, Any] = field(default_factory=dict[str, Any])
    adapter: TraceAdapter | None = None


def build_config(request: ConfigRequest) -> TrainConfig:
    """Return the ``TrainConfig`` of the request (see the module docstring)."""
    import yaml

    from fulmen.trainer.config import load_config

    path = request.path
    if path is not None:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            raw = {}  # load_config reports it
    else:
        raw = _generated(request)
        path = Path(raw["run_dir"]) / "agl-config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    raw = raw if isinstance(raw, dict) else {}
    sets = [*_algorithm_sets(request, raw), *_fit_sets(raw, request)]
    if request.n_runners is not None:
        sets.append(f"rollouts.concurrency={request.n_runners}")
    if request.store_url is not None:
        sets.append(f"store_url={json.dumps(request.store_url)}")
    return load_config(path, overrides=[*sets, *request.overrides])


def _generated(request: ConfigRequest) -> dict[str, Any]:
    """Return the config of a call without ``config=``: model, engine, a fresh run_dir."""
    algorithm = request.algorithm
    out: dict[str, Any] = {}
    llms = [r for r in request.initial_resources.values() if isinstance(r, LLM)]
    if isinstance(algorithm, VERL):
        model = algorithm.translation.overrides.get("model")
        if model is not None:
            out["model"] = model
        run_dir = algorithm.translation.overrides.get("run_dir")
        if run_dir is not None:
            out["run_dir"] = str(Path(run_dir).resolve())
    elif llms and (algorithm is None or algorithm.fulmen_section() is None):
        out["model"] = llms[0].model
        out["engine"] = {"kind": "endpoint", "url": llms[0].__dict__["endpoint"]}
    if "model" not in out:
        what = type(algorithm).__name__ if algorithm is not None else "no algorithm"
        raise NotSupported(
            f"agl.Trainer({what}) without config=",
            why="fulmen serves the model the agent calls and needs to know which: 0.x left "
            "that to the algorithm (VERL's model.path, an LLM in initial_resources)",
            instead="Trainer(..., config='config.yaml') naming model: (a local model, or with "
            "engine: {kind: endpoint, url: ...} a hosted one) and run_dir:",
        )
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 1_000_000:06d}"
    out.setdefault("run_dir", str((Path("runs") / f"agl-{stamp}").resolve()))
    return out


def _algorithm_sets(request: ConfigRequest, raw: dict[str, Any]) -> list[str]:
    """Return the overrides the 0.x algorithm and adapter stand for.

    A VERL key and the config file naming the same option differently (``model.path`` and
    ``model:``) is refused: either would be ignored without a word.
    """
    out: list[str] = []
    algorithm = request.algorithm
    if isinstance(algorithm, APO):
        section = algorithm.fulmen_section()
        names = [
            n for n, r in request.initial_resources.items() if isinstance(r, FulmenPromptTemplate)
        ]
        if names:
            section["prompt"] = names[0]
        if request.has_val:
            section["score_tasks"] = None  # candidates are scored on val_dataset, as in 0.x
        out.append(f"algorithm={json.dumps(section)}")
    elif isinstance(algorithm, VERL):
        out.append('algorithm.name="grpo"')
        out += [f"{k}={json.dumps(v)}" for k, v in _leaves(algorithm.fulmen_section())]
        for key, value in _leaves(algorithm.top_level(), ""):
            if key.startswith("validation.") and not request.has_val:
                continue  # VERL validated on val_files; without val_dataset there is none
            if key in ("model", "run_dir") and raw.get(key) is not None:
                if request.path is not None:  # a file of the user's, not the one built here
                    _agree(key, value, raw[key], request.path)
                continue
            out.append(f"{key}={json.dumps(value)}")
        translation = algorithm.translation
        steps = translation.steps_for(request.train_tasks) if request.train_tasks else None
        if steps is not None and "algorithm.steps" not in translation.overrides:
            out.append(f"algorithm.steps={steps}")
        logger.info("VERL config, as fulmen runs it:\n%s", algorithm.report())
    agents = request.adapter.agents() if request.adapter is not None else None
    trained = getattr(request.agent, "trained_agents", None)
    if agents is None and isinstance(trained, str):
        agents = agent_patterns(trained)
    driven = algorithm is not None and algorithm.fulmen_section() is None
    if agents is not None and not isinstance(algorithm, APO) and not driven:
        out.append(f"algorithm.transitions.agents={json.dumps(list(agents))}")
    return out


def _agree(key: str, verl: Any, written: Any, path: Path) -> None:
    """Refuse a VERL value that differs from the config file's value for the same option."""
    same = str(verl) == str(written)
    if key == "run_dir":
        same = (path.parent / str(written)).resolve() == Path(str(verl)).resolve()
    if not same:
        source = "actor_rollout_ref.model.path" if key == "model" else "trainer.default_local_dir"
        raise NotSupported(
            f"VERL {source}={verl!r} with {key}: {written!r} in {path}",
            why="the two name the same fulmen option differently, and one would be ignored",
            instead="remove one of them, or make them agree",
        )


def _fit_sets(raw: dict[str, Any], request: ConfigRequest) -> list[str]:
    """Fill ``agent``, ``data`` and ``validation`` from what ``fit`` was given."""
    out: list[str] = []
    if request.agent is not None and not raw.get("agent"):
        out.append(f"agent={json.dumps(_agent_spec(request.agent))}")
    found = raw.get("data")
    data: dict[str, Any] = found if isinstance(found, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    if data.get("from_store"):
        return out
    driven = request.algorithm is not None and request.algorithm.fulmen_section() is None
    if driven:
        dead = [key for key in ("algorithm", "stages") if raw.get(key) is not None]
        if dead:
            raise NotSupported(
                f"{dead[0]}: in the fulmen config with agl.Trainer("
                f"algorithm={type(request.algorithm).__name__}(...))",
                why="the algorithm's own run() is what runs; the config's would have no effect",
                instead=f"leave {dead[0]}: out of the config",
            )
        # The config's algorithm never runs; a prompt-only one keeps an endpoint engine valid.
        out.append('algorithm={"name": "apo"}')
    if not data.get("train"):
        if driven:
            out.append(f"data.train={json.dumps(DRIVEN_TASKS)}")
        elif request.train_tasks is not None:
            out.append(f"data.train={json.dumps(FIT_TRAIN)}")
    if request.has_val and not driven:
        if not data.get("val"):
            out.append(f"data.val={json.dumps(FIT_VAL)}")
        if raw.get("validation") is None:
            out.append("validation={}")
    return out


def _agent_spec(agent: Any) -> str:
    """Return ``module:name`` of the agent object (what the run records as its agent)."""
    module = getattr(agent, "__module__", None) or type(agent).__module__
    name = getattr(agent, "__qualname__", None)
    if not isinstance(name, str):
        name = type(agent).__qualname__
    return f"{module}:{name}"


def _leaves(section: dict[str, Any], prefix: str = "algorithm.") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in section.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{prefix}{key}.")  # pyright: ignore[reportUnknownArgumentType]
        else:
            out.append((f"{prefix}{key}", value))
    return out
