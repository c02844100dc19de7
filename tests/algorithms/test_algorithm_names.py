"""No algorithm is named outside its own package and the registry (issue 49's seam).

The trainer, the CLI, the deploy planner and the rest reach an algorithm only through its
registry row and the members its config section declares (``AlgorithmSection``); a string
equal to an algorithm's name, or an import of an algorithm's package, anywhere else would be a
place a new algorithm must be added by hand. Docstrings may name them (they explain).
"""

from __future__ import annotations

import ast
from pathlib import Path

from fulmen.algorithms.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2] / "fulmen"
NAMES = {a.name for a in ALGORITHMS}
#: Places that name algorithms for a reason of their own, each with it.
ALLOWED = {
    # translates Agent Lightning's algorithm configs (verl, APO) into fulmen's
    "compat/agentlightning/algorithms.py": "translation",
    "compat/agentlightning/trainer_config.py": "translation",
    "compat/agentlightning/verl_config.py": "translation",
    # `fulmen export sft`: the name of a data format (chat transcripts), not of the algorithm
    "cli/export.py": "export format",
}


def _owner(path: Path) -> str | None:
    """The algorithm whose package holds ``path``, if any."""
    if not path.is_relative_to(ROOT):
        return None
    parts = path.relative_to(ROOT).parts
    if len(parts) >= 3 and parts[0] == "algorithms" and parts[1] in NAMES:
        return parts[1]
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of ``tree`` (module, classes, functions)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _named(path: Path) -> list[str]:
    """Each place in ``path`` that names another package's algorithm: ``line: what``."""
    owner = _owner(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = _docstrings(tree)
    out: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in NAMES - {owner}
            and id(node) not in docstrings
        ):
            out.append(f"{node.lineno}: the string {node.value!r}")
        if isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            modules += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                parts = [*module.split("."), "", ""]
                if parts[:2] == ["fulmen", "algorithms"] and parts[2] in NAMES - {owner}:
                    out.append(f"{node.lineno}: an import of {module}")
    return out


def test_no_algorithm_is_named_outside_its_package_and_the_registry() -> None:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "algorithms/registry.py" or relative in ALLOWED:
            continue
        named = _named(path)
        if named:
            found[relative] = named
    assert found == {}


def test_the_check_sees_a_name_and_an_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Doc: grpo."""\nfrom fulmen.algorithms.ppo.config import X\nNAME = "dpo"\n'
    )
    assert _named(sample) == [
        "2: an import of fulmen.algorithms.ppo.config",
        "3: the string 'dpo'",
    ]
