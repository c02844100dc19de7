"""`fulmen train` says when agent selection cannot work, instead of silently training nothing.

The agent names one call ``critic`` and leaves the other unnamed; the config trains only
``actor``. The console shows the unnamed-calls warning once for the run and the empty-selection
warning at each step.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.prefork import python

AGENT = '''
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": "t0", "prompt": "Say a."}]


@fulmen.rollout
def two_calls(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """One call named critic, one unnamed; no call is the actor's."""
    with OpenAI(base_url=llm.base_url, api_key=llm.api_key) as client:
        with fulmen.as_agent("critic"):
            client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["prompt"]}]
            )
        client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["prompt"]}]
        )
    return 0.5
'''


@pytest.mark.slow
def test_train_warns_about_unnamed_calls_once_and_empty_selection_each_step(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    (tmp_path / "my_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            model: tiny
            agent: my_agent:two_calls
            python_path: ['.']
            run_dir: run
            data: {train: "my_agent:tasks"}
            rollouts:
              concurrency: 2
              timeout_s: 60
              train_sampling: {temperature: 1.0, max_tokens: 4}
              val_sampling: {temperature: 0.0, max_tokens: 4}
            algorithm:
              steps: 2
              tasks_per_step: 1
              group_size: 2
              transitions: {agents: [actor]}
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    trained = subprocess.run(
        [python(), "-m", "fulmen", "train", str(config)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    err = trained.stderr
    assert err.count("carry no agent name") == 1, err[-3000:]
    assert "2 of 4 token-level LLM calls in step 1 carry no agent name" in err
    assert "agent selection ['actor'] matched no call in step 1" in err
    assert "agent selection ['actor'] matched no call in step 2" in err
