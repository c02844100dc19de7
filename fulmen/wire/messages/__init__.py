"""Anthropic's Messages API: ``api`` (the ``WireApi``), ``translate`` and ``stream``."""

__all__: list[str] = []
