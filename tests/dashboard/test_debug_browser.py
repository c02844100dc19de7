"""The debugging actions in a real headless Chromium over the recorded toy run: the rollout
page's Replay button reports a faithful replay with the store's reward, the rollouts page
re-scores the filtered rollouts and shows how many changed, a changed agent is shown at its
first diverging call with the diff, and without ``--config`` the Replay button is disabled with
the reason."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fulmen.dashboard.debug_api import DebugTools
from fulmen.debugging import RecordedRollout
from fulmen.store import open_store
from fulmen.store.reading import iter_rollouts
from fulmen.trainer.config import load_config
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import Mode, RolloutQuery, RolloutStatus
from tests.dashboard.conftest import TOKEN, ServedDashboard, run_coroutine
from tests.dashboard.toy_store import TOY

pytestmark = pytest.mark.slow


def everything_is_one(rollout: RecordedRollout) -> float:
    """A new reward that gives every rollout 1.0: exactly those below 1.0 change."""
    return 1.0


@pytest.fixture(scope="module")
def debug_dashboard(
    toy_store: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedDashboard]:
    """The dashboard over the toy store, launched with the toy config and a reward function."""
    path, modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(TOY.parent))  # the config's agent, as fulmen dashboard --config does
    run = tmp_path_factory.mktemp("debug-dashboard")
    config = load_config(TOY, overrides=[f"run_dir={run}", "rollouts.concurrency=4"])
    tools = DebugTools(
        config=config, reward=everything_is_one, reward_spec="test:everything_is_one"
    )
    try:
        with ServedDashboard(toy_store.url, token=TOKEN, debug=tools) as served:
            yield served
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if name in ("agent", "tasks"):
                del sys.modules[name]


@pytest.fixture(scope="module")
def changed_agent_dashboard(
    toy_store: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedDashboard]:
    """The dashboard launched with a config whose agent words its request differently."""
    run = tmp_path_factory.mktemp("changed-agent")
    agent = "tests.dashboard.agents:reworded_toy"
    config = load_config(TOY, overrides=[f"run_dir={run}", f"agent={agent}"])
    with ServedDashboard(toy_store.url, token=TOKEN, debug=DebugTools(config=config)) as served:
        yield served


@pytest.fixture
def debug_page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    context.add_init_script(f"sessionStorage.setItem('fulmen.dashboard.token', {TOKEN!r});")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"the page raised: {errors}"


def train_rewards(url: str) -> dict[str, float | None]:
    """Each succeeded train rollout's reward, as fulmen.transitions reads it."""

    async def read() -> dict[str, float | None]:
        async with open_store(url, watchdog_interval=None) as store:
            query = RolloutQuery(mode=Mode.TRAIN, statuses=[RolloutStatus.SUCCEEDED], limit=500)
            return {
                r.rollout_id: (await load_attempt(store, r.rollout_id)).final_reward
                async for r in iter_rollouts(store, query)
            }

    return run_coroutine(read)


def test_replay_button_reports_a_faithful_replay_with_the_stored_reward(
    debug_page: Any, debug_dashboard: ServedDashboard, toy_store: Any
) -> None:
    rewards = train_rewards(toy_store.url)
    rollout_id = sorted(rewards)[0]
    debug_page.goto(f"{debug_dashboard.url}#/rollout/{rollout_id}")
    debug_page.click("#replay-button")
    debug_page.wait_for_selector("#replay-report", timeout=60_000)
    assert debug_page.get_attribute("#replay-report", "data-faithful") == "true"
    assert debug_page.text_content("#replay-verdict").startswith("faithful")
    shown = float(debug_page.text_content("#replay-reward"))
    assert shown == pytest.approx(rewards[rollout_id], abs=5e-5)
    assert debug_page.text_content("#replay-recorded-reward") == debug_page.text_content(
        "#replay-reward"
    )


def test_rescore_shows_how_many_of_the_filtered_rollouts_changed(
    debug_page: Any, debug_dashboard: ServedDashboard, toy_store: Any
) -> None:
    rewards = train_rewards(toy_store.url)
    changed = sum(r is None or abs(r - 1.0) > 1e-9 for r in rewards.values())
    assert changed > 0  # the toy run holds rewards below 1.0
    debug_page.goto(f"{debug_dashboard.url}#/rollouts?mode=train")
    debug_page.fill('input[name="rescore_limit"]', "500")
    debug_page.click("#rescore-button")
    debug_page.wait_for_selector("#rescore-counts", timeout=30_000)
    counts = debug_page.locator("#rescore-counts")
    assert counts.get_attribute("data-scored") == str(len(rewards))
    assert counts.get_attribute("data-changed") == str(changed)
    assert f"{changed} changed" in counts.text_content()
    shown = debug_page.locator(".most-changed tr[data-rollout-id]")
    assert shown.count() == min(10, changed)


def test_without_a_config_replay_is_disabled_with_the_reason(
    page: Any, dashboard: Any, toy_store: Any
) -> None:
    rollout_id = sorted(train_rewards(toy_store.url))[0]
    page.goto(f"{dashboard.url}#/rollout/{rollout_id}")
    page.wait_for_selector("#replay-button")
    assert page.locator("#replay-button").is_disabled()
    assert "--config" in page.text_content("#replay-why")


def test_replay_of_a_changed_agent_shows_the_first_diverging_call(
    debug_page: Any, changed_agent_dashboard: ServedDashboard, toy_store: Any
) -> None:
    rollout_id = sorted(train_rewards(toy_store.url))[0]
    debug_page.goto(f"{changed_agent_dashboard.url}#/rollout/{rollout_id}")
    debug_page.click("#replay-button")
    debug_page.wait_for_selector("#replay-report", timeout=60_000)
    assert debug_page.get_attribute("#replay-report", "data-faithful") == "false"
    assert debug_page.text_content("#replay-verdict") == "DIFFERS from the recording"
    first = debug_page.text_content("#first-divergence")
    assert first == "call #1 differs from recorded call #1 in messages"
    diff = debug_page.text_content(".divergences pre.diff-text")
    assert "--- recorded" in diff and "Reworded: " in diff
    assert debug_page.text_content("#replay-reward") == "none"  # refused: the agent failed
