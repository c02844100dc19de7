"""fulmen's version, in a module that imports nothing, so every layer may read it."""

__version__ = "0.1.0"
