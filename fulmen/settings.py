"""``Settings``: the ``FULMEN_*`` environment variables, read once in one place.

Commands build one ``Settings`` at start (``Settings.from_env()``) and pass its values down;
library code takes them as arguments and never reads the environment itself, so a test or an
embedding program can hand any component its own settings. Variables:

==========================  =====================================================================
``FULMEN_STORE_URL``        the store commands open (``http://host:port``, ``sqlite:///...``, ...)
``FULMEN_STORE_TOKEN``      bearer token for a protected store (``fulmen store serve --token``)
``FULMEN_STORE_DB``         the backend ``fulmen store serve`` serves
``FULMEN_GATEWAY_TOKEN``    bearer token the gateway requires and runners send (``FULMEN_TOKEN``
                            is read when it is unset, for older setups)
``FULMEN_ENGINE_TOKEN``     the built-in engine's admin token (``fulmen serve``): its routes that
                            change the served weights require it; vLLM gets it as its API key
``FULMEN_CACHE_DIR``        where built models are cached (default ``~/.cache/fulmen/models``)
``FULMEN_SPILL_DIR``        where runners and gateways spill records while the store is away
                            (default ``~/.cache/fulmen/spill``)
``FULMEN_VLLM_PYTHON``      the interpreter that has vLLM installed
``FULMEN_PYTHON``           the Python a training run starts its built-in engine and
                            data-parallel ranks with (default: the one running fulmen)
==========================  =====================================================================

Empty values count as unset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = ["PYTHON_VARIABLE", "Settings", "inherited_environment", "launcher_variable"]

#: The variable naming the Python a run starts its engine and data-parallel ranks with; the
#: algorithms read it from the run's settings by this name.
PYTHON_VARIABLE = "FULMEN_PYTHON"


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def launcher_variable(name: str) -> str | None:
    """Return a variable another program's launcher sets for this process, read now.

    ``torchrun`` tells a rank who it is (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and a
    parent hands its children ``PYTHONPATH``; these are not fulmen settings, but they are read
    here so that this module stays the only reader of the environment.
    """
    return _get(os.environ, name)


def inherited_environment(names: Iterable[str]) -> dict[str, str]:
    """Return the variables ``names`` of this process's environment, values as they are.

    For a child process that inherits only these (a command agent gets ``PATH``, ``LANG`` and
    the names its config passes), here so that this module stays the only reader of the
    environment. Absent names are left out.
    """
    return {name: os.environ[name] for name in names if name in os.environ}


def _default_cache_root() -> Path:
    return Path.home() / ".cache" / "fulmen"


@dataclass(frozen=True)
class Settings:
    """fulmen's settings from the environment; see the module docstring for each variable.

    Attributes:
        store_url: ``$FULMEN_STORE_URL``.
        store_token: ``$FULMEN_STORE_TOKEN``.
        store_db: ``$FULMEN_STORE_DB``.
        gateway_token: ``$FULMEN_GATEWAY_TOKEN``, else ``$FULMEN_TOKEN``.
        engine_token: ``$FULMEN_ENGINE_TOKEN``.
        cache_dir: ``$FULMEN_CACHE_DIR``, else ``~/.cache/fulmen/models``.
        spill_dir: ``$FULMEN_SPILL_DIR``, else ``~/.cache/fulmen/spill``.
        vllm_python: ``$FULMEN_VLLM_PYTHON``.
        python: ``$FULMEN_PYTHON``.
        environ: a read-only copy of the environment taken with the rest, for variables the
            user names on the command line (``--upstream-api-key-env VAR``).
    """

    store_url: str | None = None
    store_token: str | None = None
    store_db: str | None = None
    gateway_token: str | None = None
    engine_token: str | None = None
    cache_dir: Path = field(default_factory=lambda: _default_cache_root() / "models")
    spill_dir: Path = field(default_factory=lambda: _default_cache_root() / "spill")
    vllm_python: str | None = None
    python: str | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ`` (default: ``os.environ``), once."""
        env = dict(os.environ if environ is None else environ)
        cache = _get(env, "FULMEN_CACHE_DIR")
        spill = _get(env, "FULMEN_SPILL_DIR")
        return cls(
            store_url=_get(env, "FULMEN_STORE_URL"),
            store_token=_get(env, "FULMEN_STORE_TOKEN"),
            store_db=_get(env, "FULMEN_STORE_DB"),
            gateway_token=_get(env, "FULMEN_GATEWAY_TOKEN") or _get(env, "FULMEN_TOKEN"),
            engine_token=_get(env, "FULMEN_ENGINE_TOKEN"),
            cache_dir=Path(cache).expanduser() if cache else _default_cache_root() / "models",
            spill_dir=Path(spill).expanduser() if spill else _default_cache_root() / "spill",
            vllm_python=_get(env, "FULMEN_VLLM_PYTHON"),
            python=_get(env, PYTHON_VARIABLE),
            environ=MappingProxyType(env),
        )

    def variable(self, name: str) -> str | None:
        """Return the environment variable ``name`` as it was when the settings were read."""
        return _get(self.environ, name)
