"""The kinds of agent a config mapping may name: the built-in ones, then installed ones.

``agent: {kind: NAME, ...}`` (``kind`` defaults to ``command``) is validated against the spec
of the ``AgentKind`` registered under ``NAME``; an installed distribution adds a kind by naming
its ``AgentKind`` row in the ``fulmen.agent_kinds`` entry-point group (``docs/architecture.md``,
"Extending fulmen"). Read once per process.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Final, Union, get_args

from pydantic import Discriminator, Tag

from fulmen.agent.command.access import check_rollout_access, check_visible, rollouts_get_own_users
from fulmen.agent.command.agent import CommandAgent
from fulmen.agent.command.config import CommandAgentConfig
from fulmen.agent.spec import AgentKind, AgentSpec
from fulmen.errors import ConfigError
from fulmen.importing import installed_entries

__all__ = ["COMMAND", "DEFAULT_KIND", "ENTRY_POINT_GROUP", "agent_kinds", "kind_of", "spec_union"]

#: The entry-point group an installed distribution adds an agent kind in.
ENTRY_POINT_GROUP: Final = "fulmen.agent_kinds"
#: The kind of a mapping that names none (a command, as configs always wrote it).
DEFAULT_KIND: Final = "command"


def _check_command(spec: CommandAgentConfig) -> None:
    """Check that a command's rollouts reach what they need and its sandbox hides none of it."""
    if rollouts_get_own_users(spec.sandbox):
        check_rollout_access(spec)
    check_visible(spec)


#: A program run per rollout, in a sandbox (``docs/command-agents.md``).
COMMAND: Final = AgentKind(
    DEFAULT_KIND,
    CommandAgentConfig,
    build=CommandAgent,
    preflight=_check_command,
    summary="a program run per rollout, in a sandbox",
)


def _declared_kind(row: AgentKind, label: str) -> None:
    """Refuse a row whose spec does not declare ``kind: Literal[row.name]``."""
    field = row.spec.model_fields.get("kind")
    if field is None or get_args(field.annotation) != (row.name,):
        raise ConfigError(f"{label}: its spec must declare kind: Literal[{row.name!r}]")


@functools.cache
def agent_kinds() -> Mapping[str, AgentKind]:
    """Return every agent kind by name, built-in first.

    Raises:
        ConfigError: an entry point does not load, is not an ``AgentKind``, reuses a kind, or
            its spec does not declare its kind.
    """
    kinds: dict[str, AgentKind] = {COMMAND.name: COMMAND}
    for label, row in installed_entries(ENTRY_POINT_GROUP, AgentKind, what="agent kind"):
        if row.name in kinds:
            raise ConfigError(f"{label} reuses the agent kind {row.name!r}")
        if not issubclass(row.spec, AgentSpec):
            raise ConfigError(f"{label}: its spec is not a fulmen.agent.spec.AgentSpec")
        _declared_kind(row, label)
        kinds[row.name] = row
    return kinds


def kind_of(spec: AgentSpec) -> AgentKind:
    """Return the registered kind of ``spec``."""
    return agent_kinds()[spec.kind]


def _tag(value: Any) -> str | None:
    """Return the kind a mapping or a spec names (``command`` when a mapping names none)."""
    if isinstance(value, Mapping):
        kind = value.get("kind", DEFAULT_KIND)  # pyright: ignore[reportUnknownMemberType]
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


def spec_union() -> Any:
    """Return the type of an agent given as a mapping: every kind's spec, selected by ``kind``."""
    members = tuple(Annotated[row.spec, Tag(name)] for name, row in agent_kinds().items())
    return Annotated[Union[members], Discriminator(_tag)]  # noqa: UP007  (built at run time)
