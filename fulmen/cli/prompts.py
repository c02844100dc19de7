"""``fulmen prompts list|show|diff|export``: the prompt versions of a store and their lineage.

A prompt version is named by ``NAME`` (its newest version), ``VERSION`` (the resources version
that holds it) or ``NAME@VERSION``. ``list`` prints one line per distinct version with its
parent, the optimizer and step that made it and its validation score; ``show`` adds the
critique and edit that produced it and the whole text; ``diff A B`` compares two versions'
texts; ``export`` writes the final prompt to paste into production code (a ``str.format``
template whose placeholders are the task's fields), or its JSON with ``--format json``.
Every command only reads, and refuses a store that does not exist.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.cli.parsers import add_command, add_command_group, arg, json_flag
from fulmen.cli.store import add_store_options, run_in_store

if TYPE_CHECKING:
    from fulmen.prompts import PromptVersion

__all__ = ["register"]


def _load(args: argparse.Namespace) -> list[PromptVersion]:
    from fulmen.prompts import load_prompt_versions

    name = getattr(args, "name", None)  # only `prompts list` has --name
    return run_in_store(args, lambda store: load_prompt_versions(store, name=name))


def _find(versions: list[PromptVersion], ref: str) -> PromptVersion:
    from fulmen.prompts import find_prompt_version

    return find_prompt_version(versions, ref)


def _score_text(version: PromptVersion) -> str:
    return "-" if version.score is None else f"{version.score:.3f}"


def _summary(version: PromptVersion) -> dict[str, Any]:
    return {**version.as_json(), "prompt": version.prompt.model_dump(mode="json")}


def _list(args: argparse.Namespace) -> int:
    versions = _load(args)
    if args.json:
        print(json.dumps([_summary(v) for v in versions], indent=2))
        return 0
    if not versions:
        print("no prompt versions yet: publish one with `fulmen resources add FILE.yaml`")
        return 0
    print(f"{'PROMPT':<16} {'PARENT':>6} {'MADE BY':<12} {'SCORE':>6}  CREATED              TEXT")
    for v in versions:
        lineage = v.prompt.lineage
        parent = str(lineage.parent) if lineage and lineage.parent else "-"
        made_by = "-"
        if lineage:
            made_by = lineage.optimizer + (f":{lineage.step}" if lineage.step is not None else "")
        first_line = v.prompt.export_text().strip().splitlines()[0] if v.prompt.template else ""
        text = first_line[:60] + ("…" if len(first_line) > 60 else "")
        created = v.created_at.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{v.ref:<16} {parent:>6} {made_by:<12} {_score_text(v):>6}  {created}  {text}")
    return 0


def _show(args: argparse.Namespace) -> int:
    version = _find(_load(args), args.ref)
    if args.json:
        print(json.dumps(_summary(version), indent=2))
        return 0
    prompt = version.prompt
    print(f"prompt {version.ref}  created {version.created_at:%Y-%m-%d %H:%M:%S} UTC")
    if version.republished_in:
        print(f"  also in resources versions {version.republished_in}")
    lineage = prompt.lineage
    if lineage is None:
        print("  lineage: none recorded")
    else:
        print(f"  parent: {lineage.parent or '-'}  made by: {lineage.optimizer}", end="")
        print(f"  step: {lineage.step}" if lineage.step is not None else "", end="")
        print(f"  run: {lineage.run_id}" if lineage.run_id else "")
        for label, text in (("critique", lineage.critique), ("edit", lineage.edit)):
            if text:
                print(f"  {label}:")
                print("    " + text.strip().replace("\n", "\n    "))
    for score in version.scores:
        print(
            f"  score ({score.split}, {len(score.instances)} tasks): {score.score:.4f}"
            + (f"  run {score.run_id}" if score.run_id else "")
        )
    if not version.scores:
        print("  score: none recorded")
    print(f"  fields: {', '.join(prompt.field_names()) or '-'}  demos: {len(prompt.demos)}")
    print("---")
    print(prompt.export_text())
    return 0


def _diff(args: argparse.Namespace) -> int:
    versions = _load(args)
    a, b = _find(versions, args.a), _find(versions, args.b)
    lines = difflib.unified_diff(
        a.prompt.export_text().splitlines(keepends=True),
        b.prompt.export_text().splitlines(keepends=True),
        fromfile=a.ref,
        tofile=b.ref,
    )
    out = "".join(lines)
    if out and not out.endswith("\n"):
        out += "\n"
    sys.stdout.write(out or f"{a.ref} and {b.ref} have the same text\n")
    return 0


def _export(args: argparse.Namespace) -> int:
    version = _find(_load(args), args.ref)
    if args.format == "json":
        text = version.prompt.model_dump_json(indent=2) + "\n"
    else:
        text = version.prompt.export_text() + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {version.ref} to {args.out}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add ``fulmen prompts`` with ``list``, ``show``, ``diff`` and ``export``."""
    commands = add_command_group(
        subparsers,
        "prompts",
        help="prompt versions: list, show lineage and scores, diff, export",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    ref_help = "NAME (newest), VERSION (a resources version) or NAME@VERSION"
    add_command(
        commands,
        "list",
        _list,
        arg("--name", help="only prompts of this resource name"),
        add_store_options,
        json_flag("print JSON"),
        help="every prompt version with parent, optimizer, step and score",
        description="List the distinct prompt versions of the store, oldest first.",
    )
    add_command(
        commands,
        "show",
        _show,
        arg("ref", metavar="NAME_OR_VERSION", help=ref_help),
        add_store_options,
        json_flag("print JSON"),
        help="one version: lineage, critique, edit, scores and text",
        description="Show a prompt version with its lineage, scores and full text.",
    )
    add_command(
        commands,
        "diff",
        _diff,
        arg("a", metavar="A", help=ref_help),
        arg("b", metavar="B", help=ref_help),
        add_store_options,
        help="unified diff of two versions' texts",
        description="Show a unified diff of the exported texts of two prompt versions.",
    )
    add_command(
        commands,
        "export",
        _export,
        arg("ref", metavar="VERSION", help=ref_help),
        arg("--out", metavar="FILE", help="write here instead of stdout"),
        arg("--format", choices=("text", "json"), default="text", help="default: text"),
        add_store_options,
        help="write the final prompt text (or JSON) to paste into production code",
        description="Write a prompt version as one str.format template (demonstrations "
        "written out, the task's fields as {placeholders}), or as JSON with --format json.",
        epilog="example: fulmen prompts export prompt --store sqlite:///runs/apo/fulmen.db "
        "--out prompt.txt",
    )
