"""Which of an attempt's calls are trained, beyond the agent names: ``transitions.calls``.

A command agent's rollout often holds calls that are not the policy acting: Claude Code asks a
small model for a title, a summariser compresses history, a sub-agent answers a side question.
``CallSelection`` keeps the calls that match every rule given: the model name the agent asked
for, the session headers its client sent (recorded by the gateway as ``client_headers``), and
whether the call offered tools. A call left out is counted as ``skipped_selection``.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fulmen.types import LLMCall

__all__ = ["CallSelection"]


class CallSelection(BaseModel):
    """Rules a call must meet to be trained (all of them; the defaults keep every call).

    Attributes:
        models: fnmatch patterns of the model name the agent asked for (as it sent it, before
            the gateway's ``model_map``); ``["claude-sonnet-*"]`` leaves out Claude Code's
            calls to a small model for titles and summaries.
        headers: header name → fnmatch pattern its recorded value must match; a call that did
            not send the header does not match (``{"thread-id": "main-*"}``).
        tools: ``with`` keeps only calls that offered tools (an agent's acting turns),
            ``without`` only calls that offered none, ``any`` (default) both.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[str, ...] = ("*",)
    headers: dict[str, str] = Field(default_factory=dict)
    tools: Literal["any", "with", "without"] = "any"

    @field_validator("headers")
    @classmethod
    def _lower(cls, value: dict[str, str]) -> dict[str, str]:
        return {name.lower(): pattern for name, pattern in value.items()}

    @property
    def keeps_all(self) -> bool:
        """Whether these rules leave every call in (the default)."""
        return self.models == ("*",) and not self.headers and self.tools == "any"

    def keeps(self, call: LLMCall) -> bool:
        """Tell whether ``call`` meets every rule."""
        if self.keeps_all:
            return True
        model = call.request.get("model")
        name = model if isinstance(model, str) else ""
        if not any(fnmatchcase(name, pattern) for pattern in self.models):
            return False
        for header, pattern in self.headers.items():
            value = call.client_headers.get(header)
            if value is None or not fnmatchcase(value, pattern):
                return False
        if self.tools != "any":
            has_tools = bool(call.request.get("tools"))
            if has_tools != (self.tools == "with"):
                return False
        return True
