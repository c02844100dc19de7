"""The SQL agent's shop database and its questions with gold queries, generated from a seed.

0.x's tutorial read the Spider databases; this example builds one shop database in memory, so
it runs offline: 48 products in 8 categories, 36 customers in 6 cities and 160 orders
(:data:`SCHEMA`). Prices and stock counts are distinct, so "the most expensive" names one
product. Every rollout gets a fresh copy (:func:`shop_db`), read-only: a query that would change
it fails.

Twelve question templates (counts, lists, aggregates, the cheapest or priciest product of a
category, a numeric filter, and joins through ``orders``) are filled with the database's own
values, so no gold result is empty. A task is ``{"id", "template", "question", "gold"}``.

**The split is by value.** Each category, city, customer, product and filter threshold belongs
to the training half or the held-out half (:func:`_heldout`: every third name, the numbers
ending in 5), and a question belongs to the
half of the value it asks about: a held-out question asks about a category, customer, product
or number that no training question mentions, in the same templates. :func:`heldout_tasks` are
all the held-out questions (:data:`HELDOUT_SIZE`), shuffled with a fixed seed so any prefix
mixes the templates; :func:`train_tasks` are all the training ones.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["HELDOUT_SIZE", "SCHEMA", "TEMPLATES", "heldout_tasks", "shop_db", "train_tasks"]

# products first: most questions are about them, and a small model leans on the first table
SCHEMA = (
    "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price INTEGER, "
    "stock INTEGER)\n"
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT)\n"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, "
    "quantity INTEGER)"
)
CATEGORIES: dict[str, tuple[str, ...]] = {
    # different sizes, so "how many products are in ..." has different answers
    "kitchen": ("kettle", "toaster", "pan", "blender", "teapot", "whisk", "grater"),
    "living": ("lamp", "sofa", "rug", "armchair", "cushion"),
    "garden": ("shovel", "hose", "rake", "planter", "sprinkler", "bench"),
    "office": (
        "stapler",
        "monitor",
        "desk",
        "printer",
        "notebook",
        "shredder",
        "bookcase",
        "globe",
    ),
    "bathroom": ("towel", "mirror", "soap dish", "bath mat"),
    "toys": ("puzzle", "kite", "yo-yo", "robot", "board game", "teddy bear", "marbles"),
    "sports": ("football", "racket", "helmet", "yoga mat", "dumbbell"),
    "bedroom": ("pillow", "blanket", "wardrobe", "alarm clock", "duvet", "nightstand"),
}
CITIES = ("Leeds", "Porto", "Lyon", "Graz", "Turin", "Ghent")
FIRST = ("Ann", "Bo", "Cy", "Di", "Eli", "Fay")
LAST = ("Lee", "Kim", "Ortiz", "Novak", "Brown", "Sato")
ORDERS = 160
SEED = 7
#: The numbers the filter questions use: training ones end in 0, held-out ones in 5.
PRICE_LIMITS = tuple(range(40, 340, 15))
STOCK_LIMITS = tuple(range(10, 70, 5))


@functools.cache
def _rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, the same on every call and in every process (seeded)."""
    rng = random.Random(SEED)
    names = [name for items in CATEGORIES.values() for name in items]
    prices = rng.sample(range(5, 400), len(names))  # distinct: one priciest, one cheapest
    stocks = rng.sample(range(0, 80), len(names))
    categories = [c for c, items in CATEGORIES.items() for _ in items]
    products = [(i + 1, name, categories[i], prices[i], stocks[i]) for i, name in enumerate(names)]
    people = [f"{first} {last}" for last in LAST for first in FIRST]
    # every city has a customer, and the cities have different numbers of them
    cities = [*CITIES, *(rng.choice(CITIES) for _ in range(len(people) - len(CITIES)))]
    rng.shuffle(cities)
    customers = [(i + 1, name, cities[i]) for i, name in enumerate(people)]
    orders = [
        (i + 1, rng.randint(1, len(customers)), rng.randint(1, len(products)), rng.randint(1, 5))
        for i in range(ORDERS)
    ]
    return {"customers": customers, "products": products, "orders": orders}


