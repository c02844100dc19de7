"""Import the object a ``"package.module:attribute"`` string names, for config values and options.

Agents, task factories, prompts, reward functions, hooks: users name them all the same way, and a
name that cannot be imported should fail the same way, as a ``ConfigError`` that names the option.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from fulmen.errors import ConfigError

__all__ = [
    "import_object",
    "installed_entries",
    "lazy_attributes",
    "put_first_on_sys_path",
    "user_frame",
]

T = TypeVar("T")


def import_object(spec: str, *, what: str) -> Any:
    """Import the object ``spec`` (``"package.module:attr.path"``) names.

    ``what`` names the option in the errors: ``ConfigError`` when ``spec`` is not of that shape
    or its module or attribute cannot be imported.
    """
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"{what} must look like 'module:attribute', got {spec!r}")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import {what} {spec!r}: {exc}{user_frame(exc)}") from exc
    except Exception as exc:  # the module itself raised while it was imported
        raise ConfigError(
            f"cannot import {what} {spec!r}: its module raised {type(exc).__name__}: {exc}"
            f"{user_frame(exc)}"
        ) from exc
    return value


def put_first_on_sys_path(paths: Iterable[Path | str]) -> None:
    """Put ``paths`` at the front of ``sys.path``, in their order, moving any already there.

    A config's ``python_path`` must win over whatever an earlier run in the same process left on
    ``sys.path``: an entry merely kept where it was could sit behind an older folder holding a
    module of the same name (``agent.py``), and the older module would be imported instead.
    """
    first = list(dict.fromkeys(str(p) for p in paths))
    sys.path[:] = [*first, *(entry for entry in sys.path if entry not in first)]


def user_frame(exc: BaseException) -> str:
    """Return `` (at FILE:LINE)``: where the user's code failed, else ``""``.

    A ``SyntaxError`` (and ``IndentationError``) names the file and line it could not compile
    itself: it has no frame there. Any other error gets the deepest frame of its traceback
    outside importlib (frozen or the standard library's) and fulmen, so an import that fails
    inside the user's module (a ``NameError``, a missing package) points at the user's line,
    without the dozens of frames of importlib and fulmen above it; one that has no such frame
    (a module that does not exist) gets none rather than importlib's own line.
    """
    if isinstance(exc, SyntaxError) and exc.filename and not exc.filename.startswith("<"):
        return f" (at {exc.filename}:{exc.lineno})" if exc.lineno else f" (in {exc.filename})"
    fulmen_dir = str(Path(__file__).parent)
    importlib_dir = str(Path(importlib.__file__).parent)
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        # "<frozen importlib._bootstrap>", importlib/__init__.py, fulmen's own modules
        if not f.filename.startswith(("<", fulmen_dir, importlib_dir))
    ]
    if not frames:
        return ""
    return f" (at {frames[-1].filename}:{frames[-1].lineno})"


def installed_entries(group: str, kind: type[T], *, what: str) -> list[tuple[str, T]]:
    """Load the entry points installed distributions declare in ``group``, sorted by name.

    Each must load to an instance of ``kind``; returns ``(label, value)`` pairs, the label
    naming the entry point for the caller's own errors. ``what`` names the seam in the errors:
    a ``ConfigError`` naming the entry point when one does not load or is of another type.
    """
    from importlib.metadata import entry_points

    found: list[tuple[str, T]] = []
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        label = f"the {what} entry point {entry.name!r} ({entry.value})"
        try:
            value = entry.load()
        except Exception as exc:  # any import error of a plugin: say which one
            raise ConfigError(f"{label} does not load: {type(exc).__name__}: {exc}") from exc
        if not isinstance(value, kind):
            raise ConfigError(f"{label} is not a {kind.__module__}.{kind.__qualname__}")
        found.append((label, value))
    return found


def lazy_attributes(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """Return a package's ``__getattr__`` (PEP 562) that imports its public names on first use.

    ``modules`` maps each lazy name to the module defining it; the value found is kept in the
    package's ``namespace`` (its ``globals()``), so the import runs once. Packages use it so that
    importing them stays fast: the store backends, HTTP stacks and torch load only when a name
    that needs them is used.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
