"""What a run folder holds: the run's agent, model and data, and a digest of its other settings.

A run folder resumes whatever run it holds, so starting a config in the folder of another run
would train that run's weights with another agent or on other tasks, under its id. The first
start of a run writes its ``RunIdentity`` and its settings into ``state.json``; every later
start compares:

- another agent, model or data: refused before anything starts (``IdentityMismatch``, which
  says what differs and what to do), unless the caller resumes anyway;
- the same agent, model and data with other settings (a learning rate, the number of steps):
  resumed, and the change recorded as the run's next config version (``ConfigChange``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from fulmen.config_file import flatten
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.state import RunState

__all__ = [
    "ConfigChange",
    "IdentityMismatch",
    "RunIdentity",
    "changed_keys",
    "check_run_folder",
    "record_start",
    "run_identity",
    "run_settings",
]

#: Settings that are where a run lives, not how it trains: moving a folder changes no setting.
_NOT_SETTINGS = ("run_dir",)


class RunIdentity(BaseModel):
    """What makes a run that run: the agent it trains, the model it starts from, its data.

    Attributes:
        agent: ``module:object`` of a Python agent, ``command: ...`` of a command agent,
            ``None`` for offline training (no agent runs).
        model: the base model the run started from.
        train / val: the training and validation task sources (a path, ``module:callable``,
            or a digest of tasks passed as a list); ``None``: none.
        from_store: the store offline training learns from (``None``: tasks are run).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    agent: str | None
    model: str
    train: str | None = None
    val: str | None = None
    from_store: str | None = None

    def differences(self, other: RunIdentity) -> list[str]:
        """Say, one line each, what ``other`` (this start) has that differs from this run."""
        lines: list[str] = []
        for key in ("agent", "model", "train", "val", "from_store"):
            here, there = getattr(other, key), getattr(self, key)
            if here != there:
                name = key if key in ("agent", "model") else f"data.{key}"
                lines.append(f"{name}: the run has {_shown(there)}, this config {_shown(here)}")
        return lines


class IdentityMismatch(ConfigError):
    """A config started in the folder of another run (another agent, model or data)."""


class ConfigChange(BaseModel):
    """A resume whose settings differ from the run's last start: its next config version.

    Attributes:
        version: the run's config version from this start on (the first start is 1).
        step: the steps the run had done when the change took effect.
        keys: the settings that changed, dotted (``algorithm.grpo.learning_rate``).
        digest: the new settings' digest.
    """

    model_config = ConfigDict(frozen=True)

    version: int
    step: int
    keys: list[str]
    digest: str

    def line(self, run_dir: object) -> str:
        """Return the one log line naming what changed."""
        return (
            f"{run_dir}: resuming with changed settings ({', '.join(self.keys)}); recorded as "
            f"config version {self.version} from step {self.step}"
        )


def check_run_folder(
    state: RunState,
    identity: RunIdentity,
    settings: Mapping[str, Any],
    *,
    resume_anyway: bool = False,
) -> ConfigChange | None:
    """Check that a start of ``identity`` with ``settings`` may resume the run ``state`` holds.

    Returns the config change to record (``None``: a new run, or the same settings again).

    Raises:
        IdentityMismatch: the folder holds a run of another agent, model or data and
            ``resume_anyway`` is false; the message lists what differs and the options.
    """
    if not state.exists or state.identity is None:
        return None  # a new run, or one from before runs recorded what they are: adopted
    stored = RunIdentity.model_validate(state.identity)
    differences = stored.differences(identity)
    if differences and not resume_anyway:
        done = state.step_offset + state.step
        raise IdentityMismatch(
            f"{state.run_dir} holds another run (run {state.run_id}, {done} steps done), "
            f"and this config differs from it: {'; '.join(differences)}. Starting it there "
            "would go on training that run's model with this config's agent and data, under "
            "that run's id. Either give this config its own run_dir (or --set run_dir=NEW), or "
            "continue that run with this config anyway: fulmen train CONFIG --resume-anyway "
            "(in Python: Trainer(config, resume_anyway=True))"
        )
    keys = changed_keys(state.settings or {}, settings)
    if not keys and not differences:
        return None
    return ConfigChange(
        version=state.config_version + 1,
        step=state.step_offset + state.step,
        keys=keys or ["agent/model/data"],
        digest=settings_digest(settings),
    )


def record_start(
    state: RunState,
    identity: RunIdentity,
    settings: Mapping[str, Any],
    change: ConfigChange | None,
) -> None:
    """Write what this start is into ``state`` (saved by the caller)."""
    state.identity = identity.model_dump(mode="json")
    state.settings = dict(settings)
    if change is not None:
        state.config_version = change.version


def run_identity(
    config: TrainConfig,
    agent: Any = None,
    train: str | Sequence[Any] | None = None,
    val: str | Sequence[Any] | None = None,
) -> RunIdentity:
    """Describe a run of ``config`` with the agent and data ``Trainer.fit`` was given."""
    offline = config.data.from_store is not None
    return RunIdentity(
        agent=None if offline else _agent_name(agent if agent is not None else config.agent),
        model=config.model,
        train=None if offline else _source_name(train or config.data.train, config),
        val=None if offline else _source_name(val or config.data.val, config),
        from_store=config.data.from_store,
    )


def run_settings(config: TrainConfig) -> dict[str, Any]:
    """Return the config as JSON, without where the run lives (its ``run_dir``)."""
    settings: dict[str, Any] = json.loads(config.model_dump_json())
    for key in _NOT_SETTINGS:
        settings.pop(key, None)
    return settings


def settings_digest(settings: Mapping[str, Any]) -> str:
    """Return a short, stable digest of ``settings`` (``run_settings``)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """List the dotted keys whose values differ (added and removed ones included)."""
    old, new = flatten(before), flatten(after)
    return sorted(
        k for k in old.keys() | new.keys() if old.get(k, _MISSING) != new.get(k, _MISSING)
    )


_MISSING = object()


def _agent_name(agent: Any) -> str | None:
    """Name an agent as the user wrote it: ``module:object``, ``command: ...``."""
    from fulmen.agent.spec import AgentSpec

    if agent is None or isinstance(agent, str):
        return agent
    if isinstance(agent, AgentSpec):
        return agent.describe()
    target = agent if hasattr(agent, "__qualname__") else type(agent)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"


def _source_name(source: str | Sequence[Any] | None, config: TrainConfig) -> str | None:
    """Name a task source: the path or ``module:callable``, or a digest of a list of tasks.

    ``environment`` (an environment library's tasks) is named by the ``environment:`` section.
    """
    from fulmen.environments.config import ENVIRONMENT_SOURCE

    if source == ENVIRONMENT_SOURCE and config.environment is not None:
        section = json.dumps(config.environment.model_dump(mode="json"), sort_keys=True)
        return f"environment {section}"
    if source is None or isinstance(source, str):
        return source
    tasks = list(source)
    text = json.dumps(tasks, sort_keys=True, default=repr)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{len(tasks)} tasks given in Python (digest {digest})"


def _shown(value: str | None) -> str:
    return "none" if value is None else repr(value)
