"""docs/first-agent.md followed verbatim: its files written, its commands run, with the tiny model.

Every code block whose first line is ``# file: NAME`` is written to NAME (without that line);
every line of a ``bash`` block that starts with ``fulmen`` is run in that directory. A change
that breaks the walkthrough, or a traceback anywhere in its output, breaks this test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.prefork import python

DOC = Path(__file__).resolve().parents[2] / "docs" / "first-agent.md"
_BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)


def blocks() -> tuple[dict[str, str], list[list[str]]]:
    """The walkthrough's files (name -> text) and its commands, in order."""
    files: dict[str, str] = {}
    commands: list[list[str]] = []
    for match in _BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        body = match.group("body")
        first, _, rest = body.partition("\n")
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = rest
        elif match.group("lang") == "bash":
            commands += [
                shlex.split(line) for line in body.splitlines() if line.startswith("fulmen ")
            ]
    return files, commands


def test_the_walkthrough_names_three_files_and_two_commands() -> None:
    files, commands = blocks()
    assert sorted(files) == ["agent.py", "config.yaml", "tasks.jsonl"]
    assert [c[:2] for c in commands] == [["fulmen", "dev"], ["fulmen", "train"]]


@pytest.mark.slow
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    files, commands = blocks()
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(DOC.parents[1])}
    outputs = []
    for command in commands:
        done = subprocess.run(
            [python(), "-m", *command],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        assert "Traceback" not in done.stdout + done.stderr, done.stderr[-6000:]
        outputs.append(done.stdout)
    dev, train = outputs
    assert "2/2 rollouts succeeded" in dev
    assert "fulmen dev: 2 training tasks (data.train)" in dev
    assert "done: 3 steps in this run" in train
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/$", train, re.M)
    assert (tmp_path / "runs" / "first" / "store.db").exists()


def _requirements(extras: set[str]) -> set[str]:
    """The distributions fulmen's extras ``extras`` install, nested extras followed."""
    import tomllib

    optional = tomllib.loads((DOC.parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names: set[str] = set()
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in optional[extra]:
            nested = re.fullmatch(r"fulmen\[([\w,-]+)\]", requirement)
            if nested:
                todo += nested.group(1).split(",")
            else:
                names.add(re.split(r"[<>=\[; ]", requirement, maxsplit=1)[0].lower())
    return names


def test_the_pages_install_line_brings_what_its_code_imports() -> None:
    # The page installed `.[train]`, which has no `openai`, the client its agent imports.
    (extras,) = re.findall(r'-e "\.\[([\w,-]+)\]"', DOC.read_text(encoding="utf-8"))[:1]
    files, _ = blocks()
    imported = set(re.findall(r"^(?:from|import) (\w+)", files["agent.py"], re.M))
    installed = _requirements(set(extras.split(","))) | {"fulmen", "json", "typing"}
    assert imported <= installed, imported - installed
    assert "torch" in installed and "tqdm" in installed  # the engine and `fulmen train`
