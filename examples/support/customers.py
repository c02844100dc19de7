"""Simulated customers: support messages with the department that can actually solve them.

Messages are built from phrasings per department and filled-in details (products, days,
amounts), so every draw is a new message. The traffic and the held-out evaluation draw with
different seeds, and held-out messages that also occur in the traffic are dropped.
"""

from __future__ import annotations

import random

__all__ = ["Customer", "draw_customers", "held_out_customers"]

Customer = tuple[str, str]  # (message, department)

_PHRASINGS: dict[str, tuple[str, ...]] = {
    "billing": (
        "There are two identical payments for my {product} on my card statement.",
        "I returned the {product} {days} days ago and still have not got my money back.",
        "The invoice for my {product} says {amount} euros but the price was lower.",
        "Why did you take {amount} euros from my account this morning?",
        "Can I get a copy of the receipt for the {product} I bought?",
        "My discount code was not applied, I paid {amount} euros too much.",
        "I cancelled the {product} order but the charge is still there.",
        "You billed me for express delivery that I never chose.",
    ),
    "shipping": (
        "The courier says my {product} was delivered but there is nothing at my door.",
        "It has been {days} days and my {product} is still not here.",
        "The box with my {product} arrived crushed.",
        "Can you send the {product} to my office address instead?",
        "The tracking number for my {product} does not work.",
        "Only half of my order arrived, the {product} is missing.",
        "When will the {product} be dispatched? It says processing for {days} days.",
        "The delivery driver left my {product} with a neighbour I do not know.",
    ),
    "technical": (
        "The website shows an error when I press pay for the {product}.",
        "Your app freezes on the loading screen since the last update.",
        "The search box returns nothing, not even for {product}.",
        "Pictures of the {product} do not load on my phone.",
        "The checkout button does nothing when I click it.",
        "The page keeps reloading when I try to add the {product} to the basket.",
        "I get error code {amount} whenever I open the app.",
        "The app crashes when I scan the barcode of the {product}.",
    ),
    "account": (
        "I cannot log in, it says my username does not exist.",
        "Please change the e-mail address on my profile.",
        "Someone else might be using my account, I see orders I did not make.",
        "How do I delete my account and my data?",
        "My account is locked after {days} wrong attempts.",
        "I want to change the name on my profile.",
        "The two-step code never reaches my phone so I cannot sign in.",
        "I made two accounts by mistake, can you merge them?",
    ),
}
_PRODUCTS = (
    "headphones", "coffee machine", "running shoes", "desk lamp", "phone case", "backpack",
    "kettle", "winter coat", "board game", "blender", "keyboard", "yoga mat",
)  # fmt: skip


def _message(rng: random.Random, department: str) -> str:
    template = rng.choice(_PHRASINGS[department])
    return template.format(
        product=rng.choice(_PRODUCTS), days=rng.randint(2, 30), amount=rng.randint(5, 400)
    )


def draw_customers(n: int, *, seed: int) -> list[Customer]:
    """Draw ``n`` customers, departments in equal shares (shuffled)."""
    rng = random.Random(seed)
    departments = [d for _ in range(n // len(_PHRASINGS) + 1) for d in _PHRASINGS][:n]
    rng.shuffle(departments)
    return [(_message(rng, d), d) for d in departments]


def held_out_customers(n: int, *, seed: int, traffic: list[Customer]) -> list[Customer]:
    """Draw ``n`` evaluation customers whose messages do not occur in ``traffic``.

    Departments keep equal shares (a model that always answers one team scores 25%): a
    message seen in the traffic is replaced by another one of the same department.
    """
    rng = random.Random(seed)
    seen = {text for text, _ in traffic}
    wanted = [d for _ in range(n // len(_PHRASINGS) + 1) for d in _PHRASINGS][:n]
    out: list[Customer] = []
    for department in wanted:
        for _ in range(1000):
            text = _message(rng, department)
            if text not in seen:
                break
        else:
            raise ValueError(f"no new {department} message left to draw (n={n} is too many)")
        seen.add(text)
        out.append((text, department))
    rng.shuffle(out)
    return out
