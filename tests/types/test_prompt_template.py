"""The prompt template resource: fields checked, rendering, demonstrations, lineage on the wire."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fulmen.types import (
    Demonstration,
    PromptLineage,
    PromptMessage,
    PromptTemplate,
    Resources,
    ResourcesCreate,
)
from fulmen.types.prompt import template_fields

CALC = PromptTemplate(
    instructions="Solve it. Write CALC(expression), then ANSWER: n.",
    template="Question: {question}",
    demos=(
        Demonstration(
            inputs={"question": "Ann has 2 and gets 3. How many?"},
            messages=(
                PromptMessage(role="assistant", content="CALC(2 + 3)"),
                PromptMessage(role="user", content="RESULT: 5"),
                PromptMessage(role="assistant", content="ANSWER: 5"),
            ),
        ),
    ),
)


def test_fields_are_the_placeholders_in_order_of_first_use() -> None:
    assert template_fields("{b} {a} {b} {{not}} {c:>{width}}") == ("b", "a", "width", "c")
    assert PromptTemplate(template="{b}: {a}").fields == ("b", "a")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"template": "Q: {}"}, "plain name"),
        ({"template": "Q: {0}"}, "plain name"),
        ({"template": "Q: {task.question}"}, "plain name"),
        ({"template": "Q: {question"}, "malformed"),
        ({"template": "Q: {question}", "fields": ["q"]}, r"fields \['q'\] do not match"),
        ({"template": "Q: {question}", "instructions": "use {tool}"}, r"\['tool'\]"),
        (
            {"template": "{a} {b}", "demos": [{"inputs": {"a": 1}, "output": "x"}]},
            r"demos\[0\] lacks field\(s\) \['b'\]",
        ),
        ({"template": "{a}", "demos": [{"inputs": {"a": 1}}]}, "needs an output or messages"),
    ],
)
def test_bad_templates_are_refused_naming_the_problem(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        PromptTemplate.model_validate(kwargs)


def test_render_and_messages_put_demos_before_the_input() -> None:
    assert CALC.render(question="7 + 1?", answer=8) == (
        "Solve it. Write CALC(expression), then ANSWER: n.\n\n"
        "Question: Ann has 2 and gets 3. How many?\nCALC(2 + 3)\nRESULT: 5\nANSWER: 5\n\n"
        "Question: 7 + 1?"
    )
    assert CALC.messages(question="7 + 1?") == [
        {
            "role": "user",
            "content": "Solve it. Write CALC(expression), then ANSWER: n.\n"
            "Question: Ann has 2 and gets 3. How many?",
        },
        {"role": "assistant", "content": "CALC(2 + 3)"},
        {"role": "user", "content": "RESULT: 5"},
        {"role": "assistant", "content": "ANSWER: 5"},
        {"role": "user", "content": "Question: 7 + 1?"},
    ]
    system = CALC.messages(system=True, question="q")
    assert system[0] == {"role": "system", "content": CALC.instructions}
    assert system[1]["content"] == "Question: Ann has 2 and gets 3. How many?"


def test_missing_field_names_it() -> None:
    with pytest.raises(ValueError, match=r"needs field\(s\) \['question'\]; got \['q'\]"):
        CALC.render(q="typo")


def test_export_text_formats_to_the_rendered_prompt_with_literal_braces_kept() -> None:
    prompt = PromptTemplate(
        instructions='Reply in JSON like {{"n": 1}}.',
        template="Q: {question}",
        demos=[Demonstration(inputs={"question": "{odd}"}, output='{"n": 2}')],
    )
    exported = prompt.export_text()
    assert "{question}" in exported
    assert exported.format(question="1+1") == prompt.render(question="1+1")
    assert prompt.render(question="x").startswith('Reply in JSON like {"n": 1}.')


def test_lineage_and_demos_survive_the_wire_format() -> None:
    child = CALC.model_copy(
        update={
            "instructions": "Solve it step by step.",
            "lineage": PromptLineage(parent=3, optimizer="apo", step=2, critique="c", edit="e"),
        }
    )
    create = ResourcesCreate.model_validate_json(
        ResourcesCreate(resources={"prompt": child}).model_dump_json()
    )
    assert create.resources["prompt"] == child
    stored = Resources.model_validate(
        {"version": 4, "resources_id": "r", "resources": {"prompt": child.model_dump()},
         "created_at": "2026-01-01T00:00:00Z"}
    )  # fmt: skip
    prompt = stored.resources["prompt"]
    assert isinstance(prompt, PromptTemplate) and prompt.lineage is not None
    assert (prompt.lineage.parent, prompt.lineage.step) == (3, 2)
