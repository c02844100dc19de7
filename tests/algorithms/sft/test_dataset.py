"""SFT examples come from the recorded token ids; only text-only (teacher) calls are tokenized,
once, with the student's chat template, and they are flagged."""

from __future__ import annotations

from typing import Any

import pytest

from fulmen.algorithms.sft.dataset import build_dataset, retokenize
from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
from tests.transitions.factories import agent_span, call, reward_span

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from fulmen.engines.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model("tiny")), local_files_only=True)


def attempt(rollout_id: str, reward: float | None, *calls: Any, spans: tuple[Any, ...] = ()):
    rewards = () if reward is None else (reward_span(99, reward, rollout_id=rollout_id),)
    return AttemptRecords(rollout_id, f"{rollout_id}-a1", "t1", list(calls), [*spans, *rewards])


def test_examples_hold_the_recorded_ids_not_the_retokenized_text(tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "hi"}]
    # Ids the gateway recorded; rendering the same text again gives other ids.
    recorded = call(1, [900, 901, 902], [903, 904], messages=messages, reply="ok")
    retokenized = retokenize(recorded, tokenizer, rollout_id="r1")
    assert retokenized is not None
    assert retokenized.input_ids != [900, 901, 902, 903, 904]

    examples, stats = build_dataset(
        [attempt("r1", 1.0, recorded)],
        options=TransitionOptions(),
        min_reward=1.0,
        max_seq_len=64,
        tokenizer=tokenizer,
    )
    (example,) = examples
    assert example.input_ids == [900, 901, 902, 903, 904]
    assert example.positions == [3, 4]  # only the completion is trained
    assert not example.is_retokenized
    assert stats.retokenized == 0
    assert stats.trained_tokens == 2


def test_text_only_teacher_calls_are_tokenized_with_the_chat_template_and_flagged(
    tokenizer: Any,
) -> None:
    messages = [{"role": "user", "content": "write a"}]
    teacher = call(1, [], [], token_level=False, messages=messages, reply="a a a")
    examples, stats = build_dataset(
        [attempt("r1", 1.0, teacher)],
        options=TransitionOptions(),
        min_reward=1.0,
        max_seq_len=64,
        tokenizer=tokenizer,
    )
    (example,) = examples
    assert example.is_retokenized
    assert stats.retokenized == 1
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    whole = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": "a a a"}], tokenize=False
    )
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    whole_ids = tokenizer.encode(whole, add_special_tokens=False)
    # the template writes "<|im_end|>\n": the newline after the end of turn is never
    # generated, so it is neither in the example nor trained
    assert tokenizer.decode(whole_ids[-2:]) == "<|im_end|>\n"
    assert example.input_ids == whole_ids[:-1]
    assert example.positions == list(range(len(prompt_ids), len(example.input_ids)))
    # the trained tokens are the reply and the template's end of turn, not the prompt
    assert tokenizer.decode(example.input_ids[len(prompt_ids) :]) == "a a a<|im_end|>"

    _, without = build_dataset(
        [attempt("r1", 1.0, teacher)],
        options=TransitionOptions(),
        min_reward=1.0,
        max_seq_len=64,
    )
    assert (without.examples, without.skipped_text_only) == (0, 1)


def test_rollouts_below_the_threshold_and_unselected_agents_are_left_out(tokenizer: Any) -> None:
    def two_agents(rollout_id: str) -> list[Any]:
        return [
            call(1, [1, 2], [3], response_id=f"{rollout_id}-p", rollout_id=rollout_id),
            call(2, [1, 2], [4, 5], response_id=f"{rollout_id}-a", rollout_id=rollout_id),
        ]

    def spans(rollout_id: str) -> tuple[Any, ...]:
        return (
            agent_span(10, "planner", f"{rollout_id}-p", rollout_id),
            agent_span(11, "actor", f"{rollout_id}-a", rollout_id),
        )

    attempts = [
        attempt("good", 1.0, *two_agents("good"), spans=spans("good")),
        attempt("bad", 0.2, *two_agents("bad"), spans=spans("bad")),
        attempt("silent", None, *two_agents("silent"), spans=spans("silent")),
    ]
    examples, stats = build_dataset(
        attempts,
        options=TransitionOptions(agents=("actor",)),
        min_reward=0.5,
        max_seq_len=64,
        tokenizer=tokenizer,
    )
    assert [(e.rollout_id, e.input_ids) for e in examples] == [("good", [1, 2, 4, 5])]
    assert stats.kept_rollouts == 1
    assert stats.as_metrics()["sft/kept_fraction"] == pytest.approx(1 / 3)

    kept, short = build_dataset(
        attempts[:1], options=TransitionOptions(), min_reward=0.5, max_seq_len=3
    )
    assert [e.input_ids for e in kept] == [[1, 2, 3]]  # the 4-token example is too long
    assert short.dropped_overlong == 1
