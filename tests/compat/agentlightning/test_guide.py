"""The migration guide lists what the layer does: every 0.x name it serves or refuses, every
refused module path, and the examples ``test_zero_x_examples.py`` runs."""

from __future__ import annotations

import re
from pathlib import Path

from fulmen.compat.agentlightning import names

ROOT = Path(__file__).resolve().parents[3]
GUIDE = (ROOT / "docs" / "migrate-from-agent-lightning.md").read_text(encoding="utf-8")
PROSE = re.sub(r"```.*?```", "", GUIDE, flags=re.DOTALL)  # code blocks: no names in backticks
QUOTED = set(re.findall(r"`([^`\n]+)`", PROSE))
WORDS = set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", " ".join(QUOTED)))
WORDS |= {part for word in WORDS for part in word.split(".")}


def test_every_refused_name_is_in_the_guide() -> None:
    missing = sorted(name for name in names.REFUSED if name not in WORDS)
    assert missing == [], f"refused but not in the guide: {missing}"


def test_every_working_name_is_in_the_guide() -> None:
    aliases = {"setup", "setup_module"}  # listed with their module: ``logging.setup``
    missing = sorted(n for n in names.WORKING if n not in WORDS and n not in aliases)
    assert missing == [], f"served but not in the guide: {missing}"


def test_every_refused_module_is_in_the_guide() -> None:
    refused = [path for path, reason in names.MODULES.items() if reason is not None]
    missing = []
    for path in refused:
        parent, _, leaf = path.rpartition(".")
        shown = f"agentlightning.{path}" in WORDS or (
            f"agentlightning.{parent}" in GUIDE and f"`.{leaf}`" in GUIDE
        )
        if not shown:
            missing.append(path)
    assert missing == [], f"refused modules not in the guide: {missing}"


def test_the_examples_the_tests_run_are_in_the_guide() -> None:
    for source in (
        "contrib/recipes/search_r1", "examples/search_r1", "examples/azure",
        "examples/apo/room_selector_apo.py", "examples/apo",
    ):  # fmt: skip
        assert source in GUIDE, source
    assert "test_zero_x_examples.py" in GUIDE
