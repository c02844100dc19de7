"""A made-up world for the search example: people, organisations and cities, generated from a seed.

Names are built from syllables, so no fact in the corpus can be known from pretraining. The
world has two disjoint halves: the ``train`` half's people and organisations are the subjects
and bridges of the training questions, the ``test`` half's those of the held-out questions, so
held-out accuracy measures the skill (search, read, search again), not memorised facts. Cities
are shared by both halves. A third, small ``demo`` half supplies the worked examples the agent
shows the model. Every entity's facts are written as short passages (``passages``) that the
full-text index (``search_index``) serves.

Each question needs two hops, e.g. *"In which city was the founder of Velora Labs born?"*:
search the organisation, read its founder's name, search the founder, read the city.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HALVES",
    "QUESTION_KINDS",
    "City",
    "Org",
    "Person",
    "World",
    "make_questions",
    "make_world",
    "test_tasks",
    "train_tasks",
]

_SYLLABLES = (
    "ka", "lo", "mi", "ren", "dar", "vel", "sho", "tu", "bri", "nax", "pel", "qua",
    "zor", "fen", "lis", "gor", "tam", "vi", "sel", "dro", "ur", "mek", "ji", "hal",
    "bo", "tre", "nim", "sa", "kor", "wen", "ys", "pha",
)  # fmt: skip
_CITY_ENDINGS = ("ford", "vale", "port", "holm", "wick", "stead", "mouth", "bury")
_ORG_KINDS = ("Labs", "Works", "Group", "Foundry", "Systems", "Press", "Mills", "Studio")
_JOBS = ("engineer", "chemist", "designer", "writer", "analyst", "pilot", "teacher", "surveyor")
_PRODUCTS = ("lamps", "bicycles", "maps", "clocks", "boats", "radios", "paper", "tiles")

#: The world's halves: training subjects, held-out subjects, the agent's worked examples.
HALVES = ("train", "test", "demo")
#: The question kinds (each two hops), in the order ``make_questions`` cycles through them.
QUESTION_KINDS = ("founder_city", "employer_founder", "employer_city")


@dataclass(frozen=True)
class City:
    """A city: its name and the river it lies on."""

    name: str
    river: str


@dataclass(frozen=True)
class Org:
    """An organisation: founder, founding year, home city, what it makes."""

    name: str
    half: str
    founder: str
    founded: int
    city: str
    product: str


@dataclass(frozen=True)
class Person:
    """A person: birth city and year, employer and job."""

    name: str
    half: str
    born_in: str
    born: int
    employer: str
    job: str


@dataclass(frozen=True)
class World:
    """The whole generated world."""

    cities: tuple[City, ...]
    orgs: tuple[Org, ...]
    people: tuple[Person, ...]

    def passages(self) -> list[tuple[str, str]]:
        """Every passage as ``(title, text)``: two per person and organisation, one per city."""
        out: list[tuple[str, str]] = []
        for p in self.people:
            out.append((p.name, f"{p.name} was born in {p.born_in} in {p.born}."))
            article = "an" if p.job[0] in "aeiou" else "a"
            out.append((p.name, f"{p.name} works at {p.employer} as {article} {p.job}."))
        for o in self.orgs:
            out.append((o.name, f"{o.name} was founded by {o.founder} in {o.founded}."))
            out.append((o.name, f"{o.name} is based in {o.city} and makes {o.product}."))
        for c in self.cities:
            out.append((c.name, f"{c.name} is a city on the {c.river} river."))
        return out


def _word(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(low, high))).capitalize()


def _org_name(rng: random.Random) -> str:
    return f"{_word(rng, 2, 3)} {rng.choice(_ORG_KINDS)}"


def _person_name(rng: random.Random) -> str:
    return f"{_word(rng, 2, 2)} {_word(rng, 2, 3)}"


def _unique(rng: random.Random, make: Any, taken: set[str], n: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        name = make(rng)
        if name not in taken and name.lower() not in taken:
            taken.update((name, name.lower()))
            names.append(name)
    return names


_SIZES = {"train": (110, 650), "test": (110, 650), "demo": (12, 40)}  # (orgs, people) per half


@functools.cache
def make_world(seed: int = 0) -> World:
    """Generate the world for ``seed``: 60 cities, 232 organisations, 1,340 people (cached)."""
    rng = random.Random(f"search-world:{seed}")
    taken: set[str] = set()
    city_names = _unique(rng, lambda r: _word(r, 2, 2) + r.choice(_CITY_ENDINGS), taken, 60)
    rivers = _unique(rng, lambda r: _word(r, 2, 2), taken, 20)
    cities = tuple(City(name, rng.choice(rivers)) for name in city_names)
    orgs: list[Org] = []
    people: list[Person] = []
    for half in HALVES:
        n_orgs, n_people = _SIZES[half]
        org_names = _unique(
            rng, lambda r: f"{_word(r, 2, 3)} {r.choice(_ORG_KINDS)}", taken, n_orgs
        )
        person_names = _unique(rng, lambda r: f"{_word(r, 2, 2)} {_word(r, 2, 3)}", taken, n_people)
        # The first n_orgs people found the half's organisations; everyone works at one of them.
        half_orgs = [
            Org(
                name=name,
                half=half,
                founder=person_names[i],
                founded=rng.randint(1900, 2015),
                city=rng.choice(cities).name,
                product=rng.choice(_PRODUCTS),
            )
            for i, name in enumerate(org_names)
        ]
        orgs += half_orgs
        people += [
            Person(
                name=name,
                half=half,
                born_in=rng.choice(cities).name,
                born=rng.randint(1940, 2000),
                employer=rng.choice(half_orgs).name,
                job=rng.choice(_JOBS),
            )
            for name in person_names
        ]
    return World(cities, tuple(orgs), tuple(people))


def _question(world: World, kind: str, subject: Any) -> dict[str, Any]:
    orgs = {o.name: o for o in world.orgs}
    people = {p.name: p for p in world.people}
    if kind == "founder_city":
        founder = people[subject.founder]
        text = f"In which city was the founder of {subject.name} born?"
        return {"question": text, "answer": founder.born_in, "hops": [founder.name]}
    employer = orgs[subject.employer]
    if kind == "employer_founder":
        text = f"Who founded the company where {subject.name} works?"
        return {"question": text, "answer": employer.founder, "hops": [employer.name]}
    text = f"In which city is the company where {subject.name} works based?"
    return {"question": text, "answer": employer.city, "hops": [employer.name]}


def make_questions(half: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` two-hop questions about the ``half``'s entities, kinds in turn, subjects shuffled.

    Each task is ``{"id", "kind", "question", "answer", "hops"}`` (``hops``: the bridge entity
    the agent must find and search). A subject is asked about at most once per kind.
    """
    if half not in HALVES:
        raise ValueError(f"half must be one of {HALVES}, got {half!r}")
    world = make_world(seed)
    rng = random.Random(f"search-questions:{half}:{seed}")
    orgs = [o for o in world.orgs if o.half == half]
    people = [p for p in world.people if p.half == half]
    subjects = {
        "founder_city": rng.sample(orgs, len(orgs)),
        "employer_founder": rng.sample(people, len(people)),
        "employer_city": rng.sample(people[::-1], len(people)),
    }
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        kind = QUESTION_KINDS[i % len(QUESTION_KINDS)]
        pool = subjects[kind]
        if i // len(QUESTION_KINDS) >= len(pool):
            raise ValueError(f"the {half} half has too few subjects for {n} questions")
        subject = pool[i // len(QUESTION_KINDS)]
        tasks.append({"id": f"{half}-{i}", "kind": kind, **_question(world, kind, subject)})
    return tasks


def train_tasks() -> list[dict[str, Any]]:
    """300 training questions about the ``train`` half of the world."""
    return make_questions("train", 300)


def test_tasks() -> list[dict[str, Any]]:
    """64 held-out questions about the ``test`` half (people and organisations never trained on)."""
    return make_questions("test", 64)
