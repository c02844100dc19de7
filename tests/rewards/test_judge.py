"""Rewards from a judge model and a rubric, against a scripted judge upstream (a real server)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fulmen.rewards import RewardConfig
from fulmen.rewards.cache import JudgeCache
from fulmen.rewards.content import JudgedReply, JudgedRollout
from fulmen.rewards.posting import judge_rollouts
from fulmen.rewards.scoring import RewardJudge
from fulmen.store import open_store
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    RewardCreate,
    RolloutCreate,
    RolloutStatus,
)
from fulmen.types.records import AGENT_NAME_HEADER
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app


@pytest.fixture
async def judge_server() -> AsyncIterator[tuple[Script, str]]:
    script = Script(mode="hosted", model="judge-model")
    async with serve_app(create_upstream_app(script)) as url:
        yield script, f"{url}/v1"


@pytest.fixture
async def store() -> AsyncIterator[Any]:
    async with open_store("memory://", watchdog_interval=None) as opened:
        yield opened


async def finished(store: Any, answers: Sequence[str], *, task: str = "say hi") -> list[Any]:
    """One succeeded rollout per answer, each with one recorded call replying ``answer``."""
    creates = [
        RolloutCreate(input={"prompt": task}, task_id="t0", rollout_id=f"r{i}")
        for i in range(len(answers))
    ]
    await store.enqueue(creates)
    claims = await store.claim("w", limit=len(answers))
    for claim in claims:
        rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
        index = int(rid[1:])
        await store.add_llm_calls(
            [
                LLMCallCreate(
                    call_id=f"c-{rid}",
                    rollout_id=rid,
                    attempt_id=aid,
                    request={"messages": [{"role": "user", "content": task}]},
                    response={"choices": [{"message": {"content": answers[index]}}]},
                    started_at=0.0,
                )
            ]
        )
        await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    rollouts = [await store.get_rollout(c.rollout_id) for c in creates]
    assert all(r.status is RolloutStatus.SUCCEEDED for r in rollouts)
    return rollouts


def config(url: str, criteria: list[dict[str, Any]], **judge: Any) -> RewardConfig:
    return RewardConfig.model_validate(
        {"judge": {"base_url": url, "model": "judge-model", **judge}, "criteria": criteria}
    )


RUBRIC = [
    {"name": "goal", "weight": 3.0, "question": "Does it greet?"},
    {"name": "tone", "weight": 1.0, "question": "Is it polite?"},
]


async def final(store: Any, rollout_id: str) -> float | None:
    return (await load_attempt(store, rollout_id)).final_reward


async def test_rubric_scores_become_named_rewards_and_a_weighted_primary(
    judge_server: tuple[Script, str], store: Any
) -> None:
    script, url = judge_server
    script.replies = deque([Reply(content='{"reasoning": "ok", "scores": {"goal": 8, "tone": 4}}')])
    rollouts = await finished(store, ["hello"])
    async with RewardJudge(config(url, RUBRIC)) as judge:
        [judgement] = await judge_rollouts(store, judge, [rollouts])
    assert judgement.error is None
    # goal 8/10, tone 4/10; primary = (3 * 0.8 + 1 * 0.4) / (3 + 1) = 0.7
    assert judgement.values == {"goal": 0.8, "tone": 0.4, "reward": pytest.approx(0.7)}
    [posted] = await store.list_rewards("r0")
    assert posted.primary == "reward" and posted.values["goal"] == 0.8
    assert await final(store, "r0") == pytest.approx(0.7)
    # The prompt holds the rubric, the task and the rollout's reply.
    [request] = script.requests
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "goal: Does it greet?" in system and "0 (not met at all) to 10" in system
    assert "say hi" in user and "hello" in user
    assert request["temperature"] == 0.0 and request["model"] == "judge-model"


async def test_a_group_ranking_gives_scores_comparable_within_the_group(
    judge_server: tuple[Script, str], store: Any
) -> None:
    script, url = judge_server
    script.replies = deque([Reply(content='{"ranking": ["R3", "R1", "R4", "R2"]}')])
    rollouts = await finished(store, ["a", "b", "c", "d"])
    criteria = [{"name": "best", "rank": "Which greeting is best?"}]
    async with RewardJudge(config(url, criteria)) as judge:
        judgements = await judge_rollouts(store, judge, [rollouts])
    # rank r of n -> (n - r) / (n - 1): R3 first (1.0), R1 (2/3), R4 (1/3), R2 last (0.0).
    expected = {"r0": 2 / 3, "r1": 0.0, "r2": 1.0, "r3": 1 / 3}
    assert {j.rollout_id: j.values["best"] for j in judgements if j.values} == pytest.approx(
        expected
    )
    for rid, value in expected.items():
        assert await final(store, rid) == pytest.approx(value)
    assert len(script.requests) == 1  # one call for the whole group
    user = script.requests[0]["messages"][1]["content"]
    assert "=== R1 ===\n[reply 1]\na" in user and "=== R4 ===\n[reply 1]\nd" in user


async def test_the_same_content_is_judged_once_and_the_cache_is_on_disk(
    judge_server: tuple[Script, str], store: Any, tmp_path: Path
) -> None:
    script, url = judge_server
    script.default_content = '{"scores": {"goal": 10, "tone": 10}}'
    rollouts = await finished(store, ["hello", "hello"])
    path = tmp_path / "judge-cache.jsonl"
    async with RewardJudge(config(url, RUBRIC), cache=JudgeCache(path)) as judge:
        first = await judge_rollouts(store, judge, [rollouts])
        assert judge.counts.requests == 1 and judge.counts.cache_hits == 1  # same content
    assert len(script.requests) == 1
    # A new judge (a resumed run) reads the file: no request reaches the upstream.
    async with RewardJudge(config(url, RUBRIC), cache=JudgeCache(path)) as judge:
        again = await judge.judge_group([])
        second = await judge_rollouts(store, judge, [rollouts[:1]])
        assert judge.counts.requests == 0 and judge.counts.cache_hits == 1
    assert again == [] and len(script.requests) == 1
    assert second[0].values == first[0].values
    # Another judge model is another question.
    other = config(url, RUBRIC, model="other-judge")
    async with RewardJudge(other, cache=JudgeCache(path)) as judge:
        await judge_rollouts(store, judge, [rollouts[:1]])
    assert len(script.requests) == 2


async def test_a_judge_out_of_format_twice_gives_the_rollout_an_error_and_no_reward(
    judge_server: tuple[Script, str], store: Any
) -> None:
    script, url = judge_server
    script.replies = deque(
        [Reply(content="I'd say 8/10."), Reply(content='{"scores": {"goal": 11, "tone": 2}}')]
    )
    rollouts = await finished(store, ["hello"])
    # The agent emitted its own reward (posted here): the judge's failure withdraws it.
    await store.add_reward(RewardCreate.scalar(1.0, rollout_id="r0"))
    assert await final(store, "r0") == 1.0
    async with RewardJudge(config(url, RUBRIC)) as judge:
        [judgement] = await judge_rollouts(store, judge, [rollouts])
        assert judge.counts.retries == 1 and judge.counts.failures == 1
    assert judgement.values is None
    assert judgement.error is not None
    assert "out of format twice" in judgement.error and "outside 0..10" in judgement.error
    # The retry told the judge what was wrong with its first answer.
    retry = script.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I'd say 8/10."}
    assert "not JSON" in retry[-1]["content"]
    posted = (await store.list_rewards("r0"))[-1]
    assert posted.metadata["scoring_error"] == judgement.error
    assert await final(store, "r0") is None  # no reward, never a silent 0
    records = await load_attempt(store, "r0")
    assert records.trajectory().transitions == []


async def test_an_unreachable_judge_fails_each_rollout_of_the_group_with_its_reason(
    store: Any,
) -> None:
    rollouts = await finished(store, ["a", "b"])
    criteria = [{"name": "best", "rank": "Which is best?"}]
    # Retried as the defaults say (4 tries), with waits shortened to milliseconds.
    fast = {"initial_delay_s": 0.001, "max_delay_s": 0.002}
    unreachable = config("http://127.0.0.1:9/v1", criteria, timeout_s=5, retry=fast)
    async with RewardJudge(unreachable) as judge:
        judgements = await judge_rollouts(store, judge, [rollouts])
        assert judge.counts.http_retries == 3
    assert [j.values for j in judgements] == [None, None]
    assert all("ranking 'best' of the group" in (j.error or "") for j in judgements)
    assert all("ConnectError" in (j.error or "") for j in judgements)
    assert all("gave up after 4 tries" in (j.error or "") for j in judgements)


async def test_the_key_comes_from_its_variable_and_calls_are_recorded_as_the_judge(
    judge_server: tuple[Script, str], store: Any
) -> None:
    script, url = judge_server
    script.default_content = '{"scores": {"goal": 5, "tone": 5}}'
    rollouts = await finished(store, ["hello"])
    recorded: list[LLMCallCreate] = []

    async def record(calls: Sequence[LLMCallCreate]) -> None:
        recorded.extend(calls)
        await store.add_llm_calls(calls)

    environ = {"JUDGE_KEY": "sk-test-123"}  # as the run's settings read it
    cfg = config(url, RUBRIC, api_key_env="JUDGE_KEY")
    assert "sk-test" not in json.dumps(cfg.model_dump())
    async with RewardJudge(
        cfg,
        api_key=environ[cfg.judge.api_key_env],
        record=record,  # type: ignore[union-attr,index]
    ) as judge:
        await judge_rollouts(store, judge, [rollouts])
    [headers] = script.headers
    assert headers["authorization"] == "Bearer sk-test-123"
    assert headers[AGENT_NAME_HEADER] == "judge"
    [call] = recorded
    assert call.agent_name == "judge" and call.rollout_id is None
    assert call.model == "judge-model" and call.choices[0].text == script.default_content
    # The judge's call is not one of the rollout's: training never sees it.
    assert len((await load_attempt(store, "r0")).calls) == 1


async def test_layered_rewards_mix_code_checks_and_judge_questions(
    judge_server: tuple[Script, str], store: Any
) -> None:
    script, url = judge_server
    script.default_content = '{"scores": {"goal": 6}}'
    rollouts = await finished(store, ["hi", "a long answer"])
    criteria = [
        {"name": "syntax", "weight": 0.3, "check": "tests.rewards.checks:is_short"},
        {"name": "efficiency", "weight": 0.4, "rank": "Which is the most efficient?"},
        {"name": "goal", "weight": 0.3, "question": "Does it answer?"},
    ]
    script.reply_for = lambda body: Reply(
        content='{"ranking": ["R2", "R1"]}'
        if "R1" in body["messages"][0]["content"]
        else '{"scores": {"goal": 6}}'
    )
    async with RewardJudge(config(url, criteria)) as judge:
        judgements = await judge_rollouts(store, judge, [rollouts])
    first, second = (j.values for j in judgements)
    assert first == {"syntax": 1.0, "efficiency": 0.0, "goal": 0.6, "reward": pytest.approx(0.48)}
    assert second == {"syntax": 0.0, "efficiency": 1.0, "goal": 0.6, "reward": pytest.approx(0.58)}
    # Alone (a validation rollout), the rank criterion is left out and the rest renormalized.
    async with RewardJudge(config(url, criteria)) as judge:
        [alone] = await judge.judge_group([JudgedRollout("v", "t")])
    assert alone.values is not None
    # no reply: syntax 1.0 (empty is short); (0.3 * 1.0 + 0.3 * 0.6) / (0.3 + 0.3) = 0.8
    assert alone.values == {"syntax": 1.0, "goal": 0.6, "reward": pytest.approx(0.8)}


async def test_a_check_out_of_range_is_an_error_not_a_clamp(store: Any) -> None:
    rollouts = await finished(store, ["hi"])
    cfg = RewardConfig.model_validate(
        {"criteria": [{"name": "size", "check": "tests.rewards.checks:too_big"}]}
    )
    async with RewardJudge(cfg) as judge:
        [judgement] = await judge_rollouts(store, judge, [rollouts])
    assert judgement.error is not None and "returned 3.0, not a number in [0, 1]" in judgement.error


def test_the_config_refuses_what_would_have_no_effect() -> None:
    with pytest.raises(ValueError, match=r"need reward\.judge"):
        RewardConfig.model_validate({"criteria": [{"name": "g", "question": "ok?"}]})
    with pytest.raises(ValueError, match="exactly one of question, rank, check"):
        RewardConfig.model_validate(
            {"criteria": [{"name": "g", "question": "ok?", "check": "m:f"}]}
        )
    with pytest.raises(ValueError, match="has no effect"):
        RewardConfig.model_validate(
            {
                "judge": {"base_url": "http://x/v1", "model": "m"},
                "criteria": [{"name": "g", "check": "m:f"}],
            }
        )
    with pytest.raises(ValueError, match="repeat"):
        RewardConfig.model_validate(
            {"criteria": [{"name": "g", "check": "m:f"}, {"name": "g", "check": "m:g"}]}
        )


TIED = [
    {"name": "short", "weight": 0.6, "check": "tests.rewards.checks:is_short"},
    {"name": "best", "weight": 0.4, "rank": "Which greeting is best?"},
]


async def test_identical_rollouts_tie_instead_of_getting_a_made_up_order(
    judge_server: tuple[Script, str], store: Any
) -> None:
    """Issue 46, item 4: with ties forbidden, four identical rollouts got 1.0, 0.867, 0.733,
    0.6 (rank scores 1, 2/3, 1/3, 0 at weight 0.4 beside a check at 0.6), and GRPO trained on
    advantages of +-1.16 that meant nothing. Identical content now ties: 0.5 each, no call."""
    script, url = judge_server
    script.replies = deque([Reply(content='{"ranking": ["R1", "R2", "R3", "R4"]}')])
    rollouts = await finished(store, ["hi"] * 4)
    async with RewardJudge(config(url, TIED)) as judge:
        judgements = await judge_rollouts(store, judge, [rollouts])
    assert [j.values for j in judgements] == [
        {"short": 1.0, "best": 0.5, "reward": pytest.approx(0.8)}
    ] * 4
    assert script.requests == []  # nothing to rank: no judge call
    # ties: forbidden, the behaviour before, on request
    forbidden = [TIED[0], {**TIED[1], "ties": "forbidden"}]
    async with RewardJudge(config(url, forbidden)) as judge:
        strict = await judge.judge_group(
            [JudgedRollout(f"r{i}", "t", (JudgedReply("hi"),)) for i in range(4)]
        )
    rewards = [j.values["reward"] for j in strict if j.values]
    assert rewards == pytest.approx([1.0, 0.8667, 0.7333, 0.6], abs=1e-4)
    assert "(no ties)" in script.requests[0]["messages"][0]["content"]


async def test_the_judge_may_tie_and_tied_rollouts_share_their_mean_rank(
    judge_server: tuple[Script, str], store: Any
) -> None:
    """Contents a, b, a, c: the judge sees a, b, c once each (R1..R3) and answers c first, a
    and b tied; a stands for two rollouts, so the tie spans ranks 2..4 of 4 (mean 3) and
    scores (4 - 3) / 3 = 1/3, c rank 1 scores 1."""
    script, url = judge_server
    script.replies = deque([Reply(content='{"ranking": ["R3", ["R1", "R2"]]}')])
    rollouts = await finished(store, ["a", "b", "a", "c"])
    criteria = [{"name": "best", "rank": "Which greeting is best?"}]
    async with RewardJudge(config(url, criteria)) as judge:
        judgements = await judge_rollouts(store, judge, [rollouts])
    assert [j.values["best"] for j in judgements if j.values] == pytest.approx(
        [1 / 3, 1 / 3, 1 / 3, 1.0]
    )
    [request] = script.requests
    system, user = (m["content"] for m in request["messages"])
    assert "share a place" in system and "=== R3 ===\n[reply 1]\nc" in user
    assert "=== R4 ===" not in user
    # with ties forbidden a tied answer is out of format: asked once more, then an error
    script.replies = deque([Reply(content='{"ranking": ["R3", ["R1", "R2"]]}')] * 2)
    strict = [{**criteria[0], "ties": "forbidden"}]
    async with RewardJudge(config(url, strict)) as judge:
        failed = await judge.judge_group(
            [JudgedRollout(f"x{t}", "t", (JudgedReply(t),)) for t in "abc"]
        )
    assert all(j.error and "not a list of labels" in j.error for j in failed)
    with pytest.raises(ValueError, match="ties has effect only with rank"):
        RewardConfig.model_validate({"criteria": [{"name": "g", "check": "m:f", "ties": "equal"}]})
