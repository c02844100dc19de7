"""``${name}`` templates in a command agent's config, filled per rollout.

``string.Template`` syntax (``$$`` is a literal dollar) with dotted names, so JSON and TOML
config files, full of braces, need no escaping. Names:

=======================  ======================================================================
``task``                 the task: a string as it is, anything else as JSON
``task.a.b``             a field of the task (a number index for lists), rendered the same way
``openai_base_url``      the rollout's model URL, ending in ``/v1`` (also ``base_url``)
``anthropic_base_url``   the same URL without ``/v1`` (Anthropic clients append it)
``api_key``              the key for that URL
``model``                the model name to ask for
``rollout_id``           the rollout's id; ``attempt_id`` the attempt's
``mode``                 ``train``, ``val`` or ``test``
``reward_url``           where the command may post its rewards (``POST``, JSON body)
``workdir``              the working directory; ``home`` the rollout's home directory
``task_file``            the JSON file holding the task
``config_dir``           the training config file's folder (the agent's own files lie there)
=======================  ======================================================================

A name not in this list is a config error when the config is read; a task field that a task
lacks fails that rollout's attempt with a message naming the field.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any

from fulmen.errors import ConfigError

__all__ = ["NAMES", "check_template", "names_in", "render"]

NAMES = frozenset(
    {
        "task",
        "openai_base_url",
        "base_url",
        "anthropic_base_url",
        "api_key",
        "model",
        "rollout_id",
        "attempt_id",
        "mode",
        "reward_url",
        "workdir",
        "home",
        "task_file",
        "config_dir",
    }
)


class _Template(string.Template):
    idpattern = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*"


def names_in(template: str) -> list[str]:
    """Return the variable names ``template`` uses, in order (``ValueError`` on a bad ``$``)."""
    found: list[str] = []
    for match in _Template.pattern.finditer(template):
        if match.group("invalid") is not None:
            raise ValueError(f"bad '$' at position {match.start()} (write '$$' for a dollar)")
        name = match.group("named") or match.group("braced")
        if name is not None:
            found.append(name)
    return found


def check_template(template: str, *, where: str) -> None:
    """Raise ``ValueError`` (pydantic reports it) if ``template`` names an unknown variable."""
    if "\0" in template:
        raise ValueError(f"{where}: NUL bytes cannot be passed to a program")
    try:
        names = names_in(template)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    for name in names:
        root = name.split(".", 1)[0]
        if root not in NAMES or (root != "task" and "." in name):
            raise ValueError(
                f"{where}: unknown template variable ${{{name}}}; known: "
                f"{', '.join(sorted(NAMES))} and task.FIELD"
            )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _lookup(task: Any, path: list[str], name: str) -> Any:
    value = task
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ConfigError(
                f"template ${{{name}}}: the task has no field {part!r}: {task!r}"[:500]
            )
    return value


def render(template: str, task: Any, values: Mapping[str, str]) -> str:
    """Fill ``template`` from the task and the rollout's ``values`` (every name but ``task``)."""
    mapping: dict[str, str] = dict(values)
    for name in names_in(template):
        if name == "task" or name.startswith("task."):
            mapping[name] = _text(_lookup(task, name.split(".")[1:], name))
    text = _Template(template).substitute(mapping)
    if "\0" in text:
        raise ConfigError("a template filled from the task holds a NUL byte; no program takes it")
    return text
