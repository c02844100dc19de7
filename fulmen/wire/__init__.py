"""Wire APIs: the model-call APIs agents speak, one home each, below gateway and transitions.

``fulmen.wire.api.WireApi`` declares what differs between APIs (paths, key header, error shape,
translation to an engine's chat path, the SFT export's reading, the OpenAPI route);
``fulmen.wire.table.wire_apis()`` lists them: OpenAI chat completions and completions
(``fulmen.wire.openai``), OpenAI Responses (``fulmen.wire.responses``), Anthropic Messages
(``fulmen.wire.messages``), then any an installed distribution adds.
"""

__all__: list[str] = []
