"""``CallPlan``: how the gateway will serve one model call, decided before anything is sent.

``Gateway.plan`` reads the request, its rollout's context and the gateway's parts (the model
map, a release's arms, production sessions, seeds, the engine the call goes to first) once;
what it decides is this frozen value, which the call in flight (``fulmen.gateway.proxy``)
sends, streams and records without asking the gateway again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.wire.openai import CHAT

if TYPE_CHECKING:
    from fulmen.types.releases import ReleaseArm
    from fulmen.wire.api import WireApi
    from fulmen.wire.translation import Translation

__all__ = ["CallPlan"]


@dataclass(frozen=True, slots=True)
class CallPlan:
    """The decisions about one model call (see the module docstring).

    Attributes:
        call_id: the record's id (also the ``x-fulmen-call-id`` reply header).
        api: the wire API the agent called.
        agent_name: the agent's name header, if it sent one.
        model: the model name the engine gets (``GatewayConfig.model_map``, or a release
            arm's model); resources are matched by it.
        overrides: fields that replace the agent's in the body sent (the mapped model, a
            rollout's resources' sampling settings).
        seed: a seeded rollout's seed for this call (only fulmen's engines get it).
        translation: the chat-completion form of a Responses or Messages call whose first
            engine returns token ids; ``None`` sends the call as it is.
        session_id: the production session an untracked call belongs to.
        arm: the release arm that serves a production call.
    """

    call_id: str
    api: WireApi
    agent_name: str | None
    model: str | None
    overrides: Mapping[str, Any]
    seed: int | None
    translation: Translation | None
    session_id: str | None = None
    arm: ReleaseArm | None = None

    @property
    def endpoint(self) -> str:
        """The path below ``/v1`` the agent called (its API's endpoint)."""
        return self.api.endpoint

    @property
    def engine_endpoint(self) -> str:
        """The path below ``/v1`` the engine gets: chat completions when translated."""
        return CHAT if self.translation is not None else self.api.endpoint
