"""``--set key.path=value``: a config override applied to the parsed YAML before validation.

The one edit ``load_config`` makes to what the file says: the command line's values win.
"""

from __future__ import annotations

from typing import Any, cast

from fulmen.errors import ConfigError

__all__ = ["apply_override"]


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Set ``"dotted.key=value"`` (the value parsed as YAML) in the parsed config ``raw``.

    A missing mapping on the way is made; a number picks a list item (``stages.1.steps=3``).
    """
    import yaml

    key, sep, value = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"an override must look like key.path=value, got {override!r}")
    node: Any = raw
    parts = key.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            node = _list_item(cast("list[Any]", node), part, key)
        else:
            node = node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise ConfigError(f"cannot set {key!r}: {part!r} is not a mapping or a list")
    if isinstance(node, list):
        items = cast("list[Any]", node)
        items[_list_index(items, parts[-1], key)] = yaml.safe_load(value)
    else:
        node[parts[-1]] = yaml.safe_load(value)


def _list_index(items: list[Any], part: str, key: str) -> int:
    """Return the index ``part`` names in ``items`` (``stages.1.steps=3``), checked."""
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(
            f"cannot set {key!r}: {part!r} is not an index of a list of {len(items)} items"
        )
    return int(part)


def _list_item(items: list[Any], part: str, key: str) -> Any:
    """Return the item of ``items`` that ``part`` names; a string stage becomes a mapping."""
    index = _list_index(items, part, key)
    if isinstance(items[index], str):
        items[index] = {"name": items[index]}  # ``stages: [sft]`` then ``stages.0.rounds=2``
    return items[index]
