"""The wire APIs the gateway translates to an engine's chat path, by endpoint.

``TRANSLATED`` maps an endpoint (the path below ``/v1``) to the ``Translation`` one call of it
uses: ``responses`` (OpenAI Responses, ``fulmen.gateway.responses``) and ``messages``
(Anthropic Messages, ``fulmen.gateway.messages``). Each class here only binds its API's pure
functions to one call's request and ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from fulmen.gateway.capture import MESSAGES, RESPONSES
from fulmen.gateway.errors import error_body_for
from fulmen.gateway.messages import MessageIds, message_from_chat
from fulmen.gateway.messages import chat_request as messages_chat_request
from fulmen.gateway.messages_stream import MessageEvents
from fulmen.gateway.responses import ResponseIds, response_from_chat
from fulmen.gateway.responses import chat_request as responses_chat_request
from fulmen.gateway.responses_stream import ResponseEvents
from fulmen.gateway.responses_tools import served_tools
from fulmen.gateway.translation import ChatTranslation, EventStream, Translation

__all__ = ["TRANSLATED", "MessagesTranslation", "ResponsesTranslation"]


class ResponsesTranslation:
    """One Responses call served as a chat completion (``Translation``)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.ids = ResponseIds()
        self._chat: ChatTranslation | None = None

    def chat(self) -> ChatTranslation:
        """Return the chat request to send (built once, then cached)."""
        if self._chat is None:
            request = responses_chat_request(self.body)
            self._chat = ChatTranslation(request, served_tools(self.body.get("tools"))[1])
        return self._chat

    def behaviour_fields(self) -> Mapping[str, Any]:
        """Return the agent's request: the behaviour rules name Responses fields themselves."""
        return self.body

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """Return the Responses object for the engine's chat reply."""
        return response_from_chat(chat, self.body, self.ids)

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Return the engine's error body as it is (both speak OpenAI's error shape)."""
        del status
        return body

    def events(self) -> EventStream:
        """Return the Responses event stream of this call."""
        return ResponseEvents(self.body, self.ids)


class MessagesTranslation:
    """One Anthropic Messages call served as a chat completion (``Translation``)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.ids = MessageIds()
        self._chat: ChatTranslation | None = None

    def chat(self) -> ChatTranslation:
        """Return the chat request to send (built once, then cached)."""
        if self._chat is None:
            self._chat = messages_chat_request(self.body)
        return self._chat

    def behaviour_fields(self) -> Mapping[str, Any]:
        """Return the chat request: its ``tool_choice`` is the one the rules know."""
        return self.chat().request

    def reply(self, chat: Mapping[str, Any]) -> dict[str, Any]:
        """Return the Messages object for the engine's chat reply."""
        return message_from_chat(chat, self.body, self.ids)

    def error_reply(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Return the engine's OpenAI-shaped error body in Anthropic's shape."""
        return error_body_for(MESSAGES, status, body)

    def events(self) -> EventStream:
        """Return the Messages event stream of this call."""
        return MessageEvents(self.body, self.ids)


#: The translated endpoints and the ``Translation`` a call of each is given.
TRANSLATED: Final[Mapping[str, Callable[[Mapping[str, Any]], Translation]]] = {
    RESPONSES: ResponsesTranslation,
    MESSAGES: MessagesTranslation,
}
