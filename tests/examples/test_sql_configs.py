"""examples/sql: the one-adapter-per-role config differs from the shared one only in adapters.

The README compares the two under the same budget; that comparison means something only while
everything else (model, data, sampling, steps, learning rate, LoRA shape) is the same.
"""

from __future__ import annotations

from pathlib import Path

from fulmen.trainer.config import load_config

SQL = Path(__file__).resolve().parents[2] / "examples" / "sql"


def _comparable(name: str) -> dict[str, object]:
    config = load_config(SQL / name).model_dump(mode="json", by_alias=True)
    config.pop("run_dir")
    algorithm = config["algorithm"]
    algorithm.pop("adapters", None)
    algorithm.pop("transitions", None)
    return config


def test_roles_config_is_the_shared_config_with_one_adapter_per_role() -> None:
    roles = load_config(SQL / "roles.yaml").algorithm
    shared = load_config(SQL / "config.yaml").algorithm
    assert roles.adapters == {"writer": ["write_query"], "rewriter": ["rewrite_query"]}
    assert shared.adapters == {"shared": ["write_query", "rewrite_query"]}
    assert roles.transition_options().agents == shared.transition_options().agents
    assert _comparable("roles.yaml") == _comparable("config.yaml")
