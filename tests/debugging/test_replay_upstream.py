"""Which recorded reply answers which request, and what the replay upstream sends back."""

from __future__ import annotations

from typing import Any

from fulmen.debugging.replay_upstream import RecordedReplies, engine_reply
from fulmen.types import LLMCall, LLMChoice


def call(n: int) -> LLMCall:
    return LLMCall(
        call_id=f"c{n}",
        request={"messages": [{"role": "user", "content": f"q{n}"}]},
        response={
            "id": f"r{n}",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"a{n}"}}],
        },
        prompt_token_ids=[1, 2],
        choices=[LLMChoice(text=f"a{n}", token_ids=[7, n], logprobs=[-0.5, -0.25])],
        started_at=0.0,
        sequence=n,
    )


def body(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"q{n}"}]}


def replies(policy: str = "stop") -> RecordedReplies:
    calls = [call(1), call(2), call(3)]
    expected = [("chat/completions", body(n)) for n in (1, 2, 3)]
    return RecordedReplies(calls, expected, on_divergence=policy)  # type: ignore[arg-type]


def test_concurrent_calls_arriving_out_of_order_still_match() -> None:
    r = replies()
    served = [r.answer("chat/completions", body(n)).call for n in (2, 1, 3)]
    assert [c.call_id for c in served if c is not None] == ["c2", "c1", "c3"]
    assert r.divergences == [] and r.unserved == 0


def test_a_diverging_request_is_compared_with_the_next_recorded_one() -> None:
    r = replies()
    assert r.answer("chat/completions", body(1)).call is not None
    refused = r.answer("chat/completions", {"messages": [], "temperature": 0.5})
    assert refused.call is None and refused.error is not None
    assert refused.error["code"] == "replay_diverged"
    [d] = r.divergences
    assert (d.call_number, d.recorded_number, d.fields) == (2, 2, ("messages", "temperature"))
    lines = d.diff.splitlines()
    assert any(line.startswith("-") and '"q2"' in line for line in lines)  # recorded side
    assert '+  "temperature": 0.5' in lines  # replayed side
    # "serve" answers with that next recorded reply and goes on.
    s = replies("serve")
    answered = s.answer("chat/completions", {"messages": []})
    assert answered.call is not None and answered.call.call_id == "c1"
    assert s.divergences[0].served


def test_requests_beyond_the_recording_are_refused() -> None:
    r = replies()
    for n in (1, 2, 3):
        r.answer("chat/completions", body(n))
    extra = r.answer("chat/completions", body(1))
    assert extra.error is not None and extra.error["code"] == "replay_exhausted"
    assert r.divergences[-1].recorded_number is None


def test_the_engine_reply_carries_the_recorded_token_ids_and_logprobs() -> None:
    reply = engine_reply(call(4))
    assert reply["prompt_token_ids"] == [1, 2]
    [choice] = reply["choices"]
    assert choice["token_ids"] == [7, 4]
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == [-0.5, -0.25]
    assert choice["message"]["content"] == "a4"
