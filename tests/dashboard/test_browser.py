"""The dashboard in a real headless Chromium over a store holding a real toy run: each page
shows the numbers the store holds, filters count what a brute-force pass counts, a rollout that
finishes appears without a reload, agent markup renders as text, and without the token the page
gets no data."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fulmen.store import open_store
from fulmen.store.reading import iter_rollouts, read_llm_calls
from fulmen.tracing import semconv
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import Mode, RolloutQuery
from tests.dashboard.conftest import TOKEN, run_coroutine
from tests.dashboard.finished import finish_rollout
from tests.dashboard.toy_store import HOSTILE_COMMAND, HOSTILE_ID, HOSTILE_REPLY, HOSTILE_TASK
from tests.prefork import python

pytestmark = pytest.mark.slow


def rewards_in(url: str) -> dict[str, tuple[Mode, float | None]]:
    """Every rollout's mode and reward, as fulmen.transitions reads them (not the dashboard)."""

    async def read() -> dict[str, tuple[Mode, float | None]]:
        async with open_store(url, watchdog_interval=None) as store:
            found: dict[str, tuple[Mode, float | None]] = {}
            async for rollout in iter_rollouts(store, RolloutQuery(limit=1000)):
                records = await load_attempt(store, rollout.rollout_id)
                found[rollout.rollout_id] = (rollout.mode, records.final_reward)
            return found

    return run_coroutine(read)


def shown_number(text: str | None) -> float | None:
    return None if text in (None, "\u2013") else float(text)  # an en dash: no value


def table_rows(page: Any) -> dict[str, float | None]:
    rows = page.locator("#rollout-rows tr[data-rollout-id]")
    return {
        rows.nth(i).get_attribute("data-rollout-id"): shown_number(
            rows.nth(i).locator("td.reward").text_content()
        )
        for i in range(rows.count())
    }


def test_rollouts_table_and_rollout_page_show_the_rewards_in_the_store(
    page: Any, dashboard: Any, toy_store: Any
) -> None:
    expected = rewards_in(toy_store.url)
    assert len(expected) > 20  # a real run: train and validation rollouts
    page.goto(f"{dashboard.url}#/rollouts?limit=100")
    page.wait_for_selector("#rollout-rows tr[data-rollout-id]")
    shown = table_rows(page)
    assert shown.keys() == expected.keys()
    for rollout_id, (_, reward) in expected.items():
        assert shown[rollout_id] == pytest.approx(reward, abs=5e-4), rollout_id

    # one trained rollout: its reward, and every completion token of its call marked trained
    rollout_id = next(r for r, (mode, _) in expected.items() if mode is Mode.TRAIN)

    async def completion() -> list[int]:
        async with open_store(toy_store.url, watchdog_interval=None) as store:
            (call,) = await read_llm_calls(store, rollout_id)
            return call.choices[0].token_ids or []

    tokens = run_coroutine(completion)
    page.click(f'tr[data-rollout-id="{rollout_id}"] a')
    page.wait_for_selector("#final-reward")
    assert shown_number(page.text_content("#final-reward")) == pytest.approx(
        expected[rollout_id][1], abs=5e-4
    )
    strip = page.locator(".call .tokens").first.locator(".tok.trained")
    assert strip.count() == len(tokens) > 0
    # The run's engine is gone: its model's tokenizer on this machine names the tokens.
    from transformers import AutoTokenizer

    from fulmen.engines.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    shown = [strip.nth(i).text_content() for i in range(strip.count())]
    assert shown == [tokenizer.decode([t]) for t in tokens]
    assert "text from tokenizer of tiny" in (page.text_content(".legend-tokens") or "")
    assert page.locator(".transition").count() == 1
    assert page.locator(".span-tree li[data-span='fulmen.rollout']").count() == 1


