"""OpenAI's Responses API: ``api`` (the ``WireApi``), ``translate``, ``stream`` and ``tools``."""

__all__: list[str] = []
