"""Agent Lightning 0.x example and recipe code in the shape of its own repository's (v0.3.0,
v0.2.2), written for these tests with only the import line pointing at fulmen's layer.

Each module mirrors one 0.x file: its agent form, its calls into ``agentlightning`` and its
training entry point. The outside world those files reached (a retrieval server, Azure, a
hosted OpenAI model, a judge model) is a small local stand-in here, so the tests run offline
on the ``tiny`` model.

They send an API key of their own, as the 0.x files do (``os.environ.get("OPENAI_API_KEY",
"token-abc123")``): the attempt's key is in the URL fulmen hands them (``llm.endpoint``,
``get_base_url``), so the key a client sends does not matter.
"""
