"""``agl.Trainer``: 0.x's ``Trainer(...).fit`` / ``.dev`` with its keyword names, on fulmen.

fulmen needs what 0.x left to its algorithm's own config: which model to serve and where the
run lives. They come from a fulmen config file (``config=``, with ``overrides=`` as
``fulmen train --set``); everything 0.x's keywords say is laid over it:

=========================  ===========================================================
0.x keyword                fulmen
=========================  ===========================================================
``algorithm``              ``algorithm:`` (``APO`` → ``apo``, ``VERL`` → ``grpo``)
``n_runners``              ``rollouts.concurrency`` (a 0.x runner ran one at a time)
``initial_resources``      prompt templates seed the run's carried resources (``apo``
                           starts from the first); an ``LLM`` is ``dev``'s endpoint
``adapter``                ``algorithm.transitions.agents`` (``agent_match``)
``LitAgent.trained_agents``  the same, when no adapter says it
``store``                  ``store_url`` of a store facade opened on a URL
=========================  ===========================================================

``tracer``, ``runner``, ``strategy``, ``llm_proxy``, ``hooks``, ``port``, ``max_rollouts``
and ``daemon=False`` are refused with what to do instead: fulmen starts and wires those parts
itself (``docs/migrate-from-agent-lightning.md``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.compat.agentlightning.adapters import TraceAdapter
from fulmen.compat.agentlightning.agent_match import agent_patterns
from fulmen.compat.agentlightning.algorithms import APO, VERL, Algorithm, Baseline
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.litagent import LitAgent
from fulmen.compat.agentlightning.resources import LLM, resource_to_fulmen
from fulmen.types import PromptTemplate as FulmenPromptTemplate

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)

_REFUSED = {
    "tracer": "fulmen traces every rollout itself; emit with agl.emit_* inside the agent",
    "runner": "fulmen's runner runs the agent; configure it under rollouts:",
    "strategy": "fulmen starts store, gateway, engine and runner itself; several machines: "
    "store_url and fulmen runner (docs/multi-machine.md)",
    "llm_proxy": "fulmen's gateway records every call; the agent gets its URL in llm",
    "hooks": "fulmen's runner calls no hooks; put the code in the rollout method",
    "port": "fulmen picks free ports on 127.0.0.1",
    "max_rollouts": "set algorithm.steps / tasks_per_step / group_size",
    "max_tasks": "set algorithm.steps / tasks_per_step / group_size",
    "triplet_exporter": "pass adapter=agl.TracerTraceToTriplet(agent_match=...)",
}


class Trainer:
    """0.x's ``Trainer``: the same keywords, plus the fulmen config that names model and run.

    Args:
        config: a fulmen training config file (``model``, ``run_dir``, ``engine``, ...).
        overrides: ``"key.path=value"`` strings applied to it (``fulmen train --set``).
        algorithm / n_runners / initial_resources / adapter / store / dev / n_workers /
            daemon: 0.x's keywords, mapped as the module docstring says.
        tracer / runner / strategy / llm_proxy / hooks / port / max_rollouts / max_tasks /
            triplet_exporter: refused unless ``None`` (``NotSupported`` says what to do).
    """

    def __init__(
        self,
        *,
        dev: bool = False,
        n_runners: int | None = None,
        max_rollouts: int | None = None,
        initial_resources: dict[str, Any] | None = None,
        tracer: Any = None,
        adapter: Any = None,
        store: Any = None,
        runner: Any = None,
        strategy: Any = None,
        port: int | None = None,
        algorithm: Any = None,
        llm_proxy: Any = None,
        n_workers: int | None = None,
        max_tasks: int | None = None,
        daemon: bool = True,
        triplet_exporter: Any = None,
        hooks: Any = None,
        config: str | Path | None = None,
        overrides: Sequence[str] = (),
    ) -> None:
        given = {
            "tracer": tracer, "runner": runner, "strategy": strategy, "llm_proxy": llm_proxy,
            "hooks": hooks, "port": port, "max_rollouts": max_rollouts, "max_tasks": max_tasks,
            "triplet_exporter": triplet_exporter,
        }  # fmt: skip
        for name, value in given.items():
            if value is not None:
                raise NotSupported(f"Trainer({name}=...)", why=_REFUSED[name], instead="omit it")
        if not daemon:
            raise NotSupported(
                "Trainer(daemon=False)",
                why="fulmen stops every process it started when training ends",
                instead="omit it",
            )
        if adapter is not None and not isinstance(adapter, TraceAdapter):
            raise NotSupported(
                f"Trainer(adapter={type(adapter).__name__}(...))",
                why="fulmen builds transitions itself",
                instead="agl.TracerTraceToTriplet(agent_match=...), agl.TraceToMessages() or "
                "algorithm.transitions in the fulmen config",
            )
        if algorithm is not None and not isinstance(algorithm, Algorithm):
            raise NotSupported(
                f"Trainer(algorithm={type(algorithm).__name__}(...))",
                why="a 0.x Algorithm of your own drives 0.x's store and runners directly",
                instead="agl.APO(...) or agl.VERL(config), or a fulmen algorithm in the config",
            )
        self.dev_mode = dev
        self.n_runners = n_runners if n_runners is not None else n_workers
        self.initial_resources = dict(initial_resources or {})
        self.adapter: TraceAdapter | None = adapter
        self.algorithm: Algorithm | None = algorithm
        self.store_url = _store_url(store)
        self.config_path = Path(config) if config is not None else None
        self.overrides = list(overrides)

    # -- the fulmen config ---------------------------------------------------------------------

    def train_config(self, agent: Any = None, train_tasks: int | None = None) -> TrainConfig:
        """Return the fulmen ``TrainConfig`` this trainer runs (``agent``: its trained_agents)."""
        from fulmen.trainer.config import load_config

        if self.config_path is None:
            raise NotSupported(
                "Trainer(...) without config=",
                why="fulmen needs the model to serve and the run directory, which 0.x left to "
                "its algorithm",
                instead="Trainer(..., config='config.yaml') naming model: and run_dir:",
            )
        sets = [*self.overrides, *self._algorithm_overrides(agent, train_tasks)]
        if self.n_runners is not None:
            sets.append(f"rollouts.concurrency={self.n_runners}")
        if self.store_url is not None:
            sets.append(f"store_url={json.dumps(self.store_url)}")
        return load_config(self.config_path, overrides=sets)

    def _algorithm_overrides(self, agent: Any, train_tasks: int | None) -> list[str]:
        out: list[str] = []
        algorithm = self.algorithm
        if isinstance(algorithm, APO):
            section = algorithm.fulmen_section()
            names = [n for n, r in self.initial_resources.items() if _is_prompt(r)]
            if names:
                section["prompt"] = names[0]
            out.append(f"algorithm={json.dumps(section)}")
        elif isinstance(algorithm, VERL):
            out.append('algorithm.name="grpo"')
            out += [f"{k}={json.dumps(v)}" for k, v in _leaves(algorithm.fulmen_section())]
            out += [f"{k}={json.dumps(v)}" for k, v in _leaves(algorithm.top_level(), "")]
            steps = algorithm.translation.steps_for(train_tasks) if train_tasks else None
            if steps is not None and "algorithm.steps" not in algorithm.translation.overrides:
                out.append(f"algorithm.steps={steps}")
            logger.info("VERL config, as fulmen runs it:\n%s", algorithm.report())
        elif isinstance(algorithm, Baseline):
            algorithm.fulmen_section()  # raises: a baseline is run by dev
        agents = self.adapter.agents() if self.adapter is not None else None
        trained = getattr(agent, "trained_agents", None)
        if agents is None and isinstance(trained, str):
            agents = agent_patterns(trained)
        if agents is not None and not isinstance(algorithm, APO):
            out.append(f"algorithm.transitions.agents={json.dumps(list(agents))}")
        return out

    def _seed_prompts(self, config: TrainConfig) -> None:
        """Write the initial prompt templates as the run's carried resources (a fresh run)."""
        from fulmen.trainer.state import RunState

        prompts: dict[str, Any] = {}
        for name, resource in self.initial_resources.items():
            if isinstance(resource, LLM):
                raise NotSupported(
                    f"initial_resources[{name!r}] = LLM(...) in fit",
                    why="fulmen serves the model it trains (model: and engine: in the config)",
                    instead="engine: {kind: endpoint, url: ...} with model: for a hosted model",
                )
            prompts[name] = resource_to_fulmen(name, resource)
        state = RunState(config.run_dir)
        if not prompts or state.path.exists():
            return  # nothing to seed, or a resumed run that carries its own
        config.run_dir.mkdir(parents=True, exist_ok=True)
        state.resources = {**state.resources, **prompts}
        state.save()

    # -- 0.x entry points ----------------------------------------------------------------------

    def fit(
        self, agent: Any, train_dataset: Any = None, *, val_dataset: Any = None
    ) -> list[dict[str, float]]:
        """Train ``agent`` on the datasets (lists or anything indexable); fulmen's step metrics.

        0.x returned ``None``; the list of step metrics is what fulmen's ``fit`` returns.
        """
        from fulmen.trainer.trainer import Trainer as FulmenTrainer

        if self.dev_mode:
            self.dev(agent, train_dataset, val_dataset=val_dataset)
            return []
        if isinstance(agent, LitAgent):
            agent.set_trainer(self)
        train = _tasks(train_dataset)
        config = self.train_config(agent, len(train) if train is not None else None)
        self._seed_prompts(config)
        return FulmenTrainer(config).fit(agent, train, _tasks(val_dataset))

    def dev(
        self, agent: Any, train_dataset: Any = None, *, val_dataset: Any = None
    ) -> list[dict[str, Any]]:
        """Run every task of the dataset once without training and print what happened.

        An ``LLM`` in ``initial_resources`` is the endpoint the rollouts call (as 0.x's dev
        used it); without one, fulmen's engine serves the config's model.
        """
        from fulmen.trainer.trainer import Trainer as FulmenTrainer

        if isinstance(agent, LitAgent):
            agent.set_trainer(self)
        split = "train" if train_dataset is not None else "val"
        tasks = _tasks(train_dataset if train_dataset is not None else val_dataset)
        llms = [r for r in self.initial_resources.values() if isinstance(r, LLM)]
        endpoint = llms[0].__dict__["endpoint"] if llms else None
        config = self.train_config(agent)
        return FulmenTrainer(config).dev(
            agent,
            tasks,
            n=len(tasks) if tasks is not None else 4,
            split=split,
            endpoint=endpoint,
            model=llms[0].model if llms else None,
        )


def _is_prompt(resource: Any) -> bool:
    return isinstance(resource, FulmenPromptTemplate)


def _tasks(dataset: Any) -> list[Any] | None:
    """Return a 0.x dataset (indexable with a length) as a list of task inputs."""
    if dataset is None:
        return None
    return [dataset[i] for i in range(len(dataset))]


def _leaves(section: dict[str, Any], prefix: str = "algorithm.") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in section.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{prefix}{key}.")  # pyright: ignore[reportUnknownArgumentType]
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _store_url(store: Any) -> str | None:
    if store is None:
        return None
    url = getattr(store, "url", None)
    if isinstance(url, str) and not url.startswith("memory:"):
        return url
    raise NotSupported(
        "Trainer(store=<in-memory store>)",
        why="fulmen's trainer opens its store by URL (SQLite in run_dir by default)",
        instead="leave store out, or pass agl.LightningStore.open('sqlite:///...' or 'http://...')",
    )
