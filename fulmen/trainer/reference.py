"""The training config's reference page, generated from the config models so it cannot drift.

Every option of ``TrainConfig`` and of each section it composes (the engine's, the runner's,
the cluster's, each algorithm's and their nested sections) becomes a table row: its key as
written in the YAML file, its type, its default and the description its model's docstring
gives under ``Attributes:``. ``python -m fulmen.trainer.reference > docs/config-reference.md``
writes the page; ``--check FILE`` exits 1 when the file is not what the models say (CI runs it).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["attribute_docs", "render", "sections"]

_ATTRIBUTE = re.compile(
    r"^(?P<names>[a-z_][a-z0-9_]*(?:\s*/\s*[a-z_][a-z0-9_]*)*)(?: \([^)]*\))?:\s?(?P<text>.*)$"
)


def attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """Return each attribute's description from ``model``'s docstring ``Attributes:`` section.

    ``a / b: text`` documents both; continuation lines (indented deeper) join the text.
    """
    doc = inspect.getdoc(model) or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    out: dict[str, str] = {}
    current: list[str] = []
    text: list[str] = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break  # the section ended
        stripped = line.strip()
        match = (
            _ATTRIBUTE.match(stripped)
            if line.startswith("    ") and not line.startswith("     ")
            else None
        )
        if match:
            for name in current:
                out[name] = " ".join(text)
            current = [n.strip() for n in match.group("names").split("/")]
            text = [match.group("text")]
        elif stripped:
            text.append(stripped)
    for name in current:
        out[name] = " ".join(text)
    return out


def sections() -> list[tuple[list[str], type[BaseModel]]]:
    """Every config section, as ``(the key paths that hold it, model)``, in page order.

    A model held at several places (``lora`` of GRPO and of SFT) is one section naming each.
    """
    from fulmen.algorithms.registry import registered
    from fulmen.trainer.config import TrainConfig

    out: list[tuple[list[str], type[BaseModel]]] = []
    paths: dict[type[BaseModel], list[str]] = {}

    def visit(path: str, model: type[BaseModel]) -> None:
        if model in paths:
            paths[model].append(path)
            return
        paths[model] = [path]
        out.append((paths[model], model))
        for name, info in model.model_fields.items():
            if model is TrainConfig and name in ("algorithm", "stages"):
                continue  # each algorithm below, by name
            key = info.alias or name
            for nested in _models_in(info.annotation):
                visit(f"{path}.{key}" if path else key, nested)

    visit("", TrainConfig)
    for entry in registered():
        visit(f"algorithm ({entry.name})", entry.config_model())
    return out


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """Yield the config models an annotation holds (through optional, list and union)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    elif origin in (typing.Union, types.UnionType, list, tuple, typing.Annotated):
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)


def render() -> str:
    """Return the whole reference page (Markdown)."""
    parts = [
        "# Config reference",
        "",
        "Every option of a training config (`fulmen train CONFIG.yaml`), generated from the",
        "config models (`python -m fulmen.trainer.reference`); CI checks this page against them.",
        "`--set key.path=value` overrides any of them. Each section's model is named with its",
        "module: its docstring has the same text. An algorithm's sections are under `algorithm:`,",
        "or under an entry of `stages:` (`stages.N.` instead of `algorithm.`). A relative path",
        "written in the file is relative to the file's folder; one given with `--set` is",
        "relative to the current directory, as any path typed on a command line.",
        "",
    ]
    for paths, model in sections():
        docs = attribute_docs(model)
        title = _title(paths) or "top level"
        parts += [f"## {title}", "", f"`{model.__module__}.{model.__qualname__}`", ""]
        parts += ["| option | type | default | what it does |", "|---|---|---|---|"]
        for name, info in model.model_fields.items():
            key = info.alias or name
            text = docs.get(key) or docs.get(name) or ""
            parts.append(
                f"| `{key}` | {_type(info.annotation)} | {_default(info)} | {_cell(text)} |"
            )
        parts.append("")
    return "\n".join(parts)


def _title(paths: list[str]) -> str:
    """Name the places of a section: ``algorithm.grpo`` (with ``name: grpo``), ..."""
    names: dict[str, list[str]] = {}
    for path in paths:
        match = re.match(r"algorithm \((?P<name>[a-z]+)\)(?P<rest>.*)", path)
        if match is None:
            names.setdefault(path, [])
        else:
            names.setdefault(f"algorithm{match.group('rest')}", []).append(match.group("name"))
    shown = [
        f"`{key}`" + (f" (`name: {' | '.join(algos)}`)" if algos else "")
        for key, algos in names.items()
        if key
    ]
    return ", ".join(shown)


def _type(annotation: Any) -> str:
    return "`" + _type_text(annotation).replace("|", "\\|") + "`"


def _type_text(annotation: Any) -> str:
    """Name a type as a config author reads it: validation metadata (``Annotated``) left out."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if "Annotated" in str(annotation):  # a union or list holding a selected union
        if origin in (typing.Union, types.UnionType):
            return " | ".join(_type_text(arg) for arg in args)
        if origin is list:
            return f"list[{_type_text(args[0])}]"
    if annotation is type(None):
        return "None"
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    if text is None:
        text = str(annotation).replace("typing.", "")
        text = re.sub(r"\b(?:[a-z_]+\.)+([A-Z][A-Za-z]+)", r"\1", text)
    return text


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    if info.default_factory is not None:
        try:
            value = info.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
        if isinstance(value, BaseModel):
            return "(its defaults)"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "(its defaults)"
    return "`" + repr(value).replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("``", "`")


def main(argv: list[str] | None = None) -> int:
    """Print the page, or with ``--check FILE`` compare the file with it."""
    parser = argparse.ArgumentParser(prog="python -m fulmen.trainer.reference")
    parser.add_argument("--check", type=Path, help="exit 1 when this file differs")
    args = parser.parse_args(argv)
    page = render() + "\n"
    if args.check is None:
        sys.stdout.write(page)
        return 0
    if args.check.read_text(encoding="utf-8") != page:
        print(
            f"{args.check} is out of date: python -m fulmen.trainer.reference > {args.check}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
