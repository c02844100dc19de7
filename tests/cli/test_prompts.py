"""``fulmen prompts`` against a real SQLite store: versions, lineage, scores, diff and export."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.prompts import publish_prompt, record_scores
from fulmen.store import open_store
from fulmen.types import (
    Demonstration,
    LLMResource,
    PromptLineage,
    PromptScore,
    PromptTemplate,
    ResourcesCreate,
)

BASE = PromptTemplate(instructions="Solve it.", template="Question: {question}")
CHILD = PromptTemplate(
    instructions="Solve it. Write the arithmetic first.",
    template="Question: {question}",
    demos=[Demonstration(inputs={"question": "1+1?"}, output="ANSWER: 2")],
    lineage=PromptLineage(
        parent=1,
        optimizer="apo",
        step=1,
        critique="The model skipped the arithmetic.",
        edit="Asked for the arithmetic first.",
        run_id="apo-x",
    ),
)


def populate(url: str) -> None:
    """v1 by hand; v2 an llm-only update (same prompt); v3 the APO child; v4 scores of 1 and 3."""

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            llm = LLMResource(base_url="http://127.0.0.1:1/v1", model="m")
            await store.add_resources(ResourcesCreate(resources={"llm": llm, "prompt": BASE}))
            await store.add_resources(
                ResourcesCreate(resources={"llm": llm.model_copy(update={"model": "m2"}),
                                           "prompt": BASE})
            )  # fmt: skip
            child = await publish_prompt(store, "prompt", CHILD)
            assert child.version == 3 and isinstance(child.resources["llm"], LLMResource)
            scores = [
                PromptScore(version=1, name="prompt", score=0.25, instances={"a": 0.0, "b": 0.5}),
                PromptScore(version=3, name="prompt", score=0.75, instances={"a": 1.0, "b": 0.5}),
            ]
            await record_scores(store, scores, base=child)

    asyncio.run(fill())


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    populate(url)
    return url


def test_list_shows_distinct_versions_with_lineage_and_scores(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prompts", "list", "--store", store_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # a header, then prompt@1 and prompt@3: v2 and v4 only carry them
    assert lines[1].split()[:4] == ["prompt@1", "-", "-", "0.250"]
    assert lines[2].split()[:4] == ["prompt@3", "1", "apo:1", "0.750"]
    assert main(["prompts", "list", "--store", store_url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [v["republished_in"] for v in listed] == [[2], [4]]
    assert listed[1]["lineage"]["critique"] == "The model skipped the arithmetic."
    assert listed[1]["scores"][0]["instances"] == {"a": 1.0, "b": 0.5}
    assert [v["score"] for v in listed] == [0.25, 0.75]  # the latest val score, as the table


def test_show_prints_critique_edit_score_and_text(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prompts", "show", "prompt", "--store", store_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prompt prompt@3 ")
    assert "parent: 1  made by: apo  step: 1  run: apo-x" in out
    assert "The model skipped the arithmetic." in out and "Asked for the arithmetic" in out
    assert "score (val, 2 tasks): 0.7500" in out
    assert out.rstrip().endswith("Question: {question}")
    # a resources version that carries a prompt unchanged finds the version it carries
    assert main(["prompts", "show", "2", "--store", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ref"] == "prompt@1"


def test_diff_compares_texts(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prompts", "diff", "prompt@1", "3", "--store", store_url]) == 0
    out = capsys.readouterr().out
    assert "--- prompt@1" in out and "+++ prompt@3" in out
    assert "-Solve it.\n" in out and "+Solve it. Write the arithmetic first.\n" in out


def test_export_writes_a_template_that_formats_to_the_rendered_prompt(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prompt.txt"
    assert main(["prompts", "export", "prompt@3", "--store", store_url, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8").rstrip("\n")
    assert text.format(question="2+2?") == CHILD.render(question="2+2?")
    assert main(["prompts", "export", "3", "--format", "json", "--store", store_url]) == 0
    assert PromptTemplate.model_validate_json(capsys.readouterr().out) == CHILD


def test_unknown_version_and_missing_store_are_errors(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prompts", "show", "prompt@9", "--store", store_url]) == 1
    assert (
        "no prompt version 'prompt@9'; latest known: prompt@1, prompt@3" in capsys.readouterr().err
    )
    missing = tmp_path / "nope.db"
    assert main(["prompts", "list", "--store", f"sqlite:///{missing}"]) == 1
    assert "no store at" in capsys.readouterr().err
    assert not missing.exists()
