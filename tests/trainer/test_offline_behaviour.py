"""Offline GRPO trains only calls sampled from the distribution its ratio corrects for.

A recorded call's logprobs are those of the distribution the engine sampled from. Production
traffic sampled with ``top_p`` < 1, another temperature or a JSON schema has logprobs the
trainer's ``log_softmax(logits / temperature)`` cannot match, so such calls are dropped before
transitions are built, judged on the request as the engine got it (a training rollout's agent
request with its resources' sampling fields applied, as the gateway did).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
from fulmen.algorithms.grpo.offline_loop import OfflineGRPOLoop
from fulmen.algorithms.source import StoreSource
from fulmen.store import open_store
from fulmen.trainer.offline_source import behaviour_calls
from fulmen.transitions.trajectory import AttemptRecords, load_attempt
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    LLMResource,
    Mode,
    ResourcesCreate,
    RewardCreate,
    RolloutCreate,
)


def token_call(rollout_id: str, attempt_id: str, n: int, **request: Any) -> LLMCallCreate:
    return LLMCallCreate(
        call_id=f"{rollout_id}-c{n}",
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        request={"model": "tiny", "messages": [{"role": "user", "content": str(n)}], **request},
        prompt_token_ids=[2, 20 + n, 3],
        choices=[LLMChoice(token_ids=[11, 12], logprobs=[-1.0, -1.0], finish_reason="stop")],
        is_token_level=True,
        started_at=float(n),
    )


async def rollout_with(
    store: Any, rollout_id: str, mode: Mode, version: int | None, requests: list[dict[str, Any]]
) -> None:
    """Store a finished, rewarded rollout whose calls were made with ``requests``."""
    create = RolloutCreate(
        input={}, mode=mode, rollout_id=rollout_id, task_id="t", resources_version=version
    )
    await store.enqueue([create])
    (claim,) = await store.claim("w")
    attempt_id = claim.attempt.attempt_id
    calls = [token_call(rollout_id, attempt_id, n, **r) for n, r in enumerate(requests)]
    await store.add_llm_calls(calls)
    await store.update_attempt(attempt_id, status=AttemptStatus.SUCCEEDED)
    await store.add_reward(RewardCreate.scalar(1.0, rollout_id=rollout_id))


async def fill(url: str) -> list[AttemptRecords]:
    sampling = {"train": {"temperature": 1.0}, "val": {"temperature": 0.0}}
    shaped = LLMResource(
        base_url="http://e/v1", model="tiny", sampling=sampling, behaviour_modes=(Mode.TRAIN,)
    )
    older = LLMResource(base_url="http://e/v1", model="tiny", sampling=sampling)
    async with open_store(url, watchdog_interval=None) as store:
        add = store.add_resources
        shaped_v = (await add(ResourcesCreate(resources={"llm": shaped}))).version
        older_v = (await add(ResourcesCreate(resources={"llm": older}))).version
        json_schema = {"type": "json_schema", "name": "a", "schema": {}}
        await rollout_with(
            store,
            "session-a",
            Mode.PRODUCTION,
            None,
            [
                {},  # kept: nothing set is temperature 1 and the whole distribution
                {"top_p": 0.9},
                {"temperature": 0.7},
                {"temperature": 1.0, "top_k": -1},  # kept
                {"input": "hi", "text": {"format": json_schema}},
            ],
        )
        # The gateway forced the agent's temperature and top_k away: what the engine got is
        # the resources' sampling, so both calls are kept.
        await rollout_with(store, "train-b", Mode.TRAIN, shaped_v, [{"temperature": 0.2}] * 2)
        await rollout_with(store, "train-b2", Mode.TRAIN, shaped_v, [{"top_k": 20}])
        # Resources from before behaviour_modes: the engine honoured the agent's top_k.
        await rollout_with(store, "train-c", Mode.TRAIN, older_v, [{"top_k": 20}, {"top_p": 1}])
        await rollout_with(store, "val-d", Mode.VAL, shaped_v, [{"temperature": 1.0}])
        ids = ["session-a", "train-b", "train-b2", "train-c", "val-d"]
        return [await load_attempt(store, rollout_id) for rollout_id in ids]


async def test_calls_not_sampled_from_the_behaviour_distribution_are_dropped(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    attempts = await fill(url)
    kept, reasons = await behaviour_calls(url, attempts, temperature=1.0)
    assert {a.rollout_id: [c.call_id for c in a.calls] for a in kept} == {
        "session-a": ["session-a-c0", "session-a-c3"],
        "train-b": ["train-b-c0", "train-b-c1"],
        "train-b2": ["train-b2-c0"],
        "train-c": ["train-c-c1"],
        "val-d": [],  # val_sampling is greedy: no distribution to correct for
    }
    assert reasons == Counter(
        {
            "top_p=0.9 truncates or reshapes the sampled distribution": 1,
            "temperature=0.7 differs from the trainer's 1.0": 1,
            "text.format={'type': 'json_schema', 'name': 'a', 'schema': {}} constrains decoding": 1,
            "top_k=20 truncates or reshapes the sampled distribution": 1,
            "temperature=0.0 differs from the trainer's 1.0": 1,
        }
    )
    # A trainer at another temperature keeps none of the production calls sampled at 1.
    _, at_half = await behaviour_calls(url, attempts[:1], temperature=0.5)
    assert sum(at_half.values()) == 5


async def test_the_offline_loop_trains_only_the_behaviour_calls(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    attempts = await fill(url)

    async def read_source(source: StoreSource) -> list[AttemptRecords]:
        assert source.store == url
        return attempts

    config = GRPOAlgorithmConfig(steps=1, source=StoreSource(store=url))

    async def drop_off_behaviour(
        source: StoreSource, attempts: list[AttemptRecords], *, temperature: float
    ) -> Any:
        return await behaviour_calls(source.store, attempts, temperature=temperature)

    context = offline_context(read_source, drop_off_behaviour)
    loop = OfflineGRPOLoop(config, context)  # type: ignore[arg-type]
    batch = await loop._read()
    assert loop._off_behaviour == 5
    assert len(batch.transitions) == 6
    # every call of the rewarded rollouts, the 5 off-behaviour ones (not trained) included
    assert batch.calls == 11 and batch.token_level_calls == 11


async def test_a_dropped_calls_reward_stays_its_own(tmp_path: Path) -> None:
    """Issue 46, item 2: per-call rewards 0.25, 1.0, 0.5 on three recorded calls, the middle
    one sampled with ``top_p`` 0.9. Dropping it before the rewards were read gave its 1.0 to
    the call before it (transitions rewarded 1.25 and 0.5); it must stay its own: 0.25, 0.5."""
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    async with open_store(url, watchdog_interval=None) as store:
        create = RolloutCreate(input={}, mode=Mode.PRODUCTION, rollout_id="s", task_id="t")
        await store.enqueue([create])
        (claim,) = await store.claim("w")
        attempt_id = claim.attempt.attempt_id
        for n, (reward, request) in enumerate(((0.25, {}), (1.0, {"top_p": 0.9}), (0.5, {}))):
            made = token_call("s", attempt_id, n, **request)
            await store.add_llm_calls([made.model_copy(update={"response_id": f"resp-{n}"})])
            await store.add_spans([reward_span("s", attempt_id, n, reward, f"resp-{n}")])
        await store.update_attempt(attempt_id, status=AttemptStatus.SUCCEEDED)
        await store.add_reward(RewardCreate.scalar(1.0, rollout_id="s"))
        attempts = [await load_attempt(store, "s")]

    async def read_source(source: StoreSource) -> list[AttemptRecords]:
        return attempts

    async def drop_off_behaviour(
        source: StoreSource, attempts: list[AttemptRecords], *, temperature: float
    ) -> Any:
        return await behaviour_calls(source.store, attempts, temperature=temperature)

    config = GRPOAlgorithmConfig(
        steps=1,
        source=StoreSource(store=url),
        transitions={"credit": "per_call"},
        grpo={"advantage": "transition"},
    )
    context = offline_context(read_source, drop_off_behaviour)
    loop = OfflineGRPOLoop(config, context)  # type: ignore[arg-type]
    batch = await loop._read()
    assert loop._off_behaviour == 1
    assert [(t.call_ids, t.reward) for t in batch.transitions] == [
        (["s-c0"], 0.25),
        (["s-c2"], 0.5),
    ]


def offline_context(read_source: Any, behaviour_calls: Any) -> Any:
    """Just what the offline loop's read uses: ``rollouts`` reading and filtering, the seed."""
    rollouts = SimpleNamespace(read_source=read_source, behaviour_calls=behaviour_calls)
    return SimpleNamespace(rollouts=rollouts, run=SimpleNamespace(seed=0))


def reward_span(rollout_id: str, attempt_id: str, n: int, value: float, response_id: str) -> Any:
    """The span ``emit_reward(value)`` writes for the call that answered ``response_id``."""
    from fulmen.tracing import semconv
    from fulmen.types import SpanCreate

    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id="a" * 32,
        span_id=f"{n + 1:016x}",
        name=semconv.SPAN_REWARD,
        attributes={
            semconv.REWARD_NAMES: [semconv.DEFAULT_REWARD_NAME],
            semconv.REWARD_VALUES: [value],
            semconv.REWARD_PRIMARY: semconv.DEFAULT_REWARD_NAME,
            semconv.REWARD_SOURCE: "emit",
            semconv.RESPONSE_ID: response_id,
        },
        start_time=float(n),
        end_time=float(n),
    )
