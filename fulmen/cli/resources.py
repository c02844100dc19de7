"""``fulmen resources add|show|list``: publish and inspect the resources agents receive.

A resources file is YAML (or JSON) in the shape of ``ResourcesCreate``::

    resources:
      llm:                                  # what the agent's `llm` parameter receives
        base_url: http://127.0.0.1:8000/v1  # the engine (`fulmen serve`)
        model: tiny
        sampling: {default: {temperature: 1.0}, val: {temperature: 0.0}}
      system:
        template: "You are a careful assistant. {question}"
    metadata: {note: first try}

``kind`` (``llm`` or ``prompt``) may be left out: an entry with ``template`` is a prompt, any
other an LLM endpoint. A runner started with ``--gateway`` hands the agent that gateway's
per-rollout URL instead of ``base_url``, so the calls are recorded; ``model`` and ``sampling``
apply either way. Each ``add`` stores a new immutable version; rollouts enqueued later use the
latest version unless they name another.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cli.parsers import add_command, add_command_group, arg, json_flag
from fulmen.cli.store import add_store_options, open_cli_store, run_async, run_in_store
from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.types import Resources, ResourcesCreate

__all__ = ["read_resources_file", "register"]


def read_resources_file(path: str | Path) -> ResourcesCreate:
    """Read a resources file (see the module docstring); ``ConfigError`` names what is wrong."""
    import yaml
    from pydantic import ValidationError

    from fulmen.types import ResourcesCreate

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read resources file {path}: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("resources"), dict):
        raise ConfigError(
            f"resources file {path} must be a mapping with a 'resources:' mapping of names, "
            "e.g. resources: {llm: {base_url: http://127.0.0.1:8000/v1, model: tiny}}"
        )
    for name, entry in raw["resources"].items():
        if isinstance(entry, dict) and "kind" not in entry:
            entry["kind"] = "prompt" if "template" in entry else "llm"
        elif not isinstance(entry, dict):
            raise ConfigError(f"resource {name!r} in {path} must be a mapping, got {entry!r}")
    try:
        return ResourcesCreate.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid resources file {path}: {problems}") from exc


def _describe(resources: Resources) -> list[str]:
    """One line per named resource: its kind and what it points at (API keys are not shown)."""
    from fulmen.types import LLMResource

    lines = []
    for name, resource in resources.resources.items():
        if isinstance(resource, LLMResource):
            key = "  api_key set" if resource.api_key else ""
            sampling = f"  sampling {json.dumps(resource.sampling)}" if resource.sampling else ""
            lines.append(f"  {name}: llm {resource.model} at {resource.base_url}{key}{sampling}")
        else:
            lines.append(f"  {name}: prompt {json.dumps(resource.template, ensure_ascii=False)}")
    return lines


def _heading(resources: Resources) -> str:
    created = resources.created_at.strftime("%Y-%m-%d %H:%M:%S")
    meta = f"  metadata {json.dumps(resources.metadata)}" if resources.metadata else ""
    return f"resources v{resources.version}  {resources.resources_id}  created {created} UTC{meta}"


def _dump(resources: Resources) -> dict[str, Any]:
    return resources.model_dump(mode="json")


def _print_version(resources: Resources, *, as_json: bool) -> None:
    """Print one resources version: its heading and a line per resource, or its JSON."""
    if as_json:
        print(json.dumps(_dump(resources), indent=2))
        return
    print(_heading(resources))
    print("\n".join(_describe(resources)))


def _add(args: argparse.Namespace) -> int:
    create = read_resources_file(args.file)

    stored = run_in_store(args, lambda store: store.add_resources(create), create=True)
    _print_version(stored, as_json=args.json)
    return 0


def _show(args: argparse.Namespace) -> int:
    async def main() -> Resources | None:
        async with open_cli_store(args) as store:
            if args.version is None:
                return await store.latest_resources()
            return await store.get_resources(args.version)

    found = run_async(main)
    if found is None:
        print("no resources yet: publish some with `fulmen resources add FILE.yaml`")
        return 1
    _print_version(found, as_json=args.json)
    return 0


def _list(args: argparse.Namespace) -> int:
    async def main() -> list[Resources]:
        async with open_cli_store(args) as store:
            latest = await store.latest_resources()
            if latest is None:
                return []
            first = max(1, latest.version - args.limit + 1)
            older = [await store.get_resources(v) for v in range(first, latest.version)]
            return [*older, latest]

    versions = run_async(main)
    if args.json:
        print(json.dumps([_dump(r) for r in versions], indent=2))
        return 0
    if not versions:
        print("no resources yet: publish some with `fulmen resources add FILE.yaml`")
        return 0
    for resources in versions:
        names = ", ".join(
            f"{name} ({resource.kind})" for name, resource in resources.resources.items()
        )
        created = resources.created_at.strftime("%Y-%m-%d %H:%M:%S")
        meta = f"  {json.dumps(resources.metadata)}" if resources.metadata else ""
        print(f"v{resources.version:<5} {created}  {names}{meta}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen resources`` with ``add``, ``show`` and ``list``."""
    commands = add_command_group(
        subparsers,
        "resources",
        help="publish the resources agents receive (LLM endpoint, prompts); show versions",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_command(
        commands,
        "add",
        _add,
        arg("file", metavar="FILE", help="resources file (.yaml or .json)"),
        add_store_options,
        json_flag("print the stored version as JSON"),
        help="store a resources file as the next version",
        description=__doc__,
        epilog="example: fulmen resources add resources.yaml --store http://127.0.0.1:4747",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_command(
        commands,
        "show",
        _show,
        arg("version", type=int, nargs="?", metavar="VERSION", help="default: latest"),
        add_store_options,
        json_flag("print JSON (API keys included)"),
        help="show one version (default: the latest)",
        description="Show a resources version: each named resource and where it points.",
    )
    add_command(
        commands,
        "list",
        _list,
        add_store_options,
        arg("--limit", type=int, default=20, help="show the latest N versions (default: 20)"),
        json_flag("print JSON"),
        help="list the latest versions",
        description="List resources versions, oldest first, ending with the latest.",
    )
