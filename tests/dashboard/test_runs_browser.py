"""The runs comparison and a run's diagnosis in a real headless Chromium, over a SQLite store
whose runs are known by construction (``tests/dashboard/run_records.py``): the config key that
differs, each final validation with its standard error, the sign of the paired difference, one
validation curve per run, a diagnosis that names the bottleneck the metrics were built with and
follows a running run without a reload; markup in a config value stays text, and ids that do
not exist, one run alone and runs without validation say so. A run's page charts its update
metrics with the steps that made no update marked, on whole-step axes, and shows the version
it serves and its config (``FULMEN_DOCS_SCREENSHOTS=1`` saves the docs' picture of it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from fulmen.store import open_store
from tests.dashboard.conftest import TOKEN, ServedDashboard, docs_screenshot, run_coroutine
from tests.dashboard.run_records import (
    HEALTH,
    MARKUP,
    NO_UPDATE,
    add_live_steps,
    fill_runs,
    step_values,
)


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('runs-browser') / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await fill_runs(store)

    run_coroutine(fill)
    return url


@pytest.fixture(scope="module")
def runs_dashboard(runs_store: str) -> Iterator[ServedDashboard]:
    with ServedDashboard(runs_store, token=TOKEN) as served:
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


def tick(page: Any, run_id: str, on: bool) -> None:
    box = page.locator(f'#run-rows tr[data-run-id="{run_id}"] input[type=checkbox]')
    if box.is_checked() != on:
        box.click()
        page.wait_for_function(
            f"document.querySelector('#run-rows tr[data-run-id=\"{run_id}\"] input').checked "
            f"=== {'true' if on else 'false'}"
        )


def test_two_runs_picked_on_the_runs_page_compare(page: Any, runs_dashboard: Any) -> None:
    page.goto(f"{runs_dashboard.url}#/runs")
    page.wait_for_selector('#run-rows tr[data-run-id="ra"]')
    # The page starts with the three latest runs chosen; keep rb and ra only.
    tick(page, "ra", True)
    tick(page, "live", False)
    tick(page, "rc", False)
    page.wait_for_selector("#compare-runs:not([disabled])")
    page.click("#compare-runs")
    page.wait_for_selector("#compare[data-loaded=true]")
    assert page.evaluate("location.hash") == "#/compare?run=ra&run=rb"  # the earlier run first

    finals = page.locator("#compare-summary td.final")
    assert [finals.nth(i).get_attribute("data-final") for i in range(2)] == ["0.25", "0.8"]
    assert finals.nth(0).text_content() == "0.25 ± 0.25"  # stdev of [0, 0, 1, 0] over 2
    assert finals.nth(1).text_content() == "0.8 ± 0.2"

    keys = page.locator("#config-diff tr[data-key]")
    assert [keys.nth(i).get_attribute("data-key") for i in range(keys.count())] == [
        "agent_note",
        "algorithm.grpo.learning_rate",
    ]
    lr = page.locator('#config-diff tr[data-key="algorithm.grpo.learning_rate"] td.value')
    assert [lr.nth(i).text_content() for i in range(2)] == ["0.00001", "0.0001"]
    # markup in a config value is text: the cell shows it, and nothing of it ran or rendered
    note = page.locator('#config-diff tr[data-key="agent_note"] td.value')
    assert note.nth(0).text_content() == "(not set)"
    assert note.nth(1).text_content() == json.dumps(MARKUP)
    assert page.locator("#compare img, #compare script").count() == 0
    assert page.evaluate("window.__pwned") is None

    paired = page.locator('#paired li[data-run-id="rb"]')
    assert paired.get_attribute("data-sign") == "+" and paired.get_attribute("data-n") == "4"
    assert "on 4 shared validation tasks: +0.5" in (paired.text_content() or "")

    curve = page.locator('figure[data-chart="validation reward by training minute"]')
    assert curve.locator("path").count() == 2  # one curve per run on one axis
    assert curve.locator("circle").count() == 4  # before training and the final validation
    bars = page.locator("#compare figure.split[data-run-id]")
    assert bars.count() == 2
    assert "rollouts 89%" in (bars.nth(0).text_content() or "")  # ra: 9 s of 10.1 s
    assert "update 89%" in (bars.nth(1).text_content() or "")


def test_leaving_the_runs_page_while_it_refreshes_raises_nothing(
    page: Any, runs_dashboard: Any
) -> None:
    """A tick starts a refresh; going to the comparison before it ends must not break the page.

    The refresh then draws into the runs page that is gone (the ``page`` fixture fails on any
    error the page raised): it once looked its hint up by id and raised on the null.
    """
    page.goto(f"{runs_dashboard.url}#/runs")
    page.wait_for_selector('#run-rows tr[data-run-id="ra"]')
    with page.expect_response(lambda response: "/api/runs" in response.url):
        page.evaluate(
            """() => {
                document.querySelector('#run-rows tr[data-run-id="ra"] input').click();
                location.hash = '#/compare?run=ra&run=rb';
            }"""
        )
    page.wait_for_selector("#compare[data-loaded=true]")
    page.wait_for_load_state("networkidle")


def test_the_reverse_order_turns_the_sign(page: Any, runs_dashboard: Any) -> None:
    page.goto(f"{runs_dashboard.url}#/compare?run=rb&run=ra")
    page.wait_for_selector("#compare[data-loaded=true]")
    paired = page.locator('#paired li[data-run-id="ra"]')
    assert paired.get_attribute("data-sign") == "-"
    assert "on 4 shared validation tasks: -0.5" in (paired.text_content() or "")


def test_runs_without_validation_missing_ids_and_one_run(page: Any, runs_dashboard: Any) -> None:
    page.goto(f"{runs_dashboard.url}#/compare?run=ra&run=rc")
    page.wait_for_selector("#compare[data-loaded=true]")
    assert page.text_content('#compare-summary tr[data-run-id="rc"] td.final') == "no validation"
    paired = page.locator('#paired li[data-run-id="rc"]')
    assert "fewer than two validation tasks scored by both" in (paired.text_content() or "")
    assert page.text_content('#config-diff tr[data-key="seed"] td.value:last-child') == "7"

    # Each page replaces the one before: wait for this page's own message, not any alert.
    page.goto(f"{runs_dashboard.url}#/compare?run=ra&run=nope")
    page.wait_for_selector("[role=alert]:has-text('nope')")
    assert page.locator("#compare[data-loaded]").count() == 0

    page.goto(f"{runs_dashboard.url}#/compare?run=ra")
    page.wait_for_selector("[role=alert]:has-text('at least two runs')")

    page.goto(f"{runs_dashboard.url}#/run/nope")
    page.wait_for_selector("#run-facts ~ .diagnosis ~ [role=alert]:has-text('nope')")

    page.goto(f"{runs_dashboard.url}#/runs")
    page.wait_for_selector('#run-rows tr[data-run-id="ra"]')
    for run_id in ("live", "rc"):
        tick(page, run_id, False)
    page.wait_for_selector("#compare-runs[disabled]")
    assert "tick two or more" in (page.text_content("#compare-hint") or "")


def test_a_runs_diagnosis_follows_it_live(page: Any, runs_dashboard: Any, runs_store: str) -> None:
    page.goto(f"{runs_dashboard.url}#/runs")
    page.click('#run-rows tr[data-run-id="rb"] a.run-link')
    page.wait_for_selector("#diagnosis .findings")
    assert page.evaluate("location.hash") == "#/run/rb"
    whats = page.locator("#diagnosis .finding .what").all_text_contents()
    assert whats[0].startswith("step time (3 steps, 0.5 min): rollouts 10%, the update 89%")
    (update,) = page.locator("#diagnosis .finding.remedy").all()
    assert "the update takes 89% of step time" in (update.text_content() or "")
    assert "grpo.autocast" in (update.locator(".how").text_content() or "")

    page.goto(f"{runs_dashboard.url}?poll=150#/run/live")
    page.wait_for_selector("#diagnosis[data-steps='0']")
    assert "no steps recorded yet" in (page.text_content("#diagnosis") or "")
    assert "nothing yet" in (page.text_content("#run-served") or "")
    page.click("#run-config summary")  # opened by the reader: the polls must keep it open

    async def log_steps() -> None:
        async with open_store(runs_store, watchdog_interval=None) as store:
            await add_live_steps(store, range(1, 4), step_values(9.0, 1.0))

    run_coroutine(log_steps)
    # no reload: the page's poll finds the new records and reads the diagnosis again
    page.wait_for_selector("#diagnosis[data-steps='3'] .finding.remedy")
    line = page.text_content("#diagnosis .finding.remedy") or ""
    assert "rollouts take 89% of step time (above 60%)" in line and "algorithm.async" in line
    page.wait_for_selector("#update-count[data-steps='3']")
    assert page.get_attribute("#run-config", "open") is not None
    counted = page.text_content("#update-count") or ""
    assert counted.startswith("3 of 3 steps made an update; not recorded by this run: loss, KL")
    reward = page.locator('figure[data-metric="reward/mean"] circle.point')
    assert reward.evaluate_all("cs => cs.map(c => c.dataset.x)") == ["1", "2", "3"]


def attribute(page: Any, selector: str, name: str) -> list[str]:
    """The ``data-NAME`` of every node ``selector`` matches, in document order."""
    return page.locator(selector).evaluate_all(f"ns => ns.map(n => n.dataset.{name})")


def test_a_runs_page_charts_its_update_health(page: Any, runs_dashboard: Any) -> None:
    page.goto(f"{runs_dashboard.url}#/run/rh")
    page.wait_for_selector("#update-count[data-steps='6']")
    assert (page.text_content("#update-count") or "").startswith(
        "4 of 6 steps made an update; no update at steps 2, 5"
    )
    # one chart per update metric, each point a logged value; step 5 logged none of them
    for key, by_step in HEALTH.items():
        chart = f'figure[data-metric="{key}"]'
        logged = [(s, v) for s, v in enumerate(by_step, 1) if v is not None]
        assert attribute(page, f"{chart} circle.point", "x") == [str(s) for s, _ in logged]
        assert [float(y) for y in attribute(page, f"{chart} circle.point", "y")] == [
            v for _, v in logged
        ]
        # the steps without an update are marked on every chart, with why on hover
        assert attribute(page, f"{chart} line.mark", "step") == [str(s) for s in NO_UPDATE]
        # a step axis ticks at whole steps: here every step from 1 to 6
        assert attribute(page, f"{chart} text.x-tick", "value") == ["1", "2", "3", "4", "5", "6"]
    kl = 'figure[data-metric="kl"]'
    assert attribute(page, f"{kl} circle.point.no-update", "x") == ["2"]  # drawn hollow
    assert attribute(page, f"{kl} circle.point", "y") == ["0.1", "0.2", "0.3", "0.4", "0.6"]
    assert page.text_content(f"{kl} figcaption") == "KL"
    assert "no update" in (page.text_content(f"{kl} .legend") or "")
    mark = page.locator(f'{kl} line.mark[data-step="2"] title').text_content() or ""
    assert mark.startswith("step 2: no update: the gradient norm was not finite")
    reward = 'figure[data-metric="reward/mean"]'
    assert attribute(page, f"{reward} line.mark", "step") == ["2", "5"]
    # every step axis of the page ticks at whole steps only
    for value in attribute(page, "figure[data-metric] text.x-tick", "value"):
        assert float(value).is_integer(), value

    reasons = page.locator("#no-update li")
    assert attribute(page, "#no-update li", "step") == ["2", "5"]
    assert "the gradient norm was not finite" in (reasons.nth(0).text_content() or "")
    assert "every rollout in each of the 2 task groups scored the same" in (
        reasons.nth(1).text_content() or ""
    )

    served = page.locator("#run-served")
    assert served.get_attribute("data-step") == "4" and served.get_attribute("data-versions") == "4"
    assert (served.locator(".served-what").text_content() or "") == (
        "step 4 · v4 (adapter, resources v14)"
    )
    assert "validation 0.75" in (served.text_content() or "")
    assert (served.locator(".served-why").text_content() or "") == (
        "step 4 validated best (0.750 against the final 0.500): validation.keep_best serves it"
    )

    # the config, folded until asked for; markup in it is text
    assert page.get_attribute("#run-config", "open") is None
    assert not page.is_visible('#run-config tr[data-key="algorithm.grpo.kl_coef"]')
    docs_screenshot(page, "dashboard-run.png")
    page.click("#run-config summary")
    value = '#run-config tr[data-key="{}"] td.value'
    assert page.text_content(value.format("algorithm.grpo.kl_coef")) == "0.05"
    assert page.text_content(value.format("validation.keep_best")) == "true"
    assert page.text_content(value.format("agent_note")) == json.dumps(MARKUP)
    assert page.locator("#page img, #page script").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_a_run_with_roles_charts_each_roles_update(page: Any, runs_dashboard: Any) -> None:
    page.goto(f"{runs_dashboard.url}#/run/rr")
    page.wait_for_selector("#update-count[data-steps='2']")
    kl = 'figure[data-metric="kl"]'
    assert attribute(page, f"{kl} path", "series") == ["critic/kl", "solver/kl"]  # not val/kl
    assert attribute(page, f"{kl} circle.point", "y") == ["0.2", "0.2", "0.1", "0.2"]
    assert page.locator('figure[data-metric="loss"]').count() == 0  # never logged
    assert "not recorded by this run: loss, entropy" in (page.text_content("#update-count") or "")
