"""0.x resources (``LLM``, ``ProxyLLM``, ``PromptTemplate``, named resources) over fulmen's.

A 0.x ``PromptTemplate`` *is* a fulmen ``PromptTemplate`` (``str.format`` placeholders), so a
prompt an agent ships can be published, optimized by ``apo`` and named by ``initial:`` as it
is; its 0.x-only fields (``engine``, ``resource_type``) are not stored. ``LLM`` and
``ProxyLLM`` keep 0.x's field names (``endpoint``, ``sampling_parameters``) and become
fulmen's ``LLMResource`` when published.

Inside a rollout, fulmen's ``llm`` resource is also offered as ``main_llm``, the name 0.x's
VERL algorithm published it under, so ``resources["main_llm"]`` keeps working.

An ``LLM``'s ``sampling_parameters`` were information for the agent in 0.x (the agent passed
them, or not, with its calls); the model served the values each call sent. They are kept that
way: stored in the snapshot's metadata (``snapshot_to_fulmen``) and shown to the agent, never
applied by the gateway. The sampling fulmen itself applies is the run's ``rollouts.*_sampling``
for its own algorithms (``apo``, ``grpo``), which the agent then sees as the parameters.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from fulmen.agent.context import rollout_base_url
from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.types import LLMResource, Resource, ResourcesCreate
from fulmen.types import PromptTemplate as FulmenPromptTemplate

if TYPE_CHECKING:
    from fulmen.agent.context import RolloutContext
    from fulmen.compat.agentlightning.rollouts import AttemptedRollout
    from fulmen.types import Resources
    from fulmen.types.limits import JsonData

__all__ = [
    "LLM",
    "NamedResources",
    "PromptTemplate",
    "ProxyLLM",
    "ResourceUnion",
    "ResourcesUpdate",
    "named_resources",
    "resource_to_fulmen",
    "resources_from_fulmen",
    "resources_to_fulmen",
    "snapshot_from_fulmen",
    "snapshot_to_fulmen",
]

logger = logging.getLogger(__name__)

# The name 0.x's VERL algorithm published its LLM under; fulmen publishes ``llm``.
MAIN_LLM = "main_llm"


class LLM(BaseModel):
    """An OpenAI-compatible endpoint, with 0.x's names.

    Attributes:
        endpoint: the base URL to give an OpenAI client (inside a rollout: this attempt's
            recording gateway URL).
        model: the model name to request.
        api_key: the key to send, if any.
        sampling_parameters: request fields such as ``temperature`` (inside a rollout: those of
            the rollout's mode, which the gateway also applies).
    """

    model_config = ConfigDict(extra="forbid")

    resource_type: Literal["llm"] = "llm"
    endpoint: str
    model: str
    api_key: str | None = None
    sampling_parameters: dict[str, Any] = Field(default_factory=dict)

    def get_base_url(self, *args: Any, **kwargs: Any) -> str:
        """Return the URL an OpenAI client should use (``endpoint``)."""
        return self.endpoint


class ProxyLLM(LLM):
    """An LLM behind the recording proxy: ``get_base_url(rollout_id, attempt_id)`` routes a call.

    ``endpoint`` alone is the gateway's untracked ``/v1`` URL: calls sent there reach the model
    but are recorded for no attempt, so nothing trains on them. Reading it logs a warning, as
    0.x did; use ``get_base_url`` (or the decorator forms, which hand the function a routed
    ``LLM``).
    """

    resource_type: Literal["proxy_llm"] = "proxy_llm"  # type: ignore[assignment]
    _routed: str | None = PrivateAttr(default=None)

    def __getattribute__(self, name: str) -> Any:
        if name == "endpoint":
            private = super().__getattribute__("__pydantic_private__") or {}
            routed = private.get("_routed")
            if routed is not None:
                return routed
            logger.warning(
                "ProxyLLM.endpoint is not recorded for any attempt; use "
                "get_base_url(rollout.rollout_id, rollout.attempt.attempt_id)"
            )
        return super().__getattribute__(name)

    def routed_for(self, rollout_id: str, attempt_id: str) -> ProxyLLM:
        """Return a copy whose ``endpoint`` records calls for that attempt.

        What a rollout method receives: 0.2 agents read ``llm.endpoint`` (their calls were
        traced by instrumentation), 0.3 agents call ``get_base_url(rollout_id,
        attempt_id)``; both reach this attempt's recording URL.
        """
        copy = self.model_copy()
        copy._routed = self.get_base_url(rollout_id, attempt_id)
        return copy

    def get_base_url(self, rollout_id: str | None = None, attempt_id: str | None = None) -> str:
        """Return the URL recording calls of one attempt (``rollout_id``, ``attempt_id``).

        With neither id, the unrouted ``endpoint``; with only one, ``ValueError`` (as 0.x).
        """
        endpoint: str = self.__dict__["endpoint"]
        if rollout_id is None and attempt_id is None:
            return endpoint
        if not isinstance(rollout_id, str) or not isinstance(attempt_id, str):
            raise ValueError("rollout_id and attempt_id must both be strings, or both None")
        prefix = endpoint.rstrip("/")
        if prefix.endswith("/v1"):
            # With the attempt's key in the path, whatever key the agent's client sends.
            key = self.api_key or None
            return rollout_base_url(prefix[: -len("/v1")], rollout_id, attempt_id, key)
        return f"{prefix}/rollout/{rollout_id}/attempt/{attempt_id}"

    def with_attempted_rollout(self, rollout: AttemptedRollout) -> LLM:
        """Return a plain ``LLM`` whose ``endpoint`` records calls for ``rollout``'s attempt."""
        return LLM(
            endpoint=self.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=self.model,
            api_key=self.api_key,
            sampling_parameters=dict(self.sampling_parameters),
        )


class PromptTemplate(FulmenPromptTemplate):
    """A prompt template, built as in 0.x: ``PromptTemplate(template=..., engine="f-string")``.

    Only the ``f-string`` engine is accepted: fulmen renders templates with ``str.format``, and
    reading a Jinja or POML template that way would change the prompt without a word. Convert
    such a template to ``{field}`` placeholders.

    >>> PromptTemplate(template="Hi {name}", engine="f-string").format(name="Ada")
    'Hi Ada'
    """

    resource_type: Literal["prompt_template"] = Field(default="prompt_template", exclude=True)
    engine: Literal["jinja", "f-string", "poml"] = Field(default="f-string", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _only_format_strings(cls, data: Any) -> Any:
        engine = data.get("engine", "f-string") if isinstance(data, dict) else "f-string"
        if engine != "f-string":
            raise NotSupported(
                f"PromptTemplate(engine={engine!r})",
                why="fulmen renders prompt templates with str.format",
                instead="rewrite the template with {field} placeholders and engine='f-string'",
            )
        return data

    def format(self, **kwargs: Any) -> str:
        """Fill the placeholders (``str.format``; keys the template does not use are ignored)."""
        return self.export_text().format(**kwargs)

    @classmethod
    def from_fulmen(cls, prompt: FulmenPromptTemplate) -> PromptTemplate:
        """Return the 0.x view of a fulmen prompt (instructions and demos in the template)."""
        if isinstance(prompt, PromptTemplate):
            return prompt
        return cls(template=prompt.export_text(), engine="f-string", lineage=prompt.lineage)


ResourceUnion = Annotated[LLM | ProxyLLM | PromptTemplate, Field(discriminator="resource_type")]
NamedResources = dict[str, Any]


class ResourcesUpdate(BaseModel):
    """A stored snapshot of named resources; ``resources_id`` is fulmen's version number."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    resources_id: str
    resources: dict[str, Any]


def resource_to_fulmen(name: str, resource: Any) -> Resource:
    """Translate one 0.x resource (or pass a fulmen one); ``NotSupported`` for anything else."""
    if isinstance(resource, PromptTemplate):
        # Stored as fulmen's own type: the 0.x-only fields are not part of the snapshot.
        return FulmenPromptTemplate.model_validate(resource.model_dump())
    if isinstance(resource, LLMResource | FulmenPromptTemplate):
        return resource
    if isinstance(resource, LLM):
        # sampling_parameters go to the snapshot's metadata (snapshot_to_fulmen), unapplied.
        return LLMResource(
            base_url=resource.__dict__["endpoint"], model=resource.model, api_key=resource.api_key
        )
    raise NotSupported(
        f"resource {name!r} of type {type(resource).__name__}",
        why="fulmen publishes LLM endpoints and prompt templates only",
        instead="agl.LLM(...), agl.ProxyLLM(...) or agl.PromptTemplate(..., engine='f-string')",
    )


def resources_to_fulmen(resources: NamedResources) -> dict[str, Resource]:
    """Translate a 0.x named-resources dict for fulmen's store."""
    return {name: resource_to_fulmen(name, res) for name, res in resources.items()}


def resources_from_fulmen(
    resources: dict[str, Resource], sampling: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Return the 0.x view of stored resources (LLMs as ``LLM`` with their upstream URL).

    ``sampling``: each LLM's 0.x ``sampling_parameters`` by name (``snapshot_from_fulmen``);
    an LLM without them shows the sampling fulmen applies to its calls.
    """
    out: dict[str, Any] = {}
    for name, res in resources.items():
        if isinstance(res, LLMResource):
            shown = (sampling or {}).get(name, res.sampling.get("default", {}))
            out[name] = LLM(
                endpoint=res.base_url,
                model=res.model,
                api_key=res.api_key,
                sampling_parameters=dict(shown),
            )
        else:
            out[name] = PromptTemplate.from_fulmen(res)
    return out


# Where a snapshot's metadata keeps 0.x's sampling_parameters, by resource name.
_SAMPLING_KEY = "agl_sampling_parameters"


def snapshot_to_fulmen(resources: NamedResources) -> ResourcesCreate:
    """Return a 0.x named-resources dict as a fulmen snapshot (sampling in its metadata)."""
    sampling: dict[str, JsonData] = {
        name: dict(res.sampling_parameters)
        for name, res in resources.items()
        if isinstance(res, LLM) and res.sampling_parameters
    }
    metadata: dict[str, JsonData] = {_SAMPLING_KEY: sampling} if sampling else {}
    return ResourcesCreate(resources=resources_to_fulmen(resources), metadata=metadata)


def _sampling_of(snapshot: Resources | None) -> dict[str, Any]:
    found = snapshot.metadata.get(_SAMPLING_KEY) if snapshot is not None else None
    return found if isinstance(found, dict) else {}  # pyright: ignore[reportUnknownVariableType]


def snapshot_from_fulmen(snapshot: Resources) -> ResourcesUpdate:
    """Return a stored snapshot as 0.x's ``ResourcesUpdate``."""
    return ResourcesUpdate(
        resources_id=str(snapshot.version),
        resources=resources_from_fulmen(snapshot.resources, _sampling_of(snapshot)),
    )


def named_resources(context: RolloutContext, *, proxy: bool) -> dict[str, Any]:
    """Return the resources a 0.x rollout method receives for this attempt.

    LLMs carry the snapshot's 0.x ``sampling_parameters`` (else the sampling fulmen applies);
    with ``proxy`` (class-form agents, as 0.x gave them a ``ProxyLLM``) they are ``ProxyLLM``
    whose ``get_base_url(rollout_id, attempt_id)`` and ``endpoint`` are both the attempt's
    recording URL, else plain ``LLM`` already routed to it (the decorator forms'
    ``strip_proxy``). ``llm`` is also offered as ``main_llm`` (see the module docstring).
    """
    stored = context.resources.resources if context.resources is not None else {}
    given = _sampling_of(context.resources)
    out: dict[str, Any] = {}
    for name, res in stored.items():
        if not isinstance(res, LLMResource):
            out[name] = PromptTemplate.from_fulmen(res)
            continue
        llm = context.llm(name)
        sampling = dict(given.get(name, llm.sampling))
        if proxy and context.gateway_url is not None:
            out[name] = ProxyLLM(
                endpoint=f"{context.gateway_url.rstrip('/')}/v1",
                model=llm.model,
                api_key=llm.api_key,
                sampling_parameters=sampling,
            ).routed_for(context.rollout_id, context.attempt_id)
        else:
            out[name] = LLM(
                endpoint=llm.base_url, model=llm.model, api_key=llm.api_key,
                sampling_parameters=sampling,
            )  # fmt: skip
    if "llm" in out and MAIN_LLM not in out:
        out[MAIN_LLM] = out["llm"]
    return out
