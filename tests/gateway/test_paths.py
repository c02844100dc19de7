"""The forwarded-path allowlist, built from the wire APIs' own paths (``fulmen.gateway.paths``)."""

from __future__ import annotations

import pytest

from fulmen.gateway.paths import is_model_path


@pytest.mark.parametrize(
    ("method", "endpoint"),
    [
        ("POST", "chat/completions"),
        ("POST", "completions"),
        ("POST", "responses"),
        ("POST", "messages"),
        ("POST", "messages/count_tokens"),
        ("POST", "embeddings"),
        ("GET", "models"),
        ("GET", "models/gemma-3-270m"),
        ("GET", "responses/resp_1"),
        ("GET", "responses/resp_1/input_items"),
        ("DELETE", "responses/resp_1"),
    ],
)
def test_every_wire_apis_paths_are_forwarded(method: str, endpoint: str) -> None:
    assert is_model_path(method, endpoint)


@pytest.mark.parametrize(
    ("method", "endpoint"),
    [
        ("POST", "load_lora_adapter"),
        ("POST", "models"),  # a path of another method
        ("GET", "chat/completions"),
        ("DELETE", "models/x"),
        ("GET", "models/a/b"),  # an id is one segment
        ("GET", "models/../health"),
        ("GET", "responses/.hidden"),  # an id does not start with a dot
        ("GET", "responses/r%2Fx"),  # no percent-escape an upstream could decode
        ("POST", "messages/count_tokens/x"),
        ("PUT", "responses/r"),
    ],
)
def test_anything_else_is_not(method: str, endpoint: str) -> None:
    assert not is_model_path(method, endpoint)
