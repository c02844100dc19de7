"""The trainer: wires store, engine, gateway, runners and the configured algorithms into one run."""

from __future__ import annotations

__all__: list[str] = []
