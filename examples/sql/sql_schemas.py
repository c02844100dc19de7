"""The SQL example's databases: eight domains, each a two-table SQLite schema with generated rows.

Every domain has the same shape, so one set of question templates fits all of them: a parent
table (shops, schools, airlines, ...) with a name and a place, and a child table (products,
students, flights, ...) that points at it, with a label, a kind and two numeric columns. A
database is one domain filled from a seed: ``shops_2`` is the ``shops`` domain built with seed
2. Databases are SQLite files made on demand under the temp directory (written to a side file
and renamed into place, so concurrent rollouts never read a half-built file) and never
downloaded.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOMAINS", "Domain", "Number", "database_path", "domain_of", "parse_db_id"]

# Bump when the generator changes, so an old cached file is never reused.
_VERSION = 1
_PARENTS = 5
_CHILDREN = 24


@dataclass(frozen=True)
class Number:
    """A numeric column of the child table: its name, the phrase a question uses, its range."""

    column: str
    phrase: str
    low: int
    high: int


@dataclass(frozen=True)
class Domain:
    """One schema: a parent table (name + place) and a child table that references it."""

    name: str
    parent: str
    parent_noun: str
    place: str
    places: tuple[str, ...]
    parent_names: tuple[str, ...]
    child: str
    singular: str
    label: str
    label_words: tuple[tuple[str, ...], tuple[str, ...]]
    kind: str
    kinds: tuple[str, ...]
    numbers: tuple[Number, Number]

    @property
    def fk(self) -> str:
        """The child's column that holds its parent's id (``shop_id``)."""
        return f"{self.parent_noun}_id"

    def ddl(self) -> list[str]:
        """The ``CREATE TABLE`` statements, parent first."""
        first, second = self.numbers
        return [
            f"CREATE TABLE {self.parent} (id INTEGER PRIMARY KEY, name TEXT, {self.place} TEXT)",
            f"CREATE TABLE {self.child} (id INTEGER PRIMARY KEY, {self.label} TEXT, "
            f"{self.kind} TEXT, {first.column} INTEGER, {second.column} INTEGER, "
            f"{self.fk} INTEGER REFERENCES {self.parent}(id))",
        ]


_CITIES = ("Oslo", "Lima", "Cairo", "Dublin", "Quito", "Riga", "Perth", "Kyoto", "Accra")
_FIRST = ("Ana", "Ben", "Cora", "Dev", "Eli", "Fay", "Gus", "Ida", "Jon", "Kim", "Lea", "Max")
_LAST = ("Berg", "Cruz", "Diaz", "Ford", "Hale", "Ito", "Kerr", "Lund", "Moss", "Nash", "Reed")

# One domain per entry, positional in field order: kept compact so the eight read as a table.
# fmt: off
DOMAINS: tuple[Domain, ...] = (
    Domain(
        "shops", "shops", "shop", "city", _CITIES,
        ("Corner Store", "Big Mart", "Daily Goods", "Fresh Shop", "Mega Market", "Value Store"),
        "products", "product", "name",
        (("Red", "Blue", "Green", "Small", "Large", "Soft", "Smart"),
         ("Lamp", "Chair", "Mug", "Pillow", "Kettle", "Clock", "Fan")),
        "category", ("kitchen", "garden", "office", "toys"),
        (Number("price", "price", 2, 300), Number("stock", "stock", 0, 500)),
    ),
    Domain(
        "schools", "schools", "school", "city", _CITIES,
        ("North High", "Lake School", "Hill Academy", "River School", "Park College"),
        "students", "student", "name", (_FIRST, _LAST),
        "grade", ("first", "second", "third", "fourth"),
        (Number("height", "height", 120, 199), Number("score", "score", 20, 100)),
    ),
    Domain(
        "flights", "airlines", "airline", "country", ("Peru", "Japan", "Ghana", "Chile", "Norway"),
        ("Sky Air", "Blue Wings", "Sun Jet", "Polar Air", "Coast Lines", "Star Fly"),
        "flights", "flight", "code",
        (("AX", "BQ", "CZ", "DL", "EK", "FW"), tuple(str(n) for n in range(101, 113))),
        "destination", ("Lima", "Oslo", "Tokyo", "Accra", "Paris"),
        (Number("duration", "duration", 40, 900), Number("seats", "number of seats", 50, 400)),
    ),
    Domain(
        "libraries", "libraries", "library", "city", _CITIES,
        ("Central Library", "Old Library", "West Library", "Town Library", "Hill Library"),
        "books", "book", "title",
        (("Silent", "Lost", "Golden", "Dark", "Hidden", "Last", "Wild"),
         ("River", "Garden", "Moon", "Road", "Island", "Letter", "Tower")),
        "genre", ("mystery", "poetry", "history", "science"),
        (Number("pages", "number of pages", 80, 900), Number("year", "year", 1900, 2024)),
    ),
    Domain(
        "hospitals", "hospitals", "hospital", "city", _CITIES,
        ("General Hospital", "City Clinic", "Mercy Hospital", "Hope Clinic", "Royal Hospital"),
        "doctors", "doctor", "name", (_FIRST, _LAST),
        "specialty", ("surgery", "cardiology", "pediatrics", "neurology"),
        (Number("salary", "salary", 3000, 15000), Number("experience", "experience", 1, 40)),
    ),
    Domain(
        "restaurants", "restaurants", "restaurant", "city", _CITIES,
        ("Blue Plate", "Green Fork", "Spice Hut", "Olive Tree", "Sea Grill", "Noodle Bar"),
        "dishes", "dish", "name",
        (("Spicy", "Sweet", "Baked", "Fried", "Fresh", "Smoked", "Grilled"),
         ("Rice", "Soup", "Salad", "Fish", "Noodles", "Tacos", "Curry")),
        "cuisine", ("thai", "italian", "mexican", "indian"),
        (Number("price", "price", 3, 60), Number("calories", "calories", 100, 1500)),
    ),
    Domain(
        "teams", "teams", "team", "city", _CITIES,
        ("Red Lions", "Blue Sharks", "Iron Bears", "Fast Foxes", "Gold Eagles", "Wild Cats"),
        "players", "player", "name", (_FIRST, _LAST),
        "position", ("goalkeeper", "defender", "midfielder", "forward"),
        (Number("goals", "number of goals", 0, 60), Number("age", "age", 17, 40)),
    ),
    Domain(
        "museums", "museums", "museum", "city", _CITIES,
        ("Art House", "Modern Gallery", "Old Museum", "City Museum", "Sea Museum"),
        "paintings", "painting", "title",
        (("Morning", "Evening", "Winter", "Summer", "Quiet", "Bright", "Red"),
         ("Field", "Harbor", "Portrait", "Bridge", "Forest", "Street", "Sky")),
        "style", ("baroque", "modern", "cubist", "realist"),
        (Number("year", "year", 1500, 2020), Number("value", "value", 1000, 90000)),
    ),
)
# fmt: on


def domain_of(name: str) -> Domain:
    """The domain called ``name``; ``KeyError`` naming the known ones otherwise."""
    for domain in DOMAINS:
        if domain.name == name:
            return domain
    raise KeyError(f"unknown domain {name!r}; known: {[d.name for d in DOMAINS]}")


def parse_db_id(db_id: str) -> tuple[Domain, int]:
    """``"shops_2"`` -> (the shops domain, seed 2)."""
    name, _, seed = db_id.rpartition("_")
    if not name or not seed.isdigit():
        raise ValueError(f"a database id is <domain>_<seed>, got {db_id!r}")
    return domain_of(name), int(seed)


def _rows(domain: Domain, seed: int) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    rng = random.Random(f"{domain.name}:{seed}")
    names = rng.sample(domain.parent_names, _PARENTS)
    parents: list[tuple[object, ...]] = [
        (i + 1, name, rng.choice(domain.places)) for i, name in enumerate(names)
    ]
    words_a, words_b = domain.label_words
    joiner = "" if domain.name == "flights" else " "
    labels = rng.sample([f"{a}{joiner}{b}" for a in words_a for b in words_b], _CHILDREN)
    # Distinct numbers per column: "the highest price" always names one row.
    columns = [rng.sample(range(n.low, n.high + 1), _CHILDREN) for n in domain.numbers]
    children: list[tuple[object, ...]] = [
        (i + 1, labels[i], rng.choice(domain.kinds), columns[0][i], columns[1][i],
         rng.randint(1, _PARENTS))
        for i in range(_CHILDREN)
    ]  # fmt: skip
    return parents, children


def _build(domain: Domain, seed: int, path: Path) -> None:
    parents, children = _rows(domain, seed)
    side = path.with_name(f"{path.name}.{os.getpid()}.{random.getrandbits(32):08x}.tmp")
    connection = sqlite3.connect(side)
    try:
        for statement in domain.ddl():
            connection.execute(statement)
        connection.executemany(f"INSERT INTO {domain.parent} VALUES (?, ?, ?)", parents)
        connection.executemany(f"INSERT INTO {domain.child} VALUES (?, ?, ?, ?, ?, ?)", children)
        connection.commit()
    finally:
        connection.close()
    os.replace(side, path)  # atomic: readers see no file or the whole file


def database_path(db_id: str, cache_dir: Path | None = None) -> Path:
    """The SQLite file of ``db_id``, built on first use (same seed, same bytes of data)."""
    domain, seed = parse_db_id(db_id)
    folder = cache_dir or Path(tempfile.gettempdir()) / f"fulmen-sql-example-v{_VERSION}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{db_id}.sqlite"
    if not path.exists():
        _build(domain, seed, path)
    return path
