"""Agent names reach the call records with no instrumentation package: the x-fulmen-agent hook.

A real gateway over the scripted engine records what the hook stamped on requests sent by the
``openai`` clients (openai 3 sends through ``httpx2``) and by plain ``httpx``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
from opentelemetry.trace import NoOpTracer

from fulmen import as_agent
from fulmen.tracing.agent_header import install_agent_header, uninstall_agent_header
from fulmen.tracing.context import rollout_scope, set_agent_name
from fulmen.tracing.framework_agents import (
    AgentClassHook,
    framework_agent_name,
    install_framework_agent_hooks,
    uninstall_framework_agent_hooks,
)
from fulmen.types.records import AGENT_NAME_HEADER
from tests.gateway.conftest import (
    Running,
    config,
    gw,
    new_attempt,
    script,
    store,
    upstream_client,
    upstream_url,
)

__all__ = ["config", "gw", "script", "store", "upstream_client", "upstream_url"]

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "tiny-model", "messages": MESSAGES}


@pytest.fixture(autouse=True)
def hook() -> Iterator[list[str]]:
    yield install_agent_header()
    uninstall_agent_header()


async def test_as_agent_names_reach_the_records_from_openai_clients(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    base_url = gw.base_url(rollout_id, attempt_id)

    def critic_in_a_thread() -> None:
        with openai.OpenAI(base_url=base_url, api_key="x") as client:
            client.chat.completions.create(model="tiny-model", messages=MESSAGES)  # type: ignore[arg-type]

    with rollout_scope(NoOpTracer(), rollout_id, attempt_id):
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x") as client:
            with as_agent("planner"):
                await client.chat.completions.create(model="tiny-model", messages=MESSAGES)  # type: ignore[arg-type]
            with as_agent("critic"):
                # A sync client in a worker thread: the thread inherits the rollout's context.
                await asyncio.to_thread(critic_in_a_thread)
            await client.chat.completions.create(model="tiny-model", messages=MESSAGES)  # type: ignore[arg-type]
    calls = await gw.calls(rollout_id)
    assert [c.agent_name for c in calls] == ["planner", "critic", None]
    # The header is the gateway's business: the engine never sees it.
    assert all(AGENT_NAME_HEADER not in h for h in gw.script.headers)


async def test_plain_httpx_and_a_non_ascii_name(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    url = gw.base_url(rollout_id, attempt_id) + "/chat/completions"
    with rollout_scope(NoOpTracer(), rollout_id, attempt_id):
        async with httpx.AsyncClient() as client:
            with as_agent("rédacteur en chef"):
                (await client.post(url, json=CHAT)).raise_for_status()
    (call,) = await gw.calls(rollout_id)
    assert call.agent_name == "rédacteur en chef"


async def test_only_this_attempts_gateway_calls_inside_a_rollout_are_named(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    other_rollout, other_attempt = await new_attempt(gw.store)
    mine = gw.base_url(rollout_id, attempt_id) + "/chat/completions"
    other = gw.base_url(other_rollout, other_attempt) + "/chat/completions"
    async with httpx.AsyncClient() as client:
        with set_agent_name("outsider"):  # a name but no rollout: nothing is stamped
            (await client.post(mine, json=CHAT)).raise_for_status()
        with rollout_scope(NoOpTracer(), rollout_id, attempt_id), as_agent("actor"):
            (await client.post(other, json=CHAT)).raise_for_status()
            own = {AGENT_NAME_HEADER: "chosen-by-the-agent"}
            (await client.post(mine, json=CHAT, headers=own)).raise_for_status()
    assert [c.agent_name for c in await gw.calls(rollout_id)] == [None, "chosen-by-the-agent"]
    assert [c.agent_name for c in await gw.calls(other_rollout)] == [None]


def test_install_is_idempotent_and_uninstall_restores(hook: list[str]) -> None:
    assert "httpx" in hook
    hooked = httpx.AsyncClient.send
    assert install_agent_header() == hook
    assert httpx.AsyncClient.send is hooked  # not wrapped twice
    uninstall_agent_header()
    assert httpx.AsyncClient.send is hooked.__wrapped__  # type: ignore[attr-defined]


class Crewmate:
    """An agent class shaped like a framework's: its turn is a coroutine or a stream."""

    def __init__(self, role: object) -> None:
        self.role = role

    async def take_turn(self, url: str) -> str | None:
        async with httpx.AsyncClient() as client:
            (await client.post(url, json=CHAT)).raise_for_status()
        return framework_agent_name()

    async def stream_turn(self) -> AsyncIterator[str | None]:
        yield framework_agent_name()
        yield framework_agent_name()


class Deckhand(Crewmate):
    """A subclass that inherits the hooked turn."""


CREW_HOOK = AgentClassHook(
    module=__name__,
    class_name="Crewmate",
    methods=("take_turn", "stream_turn", "no_longer_exists"),
    name_attribute="role",
)


@pytest.fixture
def crew_hook() -> Iterator[None]:
    assert install_framework_agent_hooks((CREW_HOOK,)) == [__name__]
    yield
    uninstall_framework_agent_hooks((CREW_HOOK,))


async def test_framework_agent_names_reach_the_records(gw: Running, crew_hook: None) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    url = gw.base_url(rollout_id, attempt_id) + "/chat/completions"
    with rollout_scope(NoOpTracer(), rollout_id, attempt_id):
        assert await Crewmate("navigator").take_turn(url) == "navigator"
        assert await Deckhand("lookout").take_turn(url) == "lookout"
        with as_agent("captain"):  # an explicit name wins over the framework's
            await Crewmate("navigator").take_turn(url)
        # A name that is not a string is no name, never a wrong one.
        assert await Crewmate(None).take_turn(url) is None
    calls = await gw.calls(rollout_id)
    assert [c.agent_name for c in calls] == ["navigator", "lookout", "captain", None]
    assert framework_agent_name() is None  # nothing left behind after the turns


async def test_a_stream_names_its_steps_only(crew_hook: None) -> None:
    stream = Crewmate("navigator").stream_turn()
    assert await anext(stream) == "navigator"
    # Between items the consumer's own code runs unnamed, and stopping early leaves nothing.
    assert framework_agent_name() is None
    assert await anext(stream) == "navigator"
    await stream.aclose()
    assert framework_agent_name() is None


def test_framework_hooks_wrap_once_and_uninstall_restores() -> None:
    original = Crewmate.__dict__["take_turn"]
    assert install_framework_agent_hooks((CREW_HOOK,)) == [__name__]
    hooked = Crewmate.__dict__["take_turn"]
    assert hooked is not original
    install_framework_agent_hooks((CREW_HOOK,))
    assert Crewmate.__dict__["take_turn"] is hooked  # not wrapped twice
    assert "take_turn" not in Deckhand.__dict__  # inherited, so not wrapped again
    uninstall_framework_agent_hooks((CREW_HOOK,))
    assert Crewmate.__dict__["take_turn"] is original
    # A framework that is not imported is not hooked (fulmen never imports it).
    absent = AgentClassHook(
        module="not_imported_framework", class_name="A", methods=(), name_attribute="n"
    )
    assert install_framework_agent_hooks((absent,)) == []
