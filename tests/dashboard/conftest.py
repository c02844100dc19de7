"""Fixtures of the dashboard tests: a recorded toy store, the dashboard served over it, and a
headless Chromium (Debian's ``chromium`` package driven by Playwright; the wheel's own browser
download is never used). Without ``/usr/bin/chromium`` the browser tests skip, except under
``FULMEN_REQUIRE_CHROMIUM=1`` (CI), where they fail."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fulmen.dashboard.server import DashboardServer
from fulmen.store import open_store

CHROMIUM = Path("/usr/bin/chromium")
#: Where the docs' dashboard screenshots live (``docs/dashboard.md`` shows them).
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "dashboard-test-token"
T = TypeVar("T")


class ServedDashboard:
    """The dashboard over a store URL, served from a thread with its own event loop."""

    def __init__(
        self,
        store_url: str,
        *,
        token: str | None,
        engine_url: str | None = None,
        debug: Any = None,
    ):
        self._store_url = store_url
        self._token = token
        self._engine_url = engine_url
        self._debug = debug
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.url = ""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        try:
            async with open_store(self._store_url, watchdog_interval=None) as store:
                server = DashboardServer(
                    store, token=self._token, engine_url=self._engine_url, debug=self._debug
                )
                self.url = await server.start()
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                self._ready.set()
                await self._stop.wait()
                await server.aclose()
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def __enter__(self) -> ServedDashboard:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)


def docs_screenshot(page: Any, name: str) -> None:
    """Save ``page`` as ``docs/images/NAME`` when ``FULMEN_DOCS_SCREENSHOTS=1`` (else nothing).

    The browser tests open each page over data known by construction, so the docs' pictures are
    regenerated from the state the tests check: ``FULMEN_DOCS_SCREENSHOTS=1 pytest
    tests/dashboard/test_runs_browser.py tests/dashboard/test_releases_browser.py``.
    """
    if os.environ.get("FULMEN_DOCS_SCREENSHOTS") != "1":
        return
    page.wait_for_timeout(300)  # let the last redraw settle
    page.screenshot(path=str(DOCS_IMAGES / name), full_page=True)


def run_coroutine(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion in a thread of its own.

    Playwright's sync API keeps an event loop running in the test's thread, where
    ``asyncio.run`` refuses to start another.
    """
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


@pytest.fixture(scope="session")
def toy_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    from tests.dashboard.toy_store import record_toy_store

    return record_toy_store(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="session")
def dashboard(toy_store: Any) -> Iterator[ServedDashboard]:
    with ServedDashboard(toy_store.url, token=TOKEN) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module: Playwright's sync API keeps an event loop running in this
    thread while it lives, which would stop the async tests of later modules."""
    if not CHROMIUM.exists():
        if os.environ.get("FULMEN_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"FULMEN_REQUIRE_CHROMIUM is set but {CHROMIUM} does not exist")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(dashboard: ServedDashboard, browser: Any) -> Iterator[Any]:
    """A fresh browser context (empty sessionStorage) whose page already holds the token.

    The page's Content-Security-Policy is bypassed: Playwright's waits evaluate strings, which
    it forbids, and the escaping tests must hold without its help (the header is tested apart).
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    context.add_init_script(f"sessionStorage.setItem('fulmen.dashboard.token', {TOKEN!r});")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page raised: {errors}"
