"""docs/config-reference.md is what the config models say (regenerate it when they change)."""

from __future__ import annotations

from pathlib import Path

from fulmen.trainer.reference import attribute_docs, main, sections

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config-reference.md"


def test_the_page_matches_the_models() -> None:
    assert main(["--check", str(PAGE)]) == 0, "python -m fulmen.trainer.reference > " + str(PAGE)


def test_every_option_of_every_section_is_documented() -> None:
    """An option without a line under its model's ``Attributes:`` has an empty cell."""
    missing = [
        f"{model.__qualname__}.{name}"
        for _, model in sections()
        for name, info in model.model_fields.items()
        if name != "name"  # an algorithm's discriminator
        and not (attribute_docs(model).get(info.alias or name) or attribute_docs(model).get(name))
    ]
    assert missing == []
