"""The releases pages in a real headless Chromium over a SQLite store whose releases are known
by construction (``tests/dashboard/release_records.py``): the list reached from the navigation,
a release's state, arms, per-arm means 0.75 and 0.25 with their intervals, the +0.5 difference
and its test, a promotion made in the store shown on "refresh" with who and why; markup in a
model name, a decider and a reason shows as text and never runs; an unknown name says so.
``FULMEN_DOCS_SCREENSHOTS=1`` saves the docs' picture of a release."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fulmen.store import open_store
from tests.dashboard.conftest import TOKEN, ServedDashboard, docs_screenshot, run_coroutine
from tests.dashboard.release_records import HOSTILE, KNOWN, MARKUP, fill_releases, promotion

NONE = "\u2013"  # an en dash: no value
MINUS = "\u2212"


@pytest.fixture(scope="module")
def releases_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('releases-browser') / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await fill_releases(store)

    run_coroutine(fill)
    return url


@pytest.fixture(scope="module")
def releases_dashboard(releases_store: str) -> Iterator[ServedDashboard]:
    with ServedDashboard(releases_store, token=TOKEN) as served:
        yield served


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    context.add_init_script(f"sessionStorage.setItem('fulmen.dashboard.token', {TOKEN!r});")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page raised: {errors}"


def cells(page: Any, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_text_contents()]


def test_a_release_shows_its_arms_figures_and_a_promotion(
    page: Any, releases_dashboard: Any, releases_store: str
) -> None:
    page.goto(f"{releases_dashboard.url}#/runs")
    page.click("nav a[data-page=releases]")
    page.wait_for_selector("#release-rows[data-loaded] tr")
    assert page.locator("nav a.active").get_attribute("data-page") == "releases"
    names = page.locator("#release-rows tr").evaluate_all(
        "rows => rows.map(r => r.dataset.release)"
    )
    assert names == [KNOWN, HOSTILE]  # latest created first
    row = page.locator(f'#release-rows tr[data-release="{KNOWN}"]')
    assert row.locator(".release-state").text_content() == "canary"
    assert "run-1 v3" in (row.locator("td.candidate").text_content() or "")

    row.locator("a.release-link").click()
    page.wait_for_selector("#release[data-loaded='1']")
    assert page.evaluate("location.hash") == f"#/release/{KNOWN}"
    assert page.locator("nav a.active").get_attribute("data-page") == "releases"
    assert page.get_attribute("#release-facts .release-state", "data-state") == "canary"
    assert "10% of sessions to the candidate" in (page.text_content("#release-facts") or "")

    arms = "#release-arms tr[data-arm={}] td.{}"
    assert page.text_content(arms.format("incumbent", "model")) == "gemma"
    assert page.text_content(arms.format("incumbent", "version")) == NONE
    assert page.text_content(arms.format("candidate", "model")) == "run-1-v3"
    assert page.text_content(arms.format("candidate", "version")) == "run-1 v3"
    assert cells(page, "#release-arms td.share") == ["90%", "10%"]
    assert cells(page, "#release-arms td.sessions") == ["20", "20"]
    assert cells(page, "#release-arms td.rewarded") == ["20", "20"]
    assert cells(page, "#release-arms td.mean") == ["0.25", "0.75"]
    for ci in cells(page, "#release-arms td.ci"):
        low, high = (float(x) for x in ci.strip("[]").split(", "))
        assert low < high
    line = page.text_content("#release-comparison") or ""
    assert page.get_attribute("#release-comparison", "data-difference") == "0.5"
    assert (
        f"candidate {MINUS} incumbent +0.5" in line
        and "ratio 3.000" in line
        and "Welch t = " in line
    )
    assert cells(page, "#release-events tr td.kind") == ["created"]
    docs_screenshot(page, "dashboard-release.png")

    async def promote() -> None:
        async with open_store(releases_store, watchdog_interval=None) as store:
            await store.decide_release(KNOWN, promotion(f"looks good {MARKUP}"))

    run_coroutine(promote)
    page.click("#release-refresh")
    page.wait_for_selector("#release[data-revision='2'] #release-events tr[data-kind=promoted]")
    assert page.get_attribute("#release-facts .release-state", "data-state") == "promoted"
    assert "every session goes to the candidate" in (page.text_content("#release-facts") or "")
    newest = page.locator("#release-events tbody tr").first  # newest first
    assert newest.get_attribute("data-kind") == "promoted"
    assert newest.locator("td.by").text_content() == "cli"
    assert newest.locator("td.reason").text_content() == f"looks good {MARKUP}"
    assert cells(page, "#release-arms td.mean") == ["0.25", "0.75"]
    assert page.locator("#release img, #release script").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_markup_shows_as_text_and_unknown_names_say_so(page: Any, releases_dashboard: Any) -> None:
    page.goto(f"{releases_dashboard.url}#/releases")
    page.wait_for_selector(f'#release-rows tr[data-release="{HOSTILE}"]')
    listed = page.locator(f'#release-rows tr[data-release="{HOSTILE}"] td.candidate')
    assert (listed.text_content() or "").startswith(MARKUP)
    assert page.locator("#release-rows img, #release-rows script").count() == 0

    page.goto(f"{releases_dashboard.url}#/release/{HOSTILE}")
    page.wait_for_selector("#release[data-loaded] #release-events tr[data-kind=window]")
    assert page.text_content("#release-arms tr[data-arm=candidate] td.model") == MARKUP
    assert cells(page, "#release-arms td.sessions") == ["0", "2"]
    assert cells(page, "#release-arms td.mean") == [NONE, "1"]
    assert "needs two sessions with a reward on each arm" in (
        page.text_content("#release-comparison") or ""
    )
    window = page.locator("#release-events tr[data-kind=window]")
    assert window.get_attribute("data-verdict") == "waiting"
    assert (window.locator("td.kind").text_content() or "") == "window 0 waiting"
    assert window.locator("td.by").text_content() == MARKUP[:40]
    assert window.locator("td.reason").text_content() == f"waiting: {MARKUP}"
    assert page.locator("#page img, #page script").count() == 0
    assert page.evaluate("window.__pwned") is None

    page.goto(f"{releases_dashboard.url}#/release/nope")
    page.wait_for_selector("[role=alert]:has-text(\"release 'nope' does not exist\")")
    assert page.locator("#release[data-loaded]").count() == 0
