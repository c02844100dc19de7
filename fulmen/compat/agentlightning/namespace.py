"""Agent Lightning 0.x's module paths and public names under ``fulmen.compat.agentlightning``.

0.x code imports names from the package and from its modules (``from
agentlightning.algorithm.apo import APO``, ``from agentlightning.types import Dataset``). Every
module path of 0.2.x and 0.3.x resolves here, to one of two things:

* a **view** (``MODULES[path] is None``): an empty module whose attributes are resolved by
  name: a working name (``WORKING``: the compat object that does the job), a 0.x submodule, or
  a refused name (``REFUSED``), whose access raises ``NotSupported`` saying what to write
  instead (the tables are in ``fulmen.compat.agentlightning.names``). A 0.x name is the same
  object whichever module it is imported from, as in 0.x.
* a **refused module** (``MODULES[path] == (why, instead)``): importing it raises
  ``NotSupported`` (0.x's tracer, runner, execution strategies, VERL internals, ...).

The views are made by a finder on ``sys.meta_path`` that answers for these paths only (the
way ``six.moves`` serves its table of modules); the compat package installs it once on import.
``tests/compat/agentlightning/test_namespace.py`` walks the export lists of the released 0.x
wheels and checks that every module and name resolves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from fulmen.compat.agentlightning.errors import NotSupported
from fulmen.compat.agentlightning.names import MODULES, REFUSED, WORKING

__all__ = ["PACKAGE", "install", "resolve"]

PACKAGE = "fulmen.compat.agentlightning"


def _refusal(path: str) -> tuple[str, tuple[str, str]] | None:
    """Return the refused module ``path`` is (or lies under), with its reason."""
    parts = path.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        reason = MODULES.get(prefix)
        if reason is not None:
            return prefix, reason
    return None


def _known(path: str) -> bool:
    return path in MODULES or _refusal(path) is not None


def _display(path: str, name: str = "") -> str:
    return ".".join(p for p in ("agentlightning", path, name) if p)


def resolve(path: str, name: str) -> Any:
    """Return 0.x name ``name`` as module ``path`` (``""``: the package) gives it.

    Raises:
        NotSupported: ``name`` is a 0.x name fulmen refuses (the message says what to write).
        AttributeError: ``name`` is no 0.x name.
    """
    target = WORKING.get(name)
    if target is not None:
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(f"{PACKAGE}.{module}"), attribute)
    child = f"{path}.{name}" if path else name
    if not name.startswith("_") and _known(child):
        return importlib.import_module(f"{PACKAGE}.{child}")
    refused = REFUSED.get(name)
    if refused is not None:
        raise NotSupported(_display(path, name), why=refused[0], instead=refused[1])
    where = f"{PACKAGE}.{path}" if path else PACKAGE
    raise AttributeError(f"module {where!r} has no attribute {name!r}")


class _Names(ModuleType):
    """A module whose working 0.x names are not replaced by a 0.x module of the same name.

    Importing ``agentlightning.reward`` (a module) sets the package's ``reward`` attribute to it,
    so ``agl.reward`` (the decorator) would stop being one; the name wins here.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, _View) and name in WORKING:
            return
        super().__setattr__(name, value)


class _View(_Names):
    """A 0.x module path: its names are resolved by ``resolve`` on access."""

    _path: str

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # dunders are the module's own
        return resolve(self._path, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *WORKING})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the 0.x module paths under the compat package, and no others."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """Return a spec for a 0.x module path below the package, else ``None``."""
        prefix = PACKAGE + "."
        if not fullname.startswith(prefix) or not _known(fullname[len(prefix) :]):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """Make the view (refused paths raise in ``exec_module``)."""
        module = _View(spec.name)
        module._path = spec.name[len(PACKAGE) + 1 :]
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Refuse a refused path; give a view its docstring and ``__all__``."""
        path = module.__name__[len(PACKAGE) + 1 :]
        refused = _refusal(path)
        if refused is not None:
            _, (why, instead) = refused
            raise NotSupported(_display(path), why=why, instead=instead)
        module.__doc__ = (
            f"Agent Lightning 0.x's ``{_display(path)}`` on fulmen: its names resolve through "
            f"``{__name__}``."
        )
        module.__dict__["__all__"] = sorted(WORKING)


def install(package: ModuleType) -> None:
    """Serve the 0.x module paths under ``package`` (the compat package itself).

    Puts the finder on ``sys.meta_path`` once (after the path finder: real modules win) and
    gives the package ``_Names``' rule (a documented use of module ``__class__`` assignment).
    """
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
    package.__class__ = _Names
