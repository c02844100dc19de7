"""``configure_logger``: 0.x's one-call logging setup, for fulmen's and the caller's loggers."""

from __future__ import annotations

import logging

__all__ = ["configure_logger"]


def configure_logger(level: int = logging.INFO, name: str = "fulmen") -> logging.Logger:
    """Send ``name``'s records at ``level`` and above to stderr once; return that logger.

    0.x configured its ``agentlightning`` logger; here the default is fulmen's. Calling it
    again for the same logger adds no second handler.
    """
    logger = logging.getLogger(name)
    logger.setLevel(level)
    if not any(getattr(h, "_agl_compat", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._agl_compat = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    return logger
