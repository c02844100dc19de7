"""The search example's data: the generated world, its questions, the FTS5 index and the reward.

These need no agent framework (the main environment has none): the world and the questions are
the same for a seed, the held-out questions are about people and organisations the training
questions never mention, every question's answer is reachable by searching its subject and then
its bridge, and the reward is SQuAD-style token F1.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.examples.loading import example_modules

_MODULES = ("search_world", "search_index", "search_reward")


@pytest.fixture(scope="module")
def example() -> Iterator[dict[str, ModuleType]]:
    """The example's framework-free modules, imported from its directory and dropped afterwards."""
    with example_modules("search", *_MODULES) as (world, index, reward):
        yield {"world": world, "index": index, "reward": reward}


def _subject(question: str) -> str:
    for start, end in ((" of ", " born?"), (" where ", " works")):
        if start in question and end in question:
            return question.split(start, 1)[1].rsplit(end, 1)[0]
    raise ValueError(question)


def test_world_and_questions_are_deterministic(example: dict[str, ModuleType]) -> None:
    world = example["world"]
    first = world.make_world(0).passages()
    world.make_world.cache_clear()
    assert world.make_world(0).passages() == first
    assert world.make_world(1).passages() != first
    assert 3000 <= len(first) <= 5000  # "a few thousand passages"
    assert world.train_tasks() == world.train_tasks()
    assert world.make_questions("test", 64, seed=1) != world.test_tasks()
    kinds = {t["kind"] for t in world.test_tasks()}
    assert kinds == set(world.QUESTION_KINDS)


def test_names_are_unique(example: dict[str, ModuleType]) -> None:
    w = example["world"].make_world(0)
    names = [c.name for c in w.cities] + [o.name for o in w.orgs] + [p.name for p in w.people]
    assert len(names) == len(set(names)) == len({n.lower() for n in names})


def test_held_out_questions_share_no_person_or_organisation_with_training(
    example: dict[str, ModuleType],
) -> None:
    world = example["world"]
    w = world.make_world(0)
    half = {o.name: o.half for o in w.orgs} | {p.name: p.half for p in w.people}

    def entities(tasks: list[dict[str, object]]) -> set[str]:
        out: set[str] = set()
        for t in tasks:
            out |= {_subject(str(t["question"])), *t["hops"]}  # type: ignore[misc]
            if t["kind"] == "employer_founder":
                out.add(str(t["answer"]))
        return out

    train, test = entities(world.train_tasks()), entities(world.test_tasks())
    assert not train & test
    assert {half[n] for n in train} == {"train"} and {half[n] for n in test} == {"test"}
    assert len({t["question"] for t in world.train_tasks()}) == len(world.train_tasks())
    with pytest.raises(ValueError, match="half must be one of"):
        world.make_questions("dev", 3)


def test_every_answer_is_two_searches_away(example: dict[str, ModuleType]) -> None:
    world, index = example["world"], example["index"].open_index(0)
    for task in world.test_tasks():
        subject, bridge = _subject(task["question"]), task["hops"][0]
        first = index.search(subject, k=2)
        assert any(bridge in passage for passage in first), (task, first)
        assert not any(task["answer"] in p for p in first) or task["kind"] == "employer_founder"
        assert any(task["answer"] in passage for passage in index.search(bridge, k=2)), task


def test_search_ranks_with_bm25_over_or_ed_words(example: dict[str, ModuleType]) -> None:
    index_module = example["index"]
    index = index_module.open_index(0)
    org = example["world"].make_world(0).orgs[0]
    # A question's wording finds the organisation although most of its words are in no passage.
    (best, *_) = index.search(f"Who is the founder of {org.name}?", k=3)
    assert best.startswith(org.name)
    assert index.search("", k=3) == [] and index.search("?!", k=3) == []
    assert index.search("zzzqqq", k=3) == []
    assert index_module.fts_query('a "b" OR c') == '"a" OR "b" OR "OR" OR "c"'
    assert len(index.search("was born in", k=5)) == 5


@pytest.mark.parametrize(
    ("prediction", "gold", "f1"),
    [
        ("Answer: Zordroford.", "Zordroford", 1.0),
        ("Answer: the Zordroford", "Zordroford", 1.0),
        ("Answer: Shomek", "Shomek Ysji", 2 / 3),
        ("Answer: Ysji Shomek", "Shomek Ysji", 1.0),
        ("Answer: Shomek Ysji Naxka", "Shomek Ysji", 0.8),
        ("Answer: Naxka Studio", "Zordroford", 0.0),
        ("", "Zordroford", 0.0),
        ("Answer:", "Zordroford", 0.0),
        ("Zordroford\nmore text", "Zordroford", 1.0),
        ("Search 2 answer: x. ANSWER: Kaysford", "Kaysford", 1.0),
    ],
)
def test_reward_is_squad_token_f1(
    example: dict[str, ModuleType], prediction: str, gold: str, f1: float
) -> None:
    reward = example["reward"]
    assert reward.answer_f1(reward.final_answer(prediction), gold) == pytest.approx(f1)


def test_normalisation(example: dict[str, ModuleType]) -> None:
    reward = example["reward"]
    assert reward.normalize_answer("  An   Apple, the Pie!  ") == "apple pie"
    assert reward.answer_f1("", "") == 1.0
    assert reward.answer_f1("the", "a") == 1.0  # both normalise to nothing
