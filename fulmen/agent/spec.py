"""Agents given as a config mapping: ``AgentSpec`` (the mapping) and ``AgentKind`` (its row).

The training config's ``agent:`` is either ``"module:object"`` (a Python rollout function or
``Agent``, imported where it runs) or a mapping whose ``kind`` names a registered kind
(``fulmen.agent.kinds``): ``command`` (a program run per rollout, the default when ``kind`` is
left out) or one an installed distribution adds. The spec and its kind's row are everything the
rest of fulmen asks of such an agent, so nothing outside the kind's own module knows which kind
it is: the object the runner runs per rollout and the checks before a run (the row: they need
the kind's machinery), how the run names it, how a ``fulmen runner`` process is told to run it,
which paths its sandbox must hide, and how its files are found inside a deployment's image (the
spec: they need only its fields).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from fulmen.config_file import ConfigFile

__all__ = ["AgentKind", "AgentSpec", "ImagePath", "runner_agent_args"]

#: ``(path on this machine, what it is) -> the same path inside a deployment's image``.
ImagePath = Callable[[Path, str], PurePath]


class AgentSpec(BaseModel):
    """One kind of agent given as a mapping (subclass it; see the module docstring).

    A subclass declares ``kind: Literal["yours"] = "yours"`` and its own fields; the members
    here have defaults that suit an agent with no files and no sandbox. A kind with a
    ``config_dir`` field gets the training config file's folder there when it leaves it out.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Any

    @model_validator(mode="before")
    @classmethod
    def _config_dir_from_the_file(cls, data: Any, info: ValidationInfo) -> Any:
        found = ConfigFile.section(data, info)
        if found is None or "config_dir" not in cls.model_fields:
            return data
        file, fields = found
        if "config_dir" not in fields and file.written("agent.config_dir"):
            fields["config_dir"] = str(file.folder)
        return fields

    def describe(self) -> str:
        """Name the agent as the user wrote it (a run's identity, ``fulmen runs``)."""
        return f"{self.kind}: {self.model_dump_json(exclude={'kind'}, exclude_defaults=True)}"

    def hiding(self, paths: Sequence[Path]) -> Self:
        """Return the spec with ``paths`` hidden from its rollouts (the run's own folder).

        A kind that runs untrusted code in a sandbox adds them to what the sandbox hides; one
        that runs in the runner's process has nothing to hide them from.
        """
        del paths
        return self

    def in_image(self, place: ImagePath) -> Self:
        """Return the spec with its files' paths as a deployment's image holds them."""
        del place
        return self

    def runner_args(self) -> list[str]:
        """Return the ``fulmen runner`` options that run this agent (``--agent-spec JSON``)."""
        return ["--agent-spec", self.model_dump_json()]


def _no_checks(spec: Any) -> None:
    del spec


@dataclass(frozen=True)
class AgentKind:
    """One kind of agent: its spec and what runs it (a row of ``fulmen.agent.kinds``).

    Attributes:
        name: the ``kind`` a mapping names (the spec's ``kind`` literal).
        spec: the ``AgentSpec`` subclass a mapping of this kind is validated into.
        build: ``spec -> what the runner runs per rollout`` (a ``@fulmen.rollout`` function
            or an ``Agent``), called once per runner.
        preflight: ``spec -> None``, checks before anything starts (raises ``ConfigError``).
        summary: one line for the docs and errors.
    """

    name: str
    spec: type[AgentSpec]
    build: Callable[[Any], Any]
    preflight: Callable[[Any], None] = _no_checks
    summary: str = ""


def runner_agent_args(agent: str | AgentSpec) -> list[str]:
    """Return the ``fulmen runner`` options for an agent given by name or as a spec."""
    return agent.runner_args() if isinstance(agent, AgentSpec) else ["--agent", agent]
