"""`fulmen dev` warns, before any training, that an agent's transitions are too long to train.

A real agent (the plain ``openai`` client) talks through the real gateway to the scripted
token-level server on 127.0.0.1; with ``algorithm.grpo.max_seq_len`` below its transition's
length, the report ends with a warning naming the limit and the length, which GRPO would drop.
"""

from __future__ import annotations

import io
import textwrap
from collections import deque
from pathlib import Path

import pytest

from fulmen.trainer.config import load_config
from fulmen.trainer.trainer import Trainer
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

AGENT = """
from typing import Any

import fulmen
from openai import AsyncOpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": "t0", "question": "Summarize the repository's design in one line."}]


@fulmen.rollout
async def summarizer(task: dict[str, Any], llm: fulmen.LLM) -> float:
    client = AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key)
    try:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}]
        )
    finally:
        await client.close()
    return 1.0 if reply.choices[0].message.content else 0.0
"""


def write_project(tmp_path: Path, max_seq_len: int, algorithm: str = "grpo") -> Path:
    (tmp_path / "summary_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            model: tiny-model
            agent: summary_agent:summarizer
            python_path: ["."]
            run_dir: run
            data: {{train: "summary_agent:tasks"}}
            rollouts: {{concurrency: 1, timeout_s: 60}}
            algorithm: {{name: {algorithm}, {algorithm}: {{max_seq_len: {max_seq_len}}}}}
            """
        )
    )
    return config


async def _dev(tmp_path: Path, max_seq_len: int, algorithm: str = "grpo") -> tuple[str, int]:
    script = Script(replies=deque([Reply(content="A gateway records every call.")]))
    config = load_config(write_project(tmp_path, max_seq_len, algorithm))
    out = io.StringIO()
    async with serve_app(create_upstream_app(script)) as upstream:
        report = await Trainer(config).adev(endpoint=f"{upstream}/v1", model="tiny-model", out=out)
    assert report[0]["transitions"] == 1, out.getvalue()
    line = next(x for x in out.getvalue().splitlines() if x.strip().startswith("transition "))
    fields = dict(part.split("=") for part in line.split() if "=" in part)
    return out.getvalue(), int(fields["prompt"]) + int(fields["completion"])


@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "dpo"])
async def test_dev_warns_when_a_transition_is_longer_than_max_seq_len(
    tmp_path: Path, algorithm: str
) -> None:
    text, length = await _dev(tmp_path, max_seq_len=16, algorithm=algorithm)
    assert length > 16
    option = f"algorithm.{algorithm}.max_seq_len"
    assert (
        f"warning: 1 of 1 transitions are longer than {option} (16 tokens): "
        f"{length} tokens. Training drops them; raise {option}"
    ) in text, text


async def test_dev_says_nothing_when_every_transition_fits(tmp_path: Path) -> None:
    text, length = await _dev(tmp_path, max_seq_len=4096)
    assert length <= 4096 and "warning:" not in text, text