def test_the_filter_count_is_what_the_store_holds(
    page: Any, dashboard: Any, toy_store: Any
) -> None:
    expected = [
        rollout_id
        for rollout_id, (mode, reward) in rewards_in(toy_store.url).items()
        if mode is Mode.VAL and reward is not None and reward >= 0.1
    ]
    page.goto(f"{dashboard.url}#/rollouts")
    page.wait_for_selector("#rollout-rows tr[data-rollout-id]")
    page.select_option("select[name=mode]", "val")
    page.fill("input[name=min_reward]", "0.1")
    page.click("#rollout-filters button[type=submit]")
    page.wait_for_function(
        "location.hash.includes('min_reward=0.1') && "
        "document.querySelector('#rollout-count')?.dataset.exhausted === 'true'"
    )
    count = page.locator("#rollout-count")
    assert count.get_attribute("data-count") == str(len(expected))
    assert count.text_content().startswith(f"{len(expected)} rollout")
    assert sorted(table_rows(page)) == sorted(expected)


def test_prompt_versions_diff_side_by_side(page: Any, dashboard: Any, toy_store: Any) -> None:
    a, b = toy_store.prompt_refs
    page.goto(f"{dashboard.url}#/resources?a={a}&b={b}")
    page.wait_for_selector("#prompt-diff tbody tr")
    rows = page.locator("#prompt-diff tbody tr")
    got = [
        (
            rows.nth(i).get_attribute("class"),
            rows.nth(i).locator("td.left").text_content(),
            rows.nth(i).locator("td.right").text_content(),
        )
        for i in range(rows.count())
    ]
    assert got == [
        ("diff-row same", "Answer the question.", "Answer the question."),
        ("diff-row changed", "Use the calculator for arithmetic.", "Always use the calculator."),
        ("diff-row same", "Be brief.", "Be brief."),
        ("diff-row added", "", "End with ANSWER: n."),
        ("diff-row same", "Question: {question}", "Question: {question}"),
    ]
    # lineage: the second version hangs under the first
    assert page.locator(f'.lineage li[data-ref="{a}"] li[data-ref="{b}"]').count() == 1


def test_a_rollout_that_finishes_appears_without_a_reload(
    page: Any, dashboard: Any, toy_store: Any
) -> None:
    page.goto(f"{dashboard.url}?poll=300#/rollouts")
    page.wait_for_selector("#rollout-rows tr[data-rollout-id]")
    page.evaluate("window.__same_page = true")

    async def finish() -> None:
        async with open_store(toy_store.url, watchdog_interval=None) as store:
            await finish_rollout(store, "live-update", task="arrives later", reward=0.75)

    run_coroutine(finish)
    # the poll may first catch it running, before its reward: wait for the finished row
    row = '#rollout-rows tr[data-rollout-id="live-update"]'
    page.wait_for_function(
        f"document.querySelector('{row} td.reward')?.textContent === '0.75' && "
        f"document.querySelector('{row} .status')?.textContent === 'succeeded'",
        timeout=30_000,  # only a bound on a hang: the page polls every 300 ms
    )
    assert page.evaluate("window.__same_page") is True  # no reload happened


def test_markup_in_agent_text_renders_as_text(page: Any, dashboard: Any) -> None:
    response = page.goto(f"{dashboard.url}#/rollout/{HOSTILE_ID}")
    # defence in depth: only the dashboard's own scripts may run (bypassed in this context)
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_selector("#final-reward")
    assert page.locator(".reply pre.text").text_content() == HOSTILE_REPLY
    assert HOSTILE_TASK in page.locator("#page").text_content()
    assert "<b>x</b>" in page.locator(".call h3").text_content()  # the agent name, as text
    # The command agent's run: its exit status, and its stderr (open: it failed) as text.
    command = page.locator('.command[data-role="command"]')
    assert "exit 3" in command.locator(".facts").text_content()
    assert command.locator(".stderr pre").text_content() == HOSTILE_COMMAND[semconv.COMMAND_STDERR]
    assert command.locator(".stderr pre").is_visible()
    assert page.locator("#page script, #page img, #page b:text('x')").count() == 0
    page.goto(f"{dashboard.url}#/rollouts?q=pwned")
    page.wait_for_selector(f'tr[data-rollout-id="{HOSTILE_ID}"]')
    assert "<script>" in page.locator(f'tr[data-rollout-id="{HOSTILE_ID}"] td.task').text_content()
    assert page.evaluate("window.__pwned") is None  # nothing the agent wrote ran


