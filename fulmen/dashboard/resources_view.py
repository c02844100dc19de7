"""Prompt versions (text, lineage, scores, side-by-side diffs) and model versions.

Prompt versions are read with ``fulmen.prompts.load_prompt_versions``, the reader behind
``fulmen prompts``; a diff compares the same exported text ``fulmen prompts diff`` compares,
laid out as aligned rows (``same``, ``changed``, ``removed``, ``added``) for two columns.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from fulmen.prompts.versions import PromptVersion, find_prompt_version, load_prompt_versions

if TYPE_CHECKING:
    from fulmen.store.base import Store

__all__ = ["model_versions", "prompt_diff", "prompt_versions", "side_by_side"]


def _prompt(version: PromptVersion) -> dict[str, Any]:
    return {**version.as_json(score_instances=False), "text": version.prompt.export_text()}


async def prompt_versions(store: Store) -> list[dict[str, Any]]:
    """Every distinct prompt version in the store, oldest first, with lineage and scores."""
    return [_prompt(v) for v in await load_prompt_versions(store)]


def side_by_side(left: list[str], right: list[str]) -> list[dict[str, Any]]:
    """Align two texts' lines for a two-column diff.

    Each row has ``kind`` (``same``, ``changed``, ``removed``, ``added``) and the left and
    right line (``None`` where a side has no line); a changed block pairs lines in order.
    """
    rows: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [{"kind": "same", "left": line, "right": line} for line in left[i1:i2]]
            continue
        old, new = left[i1:i2], right[j1:j2]
        for k in range(max(len(old), len(new))):
            a = old[k] if k < len(old) else None
            b = new[k] if k < len(new) else None
            kind = "removed" if b is None else "added" if a is None else "changed"
            rows.append({"kind": kind, "left": a, "right": b})
    return rows


async def prompt_diff(store: Store, a: str, b: str) -> dict[str, Any]:
    """Diff two prompt versions named as ``fulmen prompts diff`` names them (``NAME@V``)."""
    versions = await load_prompt_versions(store)
    left, right = find_prompt_version(versions, a), find_prompt_version(versions, b)
    return {
        "a": left.ref,
        "b": right.ref,
        "rows": side_by_side(
            left.prompt.export_text().splitlines(), right.prompt.export_text().splitlines()
        ),
    }


async def model_versions(store: Store, run_id: str | None) -> list[dict[str, Any]]:
    """Model versions of one run (or every run), newest first."""
    found = await store.list_model_versions(run_id)
    return [v.model_dump(mode="json") for v in reversed(found)]
