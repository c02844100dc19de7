"""``ConfigFile``: where a training config was read from, handed to its models as they validate.

A config's relative paths are relative to the file's folder, whoever reads it. Rather than
rewriting the parsed YAML before validation, ``load_config`` passes a ``ConfigFile`` as
pydantic's validation context and each model resolves its own path fields
(``ConfigFile.of(info)``): the run directory and ``python_path`` in the run's config, the task
files in its data section, ``config_dir`` in an agent kind that has one. A model validated
without a file (a test, an embedding program) keeps its paths as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationInfo

__all__ = ["ConfigFile", "flatten"]


@dataclass(frozen=True)
class ConfigFile:
    """The folder and name of a config file, and the keys the command line set (``--set``).

    Attributes:
        folder: the file's folder, absolute: what its relative paths are relative to.
        stem: the file's name without its suffix (a run directory's default name).
        given: dotted keys set by ``--set key=value`` overrides: a path given there is relative
            to the current directory, as any path typed on a command line.
    """

    folder: Path
    stem: str
    given: frozenset[str] = frozenset()

    @classmethod
    def of(cls, info: ValidationInfo) -> ConfigFile | None:
        """Return the file a model is validated for, or ``None`` when it comes from no file."""
        context = info.context
        return context if isinstance(context, cls) else None

    @classmethod
    def section(cls, data: Any, info: ValidationInfo) -> tuple[ConfigFile, dict[str, Any]] | None:
        """Return the file and a copy of a section's mapping to resolve its paths in.

        ``None`` when the model is validated without a file, or is given no mapping.
        """
        file = cls.of(info)
        if file is None or not isinstance(data, dict):
            return None
        return file, dict(cast("dict[str, Any]", data))

    def written(self, key: str) -> bool:
        """Whether ``key`` (``"data.train"``) stands as the file wrote it, not set by ``--set``.

        A ``--set`` of a section holding it (``data``) counts as setting it.
        """
        parts = key.split(".")
        return not any(".".join(parts[:n]) in self.given for n in range(1, len(parts) + 1))

    def resolve(self, key: str, value: str | Path) -> str:
        """Return ``value`` of ``key``, put under the file's folder where the file wrote it.

        An absolute path, or one given with ``--set``, is returned as it is.
        """
        if not self.written(key) or Path(value).is_absolute():
            return str(value)
        return str(self.folder / value)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as the dotted keys of ``--set``: ``{"a": {"b": 1}}`` is ``{"a.b": 1}``.

    A list, a scalar and an empty mapping are leaves (a list of stages changes whole). Run
    identities, ``fulmen runs compare``/``suggest`` and the verl config translation all compare
    configs key by key through it.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(cast("Mapping[str, Any]", value), f"{path}."))
        else:
            out[path] = value
    return out
