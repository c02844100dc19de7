"""Take the dashboard screenshots under docs/images/ from a real toy run.

Records the same store the browser tests use (``tests/dashboard/toy_store.py``: two GRPO steps
of examples/toy with the tiny model, two prompt versions, a rollout with markup in its text),
links a built-in engine so the token view shows token texts, and saves one PNG per page with
Debian's Chromium driven by Playwright.

    .venv/bin/python scripts/dashboard_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from fulmen.engines.launcher import BuiltinLauncher  # noqa: E402
from tests.dashboard.conftest import CHROMIUM, CHROMIUM_ARGS, ServedDashboard  # noqa: E402
from tests.dashboard.toy_store import record_toy_store  # noqa: E402

PAGES = {
    "dashboard-runs.png": ("#/runs", "#run-charts figure"),
    "dashboard-rollouts.png": ("#/rollouts", "#rollout-rows tr"),
    "dashboard-rollout.png": (None, "#final-reward"),
    "dashboard-resources.png": ("#/resources", "#prompt-diff"),
}


def main() -> None:
    """Record the toy store, serve the dashboard over it and save the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        toy = record_toy_store(Path(tmp))
        engine = BuiltinLauncher("tiny", log_path=Path(tmp) / "engine.log")
        engine.start()
        try:
            with (
                ServedDashboard(toy.url, token=None, engine_url=engine.root_url) as served,
                sync_playwright() as playwright,
            ):
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(f"{served.url}#/rollouts")
                page.wait_for_selector("#rollout-rows tr")
                trained = page.locator("#rollout-rows tr[data-rollout-id*='-s1-']").first
                rollout = trained.get_attribute("data-rollout-id")
                for name, (route, ready) in PAGES.items():
                    page.goto(f"{served.url}{route or f'#/rollout/{rollout}'}")
                    page.wait_for_selector(ready)
                    page.wait_for_timeout(300)
                    page.screenshot(path=str(args.out / name))
                    print(args.out / name)
                browser.close()
        finally:
            engine.stop()


if __name__ == "__main__":
    main()
