"""The examples in fulmen's docstrings run and print what they show (``doctest``).

Every module under ``fulmen/`` whose source holds a ``>>>`` example is imported and its
examples are run; a docstring example that went stale with the code fails here.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "fulmen"
MODULES = sorted(
    ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in ROOT.rglob("*.py")
    if ">>> " in path.read_text(encoding="utf-8")
)


def test_the_examples_are_found() -> None:
    assert "fulmen.store.urls" in MODULES and len(MODULES) >= 20


# Optional libraries some of these modules import compile with warnings of their own.
@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("name", MODULES)
def test_a_modules_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