def test_without_the_right_token_the_page_gets_no_data(dashboard: Any, browser: Any) -> None:
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.goto(f"{dashboard.url}#/rollouts")
    page.wait_for_selector("#token-form:not([hidden])")
    assert page.locator("tr[data-rollout-id]").count() == 0
    status = "(t) => fetch('/api/rollouts', {headers: t ? {authorization: 'Bearer ' + t} : {}})"
    assert page.evaluate(f"({status})(null).then(r => r.status)") == 401
    assert page.evaluate(f"({status})('wrong').then(r => r.status)") == 401

    page.fill("#token-input", "wrong")
    page.click("#token-form button")
    page.wait_for_function("document.querySelector('#token-error').textContent.includes('wrong')")
    assert page.locator("tr[data-rollout-id]").count() == 0

    page.fill("#token-input", TOKEN)
    page.click("#token-form button")
    page.wait_for_selector("#rollout-rows tr[data-rollout-id]")
    assert page.locator("#token-form").is_hidden()
    context.close()


def test_fulmen_train_served_the_dashboard_on_the_port_asked_for(toy_store: Any) -> None:
    url = f"http://127.0.0.1:{toy_store.dashboard_port}/"
    assert re.search(rf"^dashboard: {re.escape(url)}$", toy_store.train_output, re.M)


def test_runs_page_plots_the_metrics_the_store_holds(
    page: Any, dashboard: Any, toy_store: Any
) -> None:
    async def read() -> tuple[str, int, int]:
        async with open_store(toy_store.url, watchdog_interval=None) as store:
            (run,) = (await store.list_runs()).items
            metrics = (await store.query_run_metrics(run.run_id)).items
            train = sum("reward/mean" in m.values for m in metrics)
            val = sum("val/reward_mean" in m.values for m in metrics)
            return run.run_id, train, val

    run_id, train, val = run_coroutine(read)
    assert train == 2 and val == 3  # two steps, validation before and after each
    page.goto(f"{dashboard.url}#/runs")
    page.wait_for_selector(f'tr[data-run-id="{run_id}"]')
    assert page.locator('figure[data-chart="train reward (mean)"] circle').count() == train
    assert page.locator('figure[data-chart="validation reward"] circle').count() == val
    assert page.locator('figure[data-chart^="time split"] .seg').count() == 4
    # A two-step run counts two steps (step 0 is the validation before training) ...
    row = page.locator(f'tr[data-run-id="{run_id}"] td.num').first
    assert row.inner_text() == "2"
    # ... and its step axis names whole steps only (it ticked 0.5, 1.5 before).
    ticks = page.locator('figure[data-chart="validation reward"] text.tick')
    labels = ticks.all_text_contents()  # SVG text has no innerText
    steps = [label for label in labels if label != "step"][-3:]
    assert steps == ["0", "1", "2"], labels
    # Runs compare on one time axis too: validation reward against training minutes.
    by_minute = page.locator('figure[data-chart="validation reward by training minute"]')
    assert by_minute.locator("circle").count() == val
    assert "training minutes" in by_minute.locator("text.tick").all_text_contents()


def test_serve_this_version_loads_it_into_the_engine(
    browser: Any, toy_store: Any, tmp_path: Any
) -> None:
    """The action posts the version's adapter to a real built-in engine, which then serves it."""
    import httpx

    from fulmen.engines.launcher import BuiltinLauncher
    from tests.dashboard.conftest import ServedDashboard

    async def first_version() -> Any:
        async with open_store(toy_store.url, watchdog_interval=None) as store:
            return (await store.list_model_versions())[0]

    version = run_coroutine(first_version)
    engine = BuiltinLauncher("tiny", log_path=tmp_path / "engine.log", python=python())
    engine.start()
    try:
        with ServedDashboard(toy_store.url, token=None, engine_url=engine.root_url) as served:
            context = browser.new_context(bypass_csp=True)
            page = context.new_page()
            page.goto(f"{served.url}#/resources")
            key = f"{version.run_id}:{version.version}"
            page.click(f'tr[data-version="{key}"] button')
            page.wait_for_function(
                "document.querySelector('#serve-result').textContent.startsWith('engine now')"
            )
            name = f"{version.run_id}-v{version.version}"
            assert f"as model {name}" in page.text_content("#serve-result")
            context.close()
        models = httpx.get(f"{engine.root_url}/v1/models", timeout=10).json()
        assert name in {m["id"] for m in models["data"]}
    finally:
        engine.stop()
