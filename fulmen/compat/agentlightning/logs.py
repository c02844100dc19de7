"""0.x's logging setup (``setup_logging``, ``setup_module_logging``, ``configure_logger``).

0.x configured its ``agentlightning`` logger; fulmen logs under ``fulmen`` (training
progress under ``fulmen.train``). ``setup`` (exported as ``setup_logging``) configures both,
so the records of fulmen and of the user's own ``agentlightning.*`` loggers reach the console
and files 0.x's call named. Output is plain text: ``color`` is accepted and has no effect
(0.x used ``rich``, which fulmen does not depend on).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["configure_logger", "setup", "setup_module"]

_FORMAT = "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
# The loggers 0.x's setup configured, and fulmen's own.
_ROOTS = ("agentlightning", "fulmen")
_MARK = "_agl_compat"


def _level(level: int | str) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ValueError(f"Invalid log level: {level!r}")
    return value


def _console(logger: logging.Logger, formatter: logging.Formatter | None) -> None:
    """Give ``logger`` one stderr handler of this layer (a second call adds none)."""
    for handler in logger.handlers:
        if getattr(handler, _MARK, False):
            handler.setFormatter(formatter or logging.Formatter(_FORMAT))
            return
    handler = logging.StreamHandler()
    handler.setFormatter(formatter or logging.Formatter(_FORMAT))
    setattr(handler, _MARK, True)
    logger.addHandler(handler)


def setup_module(
    level: int | str = "INFO",
    *,
    name: str = "agentlightning",
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
) -> logging.Logger:
    """Configure one logger (``name``): level, a console handler, propagation; return it."""
    logger = logging.getLogger(name)
    logger.setLevel(_level(level))
    logger.propagate = propagate
    if console:
        _console(logger, None)
    if disable_existing_loggers:
        for other in logging.root.manager.loggerDict.values():
            if isinstance(other, logging.Logger) and not other.name.startswith(_ROOTS):
                other.disabled = True
    return logger


def setup(
    level: int | str = "INFO",
    *,
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: dict[str, int | str] | None = None,
    extra_handlers: list[logging.Handler] | None = None,
    formatter: logging.Formatter | None = None,
    apply_to: list[str] | None = None,
    files: str | dict[str, str] | None = None,
) -> None:
    """Configure the ``agentlightning`` and ``fulmen`` loggers (0.x's ``setup_logging``).

    Args:
        level: the level of both loggers (and of ``apply_to``'s).
        console: add a stderr handler.
        color: accepted; output is plain text.
        propagate: let records reach the root logger too.
        disable_existing_loggers: disable every other logger already created.
        capture_warnings: route ``warnings`` through logging.
        submodule_levels: logger name → level, for finer control (``"fulmen.train": "DEBUG"``).
        extra_handlers: handlers added to both loggers.
        formatter: the console handler's format (default: 0.x's).
        apply_to: other logger names configured the same way.
        files: a file every configured logger also writes, or logger name → file.
    """
    names = [*_ROOTS, *(apply_to or [])]
    for name in names:
        logger = setup_module(
            level, name=name, console=console, color=color, propagate=propagate,
            disable_existing_loggers=disable_existing_loggers,
        )  # fmt: skip
        if console and formatter is not None:
            _console(logger, formatter)
        for handler in extra_handlers or []:
            if handler not in logger.handlers:
                logger.addHandler(handler)
    for name, sub_level in (submodule_levels or {}).items():
        logging.getLogger(name).setLevel(_level(sub_level))
    targets = dict.fromkeys(names, files) if isinstance(files, str) else dict(files or {})
    for name, path in targets.items():
        logger = logging.getLogger(name)
        if not any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
            handler = logging.FileHandler(path)
            handler.setFormatter(formatter or logging.Formatter(_FORMAT))
            logger.addHandler(handler)
    if capture_warnings:
        logging.captureWarnings(True)


def configure_logger(level: int = logging.INFO, name: str = "fulmen") -> logging.Logger:
    """Send ``name``'s records at ``level`` and above to stderr once; return that logger.

    0.x configured its ``agentlightning`` logger; here the default is fulmen's. Calling it
    again for the same logger adds no second handler.
    """
    logger = logging.getLogger(name)
    logger.setLevel(level)
    _console(logger, None)
    return logger
