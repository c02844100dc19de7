"""What a running rollout sees: its task, its resources and a rollout-specific LLM endpoint.

``RolloutContext`` is built by the runner for each attempt. ``LLM`` is the ``llm`` resource as
the agent should use it: ``base_url`` points at the gateway under
``/rollout/{rollout_id}/attempt/{attempt_id}/v1``, so every call the agent makes is recorded
for this attempt without any change to the agent's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from fulmen.errors import ConfigError
from fulmen.types import LLMResource, PromptTemplate
from fulmen.types.attempt_keys import url_key

if TYPE_CHECKING:
    from fulmen.types import Attempt, Mode, Resources, Rollout

__all__ = ["LLM", "RolloutContext", "rollout_base_url"]

_R = TypeVar("_R", LLMResource, PromptTemplate)

# Placeholder key for OpenAI clients, which refuse an empty one; the gateway ignores it.
_NO_KEY = "fulmen-no-key"


def rollout_base_url(
    gateway_url: str, rollout_id: str, attempt_id: str, key: str | None = None
) -> str:
    """Return the gateway URL recording calls of one attempt (``.../rollout/r/attempt/a/v1``).

    With the attempt's ``key``, its URL form goes into the path
    (``.../attempt/a/key/MAC/v1``): the URL alone then opens the attempt, whatever API key the
    client sends (``fulmen.types.attempt_keys``).
    """
    path = f"{gateway_url.rstrip('/')}/rollout/{rollout_id}/attempt/{attempt_id}"
    mac = url_key(key) if key is not None else None
    return f"{path}/key/{mac}/v1" if mac is not None else f"{path}/v1"


class LLM(BaseModel):
    """An OpenAI-compatible endpoint for one attempt: pass ``base_url``/``api_key`` to a client.

    Attributes:
        name: the resource name it came from.
        base_url: the rollout-specific gateway URL (or the upstream itself without a gateway).
        model: the model name to request.
        api_key: the key to send (a placeholder when none is needed).
        sampling: sampling parameters for this rollout's mode (``temperature``, ...).
        is_recorded: whether calls go through the gateway and are recorded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    base_url: str
    model: str
    api_key: str
    sampling: dict[str, JsonValue] = Field(default_factory=dict)
    is_recorded: bool = True


@dataclass(frozen=True)
class RolloutContext:
    """The task, resources and identity of one running attempt."""

    rollout: Rollout
    attempt: Attempt
    resources: Resources | None = None
    gateway_url: str | None = None
    gateway_api_key: str | None = None

    @property
    def task(self) -> JsonValue:
        """The rollout's input."""
        return self.rollout.input

    @property
    def rollout_id(self) -> str:
        """The rollout's id."""
        return self.rollout.rollout_id

    @property
    def attempt_id(self) -> str:
        """The attempt's id."""
        return self.attempt.attempt_id

    @property
    def mode(self) -> Mode:
        """``train``, ``val`` or ``test``."""
        return self.rollout.mode

    def resource_names(self) -> list[str]:
        """List the names of the resources of this rollout's version."""
        return sorted(self.resources.resources) if self.resources is not None else []

    def llm(self, name: str | None = None, *, key_in_url: bool = True) -> LLM:
        """Return LLM resource ``name`` (default: the one named ``llm``, or the only one).

        Its ``base_url`` carries the attempt's key (``key_in_url``), so that a client sending
        an API key of its own still reaches the attempt; a command agent, whose command lines
        other processes may read, gets the URL without it and the key apart.
        """
        resource = self._pick(LLMResource, name, "llm")
        key, res = resource
        sampling = {**res.sampling.get("default", {}), **res.sampling.get(self.mode.value, {})}
        if self.gateway_url is None:
            return LLM(
                name=key,
                base_url=res.base_url,
                model=res.model,
                api_key=res.api_key or _NO_KEY,
                sampling=sampling,
                is_recorded=False,
            )
        return LLM(
            name=key,
            base_url=rollout_base_url(
                self.gateway_url,
                self.rollout_id,
                self.attempt_id,
                self.gateway_api_key if key_in_url else None,
            ),
            model=res.model,
            api_key=self.gateway_api_key or res.api_key or _NO_KEY,
            sampling=sampling,
        )

    def prompt(self, name: str | None = None) -> PromptTemplate:
        """Return prompt template ``name`` (default: the one named ``prompt``, or the only one)."""
        return self._pick(PromptTemplate, name, "prompt")[1]

    def _pick(self, kind: type[_R], name: str | None, default_name: str) -> tuple[str, _R]:
        found = {
            k: v
            for k, v in (self.resources.resources if self.resources else {}).items()
            if isinstance(v, kind)
        }
        if name is not None:
            if name not in found:
                raise ConfigError(
                    f"rollout {self.rollout_id}: no {kind.__name__} named {name!r}; "
                    f"resources: {self.resource_names()}"
                )
            return name, found[name]
        if default_name in found:
            return default_name, found[default_name]
        if len(found) == 1:
            return next(iter(found.items()))
        raise ConfigError(
            f"rollout {self.rollout_id}: cannot choose a {kind.__name__} for {default_name!r} "
            f"among {sorted(found)} (resources version {self.rollout.resources_version})"
        )
