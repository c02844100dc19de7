"""``agl.Trainer``: 0.x's ``Trainer(...).fit`` / ``.dev`` with its keyword names, on fulmen.

What runs depends on the algorithm, as in 0.x:

* ``APO`` and ``VERL`` become fulmen's ``apo`` and ``grpo`` (``fulmen train``);
* any other ``agl.Algorithm`` (a subclass, ``@algo``, ``Baseline``) has its own ``run()``
  driven against the run's store (``fulmen.compat.agentlightning.driver``);
* no algorithm: the config's ``algorithm:`` (fulmen's default, ``grpo``).

fulmen needs what 0.x left to the algorithm: the model to serve and where the run lives. They
come from a fulmen config (``config=``, with ``overrides=`` as ``fulmen train --set``), or,
without one, from what the call already says (``trainer_config.build_config``). ``fit``'s own
arguments fill the config: its agent, datasets and validation need no keys of their own.

=========================  ===========================================================
0.x keyword                fulmen
=========================  ===========================================================
``algorithm``              see above
``n_runners``              ``rollouts.concurrency`` (a 0.x runner ran one at a time)
``initial_resources``      the run's first resources (prompts seed ``apo``); an ``LLM``
                           is the endpoint served when no config names one
``adapter``                ``algorithm.transitions.agents`` (``agent_match``); a driven
                           algorithm's ``get_adapter()``
``LitAgent.trained_agents``  the same, when no adapter says it
``store``                  ``store_url`` of a store facade opened on a URL
=========================  ===========================================================

``tracer``, ``runner``, ``strategy``, ``llm_proxy``, ``hooks``, ``port``, ``max_rollouts``
and ``daemon=False`` are refused with what to do instead, as is 0.x's legacy
``fit(agent, "http://...")`` (``docs/migrate-from-agent-lightning.md``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.compat.agentlightning.adapters import TraceAdapter, TracerTraceToTriplet
from fulmen.compat.agentlightning.algorithm_base import Algorithm, FastAlgorithm
from fulmen.compat.agentlightning.algorithms import APO, Baseline
from fulmen.compat.agentlightning.datasets import task_list
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.lit_agent import LitAgent
from fulmen.compat.agentlightning.trainer_config import ConfigRequest, build_config
from fulmen.store.urls import is_in_memory

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
        config: a fulmen training config file (``model``, ``run_dir``, ``engine``, ...);
            without one, see ``trainer_config.build_config``.
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
                why="fulmen builds transitions from the gateway's call records itself",
                instead="agl.TracerTraceToTriplet(agent_match=...), agl.TraceToMessages() or "
                "algorithm.transitions in the fulmen config",
            )
        if algorithm is not None and not isinstance(algorithm, Algorithm):
            raise NotSupported(
                f"Trainer(algorithm={type(algorithm).__name__}(...))",
                why="an algorithm must be an agl.Algorithm (a subclass, @agl.algo, APO, VERL)",
                instead="subclass agl.Algorithm with an async run(), or decorate the function "
                "with @agl.algo",
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

    def train_config(
        self,
        agent: Any = None,
        train_tasks: int | None = None,
        *,
        algorithm: Algorithm | None = None,
        has_val: bool = False,
    ) -> TrainConfig:
        """Return the fulmen ``TrainConfig`` this trainer runs (see ``build_config``).

        ``train_tasks`` / ``has_val``: how many training tasks ``fit`` got, and whether it got
        validation tasks; ``agent``: the agent ``fit`` got (its trained_agents).
        """
        return build_config(
            ConfigRequest(
                path=self.config_path,
                overrides=self.overrides,
                algorithm=algorithm if algorithm is not None else self.algorithm,
                agent=agent,
                train_tasks=train_tasks,
                has_val=has_val,
                n_runners=self.n_runners,
                store_url=self.store_url,
                initial_resources=self.initial_resources,
                adapter=self.adapter,
            )
        )

    # -- 0.x entry points ----------------------------------------------------------------------

    def fit(
        self, agent: Any, train_dataset: Any = None, *, val_dataset: Any = None
    ) -> list[dict[str, float]]:
        """Train ``agent`` on the datasets (lists or anything indexable).

        Returns fulmen's step metrics for ``APO`` / ``VERL`` / the config's algorithm, and
        ``[]`` for a driven algorithm (0.x returned ``None``).
        """
        _refuse_legacy(train_dataset, "fit")
        if self.dev_mode:
            return self.dev(agent, train_dataset, val_dataset=val_dataset)
        if isinstance(agent, LitAgent):
            agent.set_trainer(self)
        train = task_list(train_dataset, "train_dataset")
        val = task_list(val_dataset, "val_dataset")
        algorithm = self.algorithm
        if algorithm is not None and algorithm.fulmen_section() is None:
            self._drive(algorithm, agent, train, val)
            return list(getattr(algorithm, "results", []))
        if isinstance(algorithm, APO) and val is None:
            raise ValueError(
                "val_dataset is required for APO algorithm (it scores the prompts; fulmen's "
                "apo can score on held-apart training tasks instead: algorithm: apo with "
                "score_tasks in a fulmen config, run by fulmen train)"
            )
        config = self.train_config(
            agent, len(train) if train is not None else None, has_val=val is not None
        )
        self._seed_prompts(config)
        from fulmen.trainer.trainer import Trainer as FulmenTrainer

        # fulmen's apo stops with AgentFailed when every rollout scoring a prompt failed, as
        # 0.x's APO did (it had no scores to rank prompts by).
        return FulmenTrainer(config).fit(agent, train, val)

    def fit_v0(
        self,
        agent: Any,
        train_data: Any,
        *,
        val_data: Any = None,
        dev_data: Any = None,
        dev_backend: Any = None,
    ) -> list[dict[str, float]]:
        """0.3's legacy entry point: datasets train as ``fit``; a server URL is refused."""
        for data, name in ((train_data, "train_data"), (val_data, "val_data")):
            _refuse_legacy(data, "fit_v0", name)
        if dev_data is not None or dev_backend is not None:
            raise NotSupported(
                "Trainer.fit_v0(dev_data=... / dev_backend=...)",
                why="0.x's legacy dev loop ran against a mock server",
                instead="trainer.dev(agent, dataset)",
            )
        return self.fit(agent, train_data, val_dataset=val_data)

    def dev(
        self, agent: Any, train_dataset: Any = None, *, val_dataset: Any = None
    ) -> list[dict[str, Any]]:
        """Run every task once without training (0.x's ``Baseline``) and log each rollout.

        The prompts and any ``LLM`` of ``initial_resources`` are the rollouts' resources, as
        in 0.x; an ``LLM`` is also the endpoint called when no config names an engine.
        Returns one row per rollout (``Baseline.results``).
        """
        _refuse_legacy(train_dataset, "dev")
        if isinstance(agent, LitAgent):
            agent.set_trainer(self)
        algorithm = self.algorithm if self.algorithm is not None else Baseline()
        if not isinstance(algorithm, FastAlgorithm):
            raise TypeError(
                "Trainer.dev() requires an algorithm that inherits from FastAlgorithm. "
                f"Received {type(algorithm).__name__}."
            )
        train = task_list(train_dataset, "train_dataset")
        val = task_list(val_dataset, "val_dataset")
        self._drive(algorithm, agent, train, val)
        return list(getattr(algorithm, "results", []))

    def _drive(
        self, algorithm: Algorithm, agent: Any, train: list[Any] | None, val: list[Any] | None
    ) -> None:
        from fulmen.compat.agentlightning.driver import drive

        config = self.train_config(agent, algorithm=algorithm)
        adapter = self.adapter if self.adapter is not None else TracerTraceToTriplet()
        asyncio.run(
            drive(
                algorithm,
                trainer=self,
                config=config,
                agent=agent,
                train=train,
                val=val,
                initial_resources=self.initial_resources,
                adapter=adapter,
            )
        )

    def _seed_prompts(self, config: TrainConfig) -> None:
        """Write the initial prompt templates as the run's carried resources (a fresh run)."""
        from fulmen.compat.agentlightning.resources import LLM, resource_to_fulmen
        from fulmen.trainer.state import RunState

        prompts: dict[str, Any] = {}
        for name, resource in self.initial_resources.items():
            if isinstance(resource, LLM):
                raise NotSupported(
                    f"initial_resources[{name!r}] = LLM(...) in fit with "
                    f"{type(self.algorithm).__name__ if self.algorithm else 'fulmen training'}",
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


def _refuse_legacy(data: Any, method: str, name: str = "train_dataset") -> None:
    """Refuse 0.x's legacy server form: a URL (or client) where the dataset goes."""
    if isinstance(data, str) or type(data).__name__ == "AgentLightningClient":
        raise NotSupported(
            f"Trainer.{method}(agent, {data!r})" if isinstance(data, str) else
            f"Trainer.{method}(agent, AgentLightningClient(...))",
            why=f"0.x's legacy client/server form: {name} named the AgentLightningServer "
            "(python -m agentlightning.verl) that handed out tasks; fulmen has no such server, "
            "and the string is no dataset",
            instead="agl.Trainer(algorithm=agl.VERL(config), n_runners=...).fit(agent, "
            "train_dataset, val_dataset=...) with the tasks as lists, the VERL config being "
            "the key=value arguments given to python -m agentlightning.verl",
        )  # fmt: skip


def _store_url(store: Any) -> str | None:
    if store is None:
        return None
    url = getattr(store, "url", None)
    if isinstance(url, str) and not is_in_memory(url):
        return url
    raise NotSupported(
        "Trainer(store=<in-memory store>)",
        why="fulmen's trainer opens its store by URL (SQLite in run_dir by default)",
        instead="leave store out, or pass agl.LightningStore.open('sqlite:///...' or 'http://...')",
    )