def shop_db() -> sqlite3.Connection:
    """A fresh, read-only in-memory copy of the shop database (usable from the graph's threads)."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(";\n".join(SCHEMA.splitlines()) + ";")
    for table, rows in _rows().items():
        marks = ", ".join("?" * len(rows[0]))
        db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    db.commit()
    # Read-only from here: a sampled DROP or DELETE must not change what the gold query returns.
    db.execute("PRAGMA query_only = ON")
    return db


# A template maps one value (a category, a city, a name, a number) to (question, gold SQL).
Template = Callable[[Any], tuple[str, str]]
_JOIN_CUSTOMERS = "orders JOIN customers ON orders.customer_id = customers.id"
_JOIN_PRODUCTS = "orders JOIN products ON orders.product_id = products.id"

TEMPLATES: dict[str, tuple[str, Template]] = {
    # name: (which values it takes, template)
    "count_category": ("category", lambda c: (
        f"How many products are in the {c} category?",
        f"SELECT COUNT(*) FROM products WHERE category = '{c}'")),
    "list_category": ("category", lambda c: (
        f"List the names of the products in the {c} category.",
        f"SELECT name FROM products WHERE category = '{c}'")),
    "priciest_in_category": ("category", lambda c: (
        f"What is the most expensive product in the {c} category?",
        f"SELECT name FROM products WHERE category = '{c}' ORDER BY price DESC LIMIT 1")),
    "cheapest_in_category": ("category", lambda c: (
        f"What is the cheapest product in the {c} category?",
        f"SELECT name FROM products WHERE category = '{c}' ORDER BY price ASC LIMIT 1")),
    "average_price": ("category", lambda c: (
        f"What is the average price of the products in the {c} category?",
        f"SELECT AVG(price) FROM products WHERE category = '{c}'")),
    "count_pricier": ("price", lambda v: (
        f"How many products cost more than {v} dollars?",
        f"SELECT COUNT(*) FROM products WHERE price > {v}")),
    "low_stock": ("stock", lambda v: (
        f"List the names of the products with fewer than {v} items in stock.",
        f"SELECT name FROM products WHERE stock < {v}")),
    "customers_in_city": ("city", lambda c: (
        f"List the names of the customers who live in {c}.",
        f"SELECT name FROM customers WHERE city = '{c}'")),
    "count_city": ("city", lambda c: (
        f"How many customers live in {c}?",
        f"SELECT COUNT(*) FROM customers WHERE city = '{c}'")),
    "price_of": ("product", lambda p: (
        f"What is the price of the {p}?",
        f"SELECT price FROM products WHERE name = '{p}'")),
    "orders_of_customer": ("customer", lambda n: (
        f"How many orders has {n} placed?",
        f"SELECT COUNT(*) FROM {_JOIN_CUSTOMERS} WHERE customers.name = '{n}'")),
    "quantity_of_product": ("ordered_product", lambda p: (
        f"How many items of the {p} have been ordered in total?",
        f"SELECT SUM(quantity) FROM {_JOIN_PRODUCTS} WHERE products.name = '{p}'")),
}  # fmt: skip


def _values(kind: str) -> list[Any]:
    """The values a template of ``kind`` can ask about, each with a non-empty answer."""
    rows = _rows()
    products, orders = rows["products"], rows["orders"]
    prices = sorted(p[3] for p in products)
    stocks = sorted(p[4] for p in products)
    ordered = {o[2] for o in orders}
    ordering = {o[1] for o in orders}
    return {
        "category": list(CATEGORIES),
        "city": list(CITIES),
        "product": [p[1] for p in products],
        "ordered_product": [p[1] for p in products if p[0] in ordered],
        "customer": [c[1] for c in rows["customers"] if c[0] in ordering],
        # Limits with a product on either side, so neither the count nor the list is empty.
        "price": [v for v in PRICE_LIMITS if prices[0] < v < prices[-1]],
        "stock": [v for v in STOCK_LIMITS if stocks[0] < v < stocks[-1]],
    }[kind]


def _heldout(kind: str, value: Any) -> bool:
    """Whether ``value`` is in the held-out half: every third name of its list, or a number
    ending in 5.
    """
    if kind in ("price", "stock"):
        return value % 10 == 5
    rows = _rows()
    names = {
        "category": list(CATEGORIES),
        "city": list(CITIES),
        "customer": [c[1] for c in rows["customers"]],
        # one list for both product kinds: a held-out product is held out in every template
        "product": [p[1] for p in rows["products"]],
        "ordered_product": [p[1] for p in rows["products"]],
    }[kind]
    return names.index(value) % 3 == 2


def _tasks(heldout: bool) -> Iterator[dict[str, Any]]:
    for template, (kind, fill) in TEMPLATES.items():
        for value in _values(kind):
            if _heldout(kind, value) != heldout:
                continue
            question, gold = fill(value)
            yield {
                "id": f"{template}:{value}",
                "template": template,
                "question": question,
                "gold": gold,
            }


def train_tasks() -> list[dict[str, Any]]:
    """Every training question (``data.train``): none names a held-out value."""
    return list(_tasks(heldout=False))


def heldout_tasks() -> list[dict[str, Any]]:
    """Every held-out question (``data.val``), in a fixed shuffled order."""
    tasks = list(_tasks(heldout=True))
    random.Random(f"{SEED}:heldout").shuffle(tasks)
    return tasks


#: How many held-out questions there are (:func:`heldout_tasks`).
HELDOUT_SIZE = len(heldout_tasks())
