"""``import fulmen`` must stay light: heavy libraries load only where they are used."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "torch",
    "transformers",
    "sqlalchemy",
    "starlette",
    "httpx",
    "httptools",
    "uvicorn",
    "opentelemetry.sdk",
    "numpy",
    "openai",
)


def test_import_fulmen_does_not_load_heavy_modules() -> None:
    code = (
        "import sys, fulmen, fulmen.store, fulmen.types, fulmen.errors;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
