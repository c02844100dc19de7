"""Span and attribute names fulmen emits, and readers that get rewards and agent names back.

This module is the single place that defines them: the emitters write these names and
``fulmen.transitions`` reads rewards and agent attribution through the functions below, never
by spelling the names itself. ``gen_ai.*`` names follow the OpenTelemetry GenAI semantic
conventions where they cover the meaning; ``fulmen.*`` names cover the rest (rewards, rollout
ids, observations).

A reward span (name ``fulmen.reward``) carries two parallel lists, ``fulmen.reward.names`` and
``fulmen.reward.values``, plus ``fulmen.reward.primary``: OTel attributes are flat, and lists keep
reward names that contain dots intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types import Span

__all__ = [
    "AGENT_NAME",
    "ATTEMPT_ID",
    "COMMAND_DURATION_S",
    "COMMAND_EXIT_CODE",
    "COMMAND_OUTPUT_BYTES",
    "COMMAND_ROLE",
    "COMMAND_SANDBOX",
    "COMMAND_STATUS",
    "COMMAND_STDERR",
    "COMMAND_STDOUT",
    "DEFAULT_REWARD_NAME",
    "EXCEPTION_MESSAGE",
    "EXCEPTION_STACKTRACE",
    "EXCEPTION_TYPE",
    "MESSAGE_CONTENT",
    "MESSAGE_ROLE",
    "OBSERVATION_CONTENT",
    "OPERATION_NAME",
    "RESPONSE_ID",
    "REWARD_NAMES",
    "REWARD_PRIMARY",
    "REWARD_SOURCE",
    "REWARD_VALUES",
    "ROLLOUT_ID",
    "SPAN_AGENT",
    "SPAN_COMMAND",
    "SPAN_EXCEPTION",
    "SPAN_MESSAGE",
    "SPAN_OBSERVATION",
    "SPAN_OPERATION",
    "SPAN_REWARD",
    "SPAN_ROLLOUT",
    "RewardEvent",
    "agent_name_of",
    "agent_names_by_response_id",
    "primary_reward",
    "reward_events",
    "rewards_from_spans",
]

# -- span names -------------------------------------------------------------------------------
SPAN_ROLLOUT: Final = "fulmen.rollout"  # the root span of one attempt
SPAN_AGENT: Final = "fulmen.agent"  # opened by ``as_agent(name)``
SPAN_OPERATION: Final = "fulmen.operation"  # default name of ``operation()`` spans
SPAN_REWARD: Final = "fulmen.reward"
SPAN_OBSERVATION: Final = "fulmen.observation"
SPAN_MESSAGE: Final = "fulmen.message"
SPAN_EXCEPTION: Final = "fulmen.exception"
SPAN_COMMAND: Final = "fulmen.command"  # how a command agent (or its verifier) ended

# -- attributes stamped on every span emitted inside a rollout --------------------------------
ROLLOUT_ID: Final = "fulmen.rollout.id"
ATTEMPT_ID: Final = "fulmen.attempt.id"
AGENT_NAME: Final = "gen_ai.agent.name"  # OTel GenAI convention

# -- attributes of particular spans ------------------------------------------------------------
REWARD_NAMES: Final = "fulmen.reward.names"
REWARD_VALUES: Final = "fulmen.reward.values"
REWARD_PRIMARY: Final = "fulmen.reward.primary"
REWARD_SOURCE: Final = "fulmen.reward.source"  # "emit" or "return"
DEFAULT_REWARD_NAME: Final = "reward"
OBSERVATION_CONTENT: Final = "fulmen.observation.content"
MESSAGE_ROLE: Final = "gen_ai.message.role"
MESSAGE_CONTENT: Final = "gen_ai.message.content"
OPERATION_NAME: Final = "fulmen.operation.name"
RESPONSE_ID: Final = "gen_ai.response.id"  # OTel GenAI convention
EXCEPTION_TYPE: Final = "exception.type"  # OTel general convention
EXCEPTION_MESSAGE: Final = "exception.message"
EXCEPTION_STACKTRACE: Final = "exception.stacktrace"
COMMAND_ROLE: Final = "fulmen.command.role"  # "command" or "verifier"
COMMAND_STATUS: Final = "fulmen.command.status"  # exited, timeout, output_limit, ...
COMMAND_EXIT_CODE: Final = "fulmen.command.exit_code"
COMMAND_DURATION_S: Final = "fulmen.command.duration_s"
COMMAND_STDOUT: Final = "fulmen.command.stdout"
COMMAND_STDERR: Final = "fulmen.command.stderr"
COMMAND_OUTPUT_BYTES: Final = "fulmen.command.output_bytes"
COMMAND_SANDBOX: Final = "fulmen.command.sandbox"

# Attributes other instrumentations use for an agent or graph-node name, in order of preference.
_AGENT_NAME_KEYS: Final = (AGENT_NAME, "agent.name", "graph.node.name", "graph.node.id")
_OPENINFERENCE_METADATA: Final = "metadata"  # JSON string; LangGraph puts "langgraph_node" in it


@dataclass(frozen=True)
class RewardEvent:
    """One reward span read back: its store sequence number, values, primary name and agent."""

    sequence: int
    values: dict[str, float]
    primary: str | None
    source: str | None
    agent_name: str | None


def reward_events(spans: Iterable[Span]) -> list[RewardEvent]:
    """Read the reward spans among ``spans`` in sequence order (skipping malformed ones)."""
    events: list[RewardEvent] = []
    for span in sorted(spans, key=lambda s: s.sequence):
        if span.name != SPAN_REWARD:
            continue
        names = span.attributes.get(REWARD_NAMES)
        values = span.attributes.get(REWARD_VALUES)
        if not isinstance(names, list) or not isinstance(values, list):
            continue
        if len(names) != len(values):
            continue
        parsed = {
            str(n): float(v)
            for n, v in zip(names, values, strict=True)
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        primary = span.attributes.get(REWARD_PRIMARY)
        source = span.attributes.get(REWARD_SOURCE)
        events.append(
            RewardEvent(
                sequence=span.sequence,
                values=parsed,
                primary=primary if isinstance(primary, str) else None,
                source=source if isinstance(source, str) else None,
                agent_name=agent_name_of(span.attributes),
            )
        )
    return events


def rewards_from_spans(spans: Iterable[Span]) -> dict[str, float]:
    """Every named reward of an attempt; when a name was emitted twice the later one wins.

    "Later" is by store sequence number, so a rollout function's return value (emitted when it
    returns) overrides an ``emit_reward`` of the same name made before.
    """
    out: dict[str, float] = {}
    for event in reward_events(spans):
        out.update(event.values)
    return out


def primary_reward(spans: Iterable[Span]) -> float | None:
    """Return the attempt's primary reward: the value the latest reward span names primary.

    Returns ``None`` when no reward was emitted.
    """
    events = reward_events(spans)
    merged: dict[str, float] = {}
    primary: str | None = None
    for event in events:
        merged.update(event.values)
        if event.primary is not None:
            primary = event.primary
    if primary is None:
        return None
    return merged.get(primary)


def agent_name_of(attributes: Mapping[str, JsonValue]) -> str | None:
    """Read the agent name in a span's attributes (fulmen's, OpenInference's, LangGraph's)."""
    for key in _AGENT_NAME_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    metadata = attributes.get(_OPENINFERENCE_METADATA)
    if isinstance(metadata, str):
        try:
            parsed = json.loads(metadata)
        except ValueError:
            return None
        node = parsed.get("langgraph_node") if isinstance(parsed, dict) else None
        if isinstance(node, str) and node:
            return node
    return None


def agent_names_by_response_id(spans: Sequence[Span]) -> dict[str, str]:
    """Map LLM response ids seen in in-process spans to the agent that made the call.

    The gateway's ``LLMCall.response_id`` is the join key (never clocks). A span names a response
    by ``gen_ai.response.id`` or, for OpenInference spans, by the ``id`` inside its JSON
    ``output.value``. The agent is the span's own agent name or, failing that, the nearest
    ancestor's (following ``parent_id`` within the attempt). Reward spans are not read here
    (they name the call they judge, not the agent that made it). Calls absent from the result
    belong to the rollout as a whole.
    """
    by_id = {(s.attempt_id, s.span_id): s for s in spans}
    out: dict[str, str] = {}
    for span in sorted(spans, key=lambda s: s.sequence):
        if span.name == SPAN_REWARD:
            continue  # a reward naming a call may come from another agent (a judge)
        response_id = _response_id(span.attributes)
        if response_id is None or response_id in out:
            continue  # the first span naming a response is the call's own
        node: Span | None = span
        seen: set[str] = set()
        while node is not None and node.span_id not in seen:
            seen.add(node.span_id)
            name = agent_name_of(node.attributes)
            if name is not None:
                out[response_id] = name
                break
            parent = node.parent_id
            node = by_id.get((node.attempt_id, parent)) if parent is not None else None
    return out


def _response_id(attributes: Mapping[str, JsonValue]) -> str | None:
    value = attributes.get(RESPONSE_ID)
    if isinstance(value, str) and value:
        return value
    output = attributes.get("output.value")
    if isinstance(output, str) and output.startswith("{"):
        try:
            parsed = json.loads(output)
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        # OpenAI-style output carries "id" at the top; LangChain's LLM spans nest it in
        # "llm_output" (the node name comes from the same span's metadata).
        llm_output = parsed.get("llm_output")
        for found in (
            parsed.get("id"),
            llm_output.get("id") if isinstance(llm_output, dict) else None,
        ):
            if isinstance(found, str) and found:
                return found
    return None
