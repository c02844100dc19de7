"""The README's "Your first agent" as written: its agent and config, `fulmen dev` and `train`.

The agent block is written to ``my_agent.py`` verbatim and the config block to ``config.yaml``
verbatim; the run swaps the model for ``tiny`` and shortens it with ``--set`` (the README's
``gemma-3-270m`` would take minutes per step here, and the snippet sets no ``max_tokens``, so
the random model would write to its context limit). Its output must hold no traceback: the
README's first draft left its client open and every attempt printed "Event loop is closed".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.prefork import python

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)
_SHORT = [
    "model=tiny",
    "run_dir=runs/readme",
    "validation=null",
    "rollouts.train_sampling={temperature: 1.0, max_tokens: 8}",
    "algorithm.steps=2",
    "algorithm.tasks_per_step=2",
    "algorithm.group_size=2",
    "algorithm.grpo.learning_rate=0.01",
]


def first_agent_blocks() -> tuple[str, str]:
    """The README's agent (python) and config (yaml) blocks under "Your first agent"."""
    section = README.read_text(encoding="utf-8").split("## Your first agent", 1)[1]
    section = section.split("\n## ", 1)[0]
    found = {m.group("lang"): m.group("body") for m in _BLOCK.finditer(section)}
    return found["python"], found["yaml"]


def test_the_readme_agent_imports_its_client_and_closes_it() -> None:
    agent, config = first_agent_blocks()
    assert "async with AsyncOpenAI(" in agent  # closed on every path, errors included
    assert "agent: my_agent:my_agent" in config


@pytest.mark.slow
def test_the_readme_agent_trains_as_written_without_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    agent, config = first_agent_blocks()
    (tmp_path / "my_agent.py").write_text(agent, encoding="utf-8")
    (tmp_path / "config.yaml").write_text(config, encoding="utf-8")
    tasks = [{"id": f"t{i}", "question": f"Say {w}.", "answer": w} for i, w in enumerate("abcd")]
    for name in ("tasks.jsonl", "val.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(t) + "\n" for t in tasks))
    overrides = [arg for value in _SHORT for arg in ("--set", value)]
    env = {**os.environ, "PYTHONPATH": str(README.parent)}
    for command in (["dev", "config.yaml", "-n", "2"], ["train", "config.yaml"]):
        done = subprocess.run(
            [python(), "-m", "fulmen", *command, *overrides],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{command}: {output[-4000:]}"
        assert "Traceback" not in output, output[-6000:]
        assert "Event loop is closed" not in output, output[-6000:]
    assert (tmp_path / "runs" / "readme" / "store.db").exists()
