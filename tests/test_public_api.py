"""The declared public API: ``__all__`` lists are sorted, complete and importable."""

from __future__ import annotations

import importlib
import pkgutil

import fulmen


def _modules() -> list[str]:
    names = ["fulmen"]
    for info in pkgutil.walk_packages(fulmen.__path__, "fulmen."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):  # also __main__
            continue
        names.append(info.name)
    return names


def test_every_public_name_in_fulmen_all_imports() -> None:
    for name in fulmen.__all__:
        assert getattr(fulmen, name) is not None


def test_fulmen_all_is_sorted() -> None:
    assert list(fulmen.__all__) == sorted(fulmen.__all__)


def test_every_module_declares_all_and_it_resolves() -> None:
    missing: list[str] = []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # an optional extra that is not installed
            if exc.name and not exc.name.startswith("fulmen"):
                continue
            raise
        exported = getattr(module, "__all__", None)
        if exported is None:
            missing.append(name)
            continue
        for attr in exported:
            assert hasattr(module, attr), f"{name}.__all__ lists {attr!r}, which does not exist"
    assert missing == [], f"modules without __all__: {missing}"
