"""fulmen's version, in a module that imports nothing, so every layer may read it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
