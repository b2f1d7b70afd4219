"""Generated multi-step word problems in GSM8K's shape, for offline runs and tests.

`generate(n, seed)` returns rows like GSM8K's: a question, a worked answer whose steps carry GSM8K's
`<<expression=value>>` annotations and whose last line is `#### N`, and the gold number N. Every answer is
a whole number. The same seed always gives the same rows, and a longer list starts with the shorter one
(generate(10, s) == generate(100, s)[:10]).

Levels: 0 = one step, adding or taking away two one-digit numbers (the default: what the offline tiny
model can learn on a CPU in minutes); 1 = two steps with numbers up to about 20; 2 = three steps, numbers up
to about 100; 3 = four or five steps, numbers up to about 1,000, with division, percentages and change.
`level="mixed"` draws each problem's level from 1-3 (GSM8K-like, for larger models).
"""

from __future__ import annotations

import math
import random

LEVELS = (0, 1, 2, 3)
MIXED_LEVELS = (1, 2, 3)
DEFAULT_LEVEL = 0

_NAMES = (
    "Ava",
    "Ben",
    "Carla",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
    "Uma",
    "Victor",
    "Wen",
    "Yara",
)
_ITEMS = (
    "notebook",
    "pencil",
    "apple",
    "sticker",
    "marble",
    "cookie",
    "book",
    "candle",
    "ribbon",
    "card",
    "shell",
    "button",
    "orange",
    "muffin",
    "toy car",
    "balloon",
)
_GOODS = ("bicycle", "jacket", "lamp", "backpack", "board game", "pair of shoes", "tent", "guitar")
_VEHICLES = ("car", "bus", "train", "truck", "van")

# Number ranges per level: (small, medium) upper bounds.
_RANGES = {1: (5, 20), 2: (12, 100), 3: (25, 1000)}


class _Work:
    """The worked solution, written one step per line in GSM8K's style."""

    _SYMBOL = {"+": "+", "-": "-", "*": "x", "/": "/"}

    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, before: str, a: int, op: str, b: int, after: str = "", money: str = "") -> int:
        """One line "before a op b = <<a op b=value>>value after."; money names the operands in dollars
        ("a", "b" or "ab"), and the result is in dollars when any operand is."""
        if op == "/":
            value, remainder = divmod(a, b)
            assert remainder == 0, "problems are built so that every division is exact"
        else:
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
        cash_a, cash_b = ("$" if "a" in money else ""), ("$" if "b" in money else "")
        cash = "$" if money else ""
        self.lines.append(
            f"{before} {cash_a}{a} {self._SYMBOL[op]} {cash_b}{b} = {cash}<<{a}{op}{b}={value}>>{value}{after}."
        )
        return value

    def answer_text(self, final: int) -> str:
        return "\n".join(self.lines + [f"#### {final}"])


def _plural(item: str, count: int = 2) -> str:
    if count == 1:
        return item
    if item.startswith("pair of "):
        return "pairs of " + item[len("pair of ") :]
    return item + "s"


def _shopping(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, _ = _RANGES[level]
    name = rng.choice(_NAMES)
    item1, item2 = rng.sample(_ITEMS, 2)
    q1, q2 = rng.randint(2, small), rng.randint(2, small)
    p1, p2 = rng.randint(1, small), rng.randint(1, small)
    work = _Work()
    cost1 = work.step(f"The {_plural(item1)} cost", q1, "*", p1, money="b")
    cost2 = work.step(f"The {_plural(item2)} cost", q2, "*", p2, money="b")
    total = work.step("Together they cost", cost1, "+", cost2, money="ab")
    question = f"{name} buys {q1} {_plural(item1, q1)} for ${p1} each and {q2} {_plural(item2, q2)} for ${p2} each."
    if level == 1:
        return question + f" How much does {name} spend in all?", work, total
    coupon = rng.randint(1, max(1, total // 4))
    total = work.step("After the coupon the bill is", total, "-", coupon, money="ab")
    question += f" A coupon takes ${coupon} off the bill."
    if level == 2:
        return question + f" How much does {name} pay?", work, total
    bill = 100 * (total // 100 + 1) if total >= 50 else 50
    change = work.step(f"{name} gets back", bill, "-", total, " in change", money="ab")
    return question + f" {name} pays with ${bill}. How much change does {name} get?", work, change


def _savings(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, medium = _RANGES[level]
    name = rng.choice(_NAMES)
    weekly, weeks = rng.randint(2, medium // 2 + 2), rng.randint(2, small + 2)
    work = _Work()
    saved = work.step(f"{name} saves", weekly, "*", weeks, money="a")
    spent = rng.randint(1, saved - 1)
    good = rng.choice(_GOODS)
    left = work.step(f"After buying the {good}, {name} has", saved, "-", spent, " left", money="ab")
    question = f"{name} saves ${weekly} every week for {weeks} weeks, then spends ${spent} on a {good}."
    if level == 1:
        return question + f" How much money does {name} have left?", work, left
    gift = rng.randint(2, medium)
    left = work.step(f"With the gift {name} has", left, "+", gift, money="ab")
    question += f" A relative then gives {name} ${gift}."
    if level == 2:
        return question + f" How much money does {name} have now?", work, left
    people = rng.randint(2, 6)
    extra = (-left) % people or people
    left = work.step(f"With the ${extra} found in a pocket, {name} has", left, "+", extra, money="ab")
    share = work.step("Each person gets", left, "/", people, money="a")
    question += (
        f" {name} finds ${extra} in a pocket and splits all the money equally among {people} "
        f"people. How much does each person get?"
    )
    return question, work, share


def _sharing(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, medium = _RANGES[level]
    name = rng.choice(_NAMES)
    item = rng.choice(_ITEMS)
    packs, per_pack = rng.randint(2, small), rng.randint(2, 12)
    friends = rng.randint(2, 8)
    work = _Work()
    bought = work.step(f"{name} buys", packs, "*", per_pack, f" {_plural(item)}")
    if level == 1:
        have = 0
        extra = (-bought) % friends
        if extra:
            have = work.step(f"With the {extra} at home there are", bought, "+", extra, f" {_plural(item)}")
            question = f"{name} buys {packs} packs of {per_pack} {_plural(item)} and already has {extra} at home."
        else:
            have = bought
            question = f"{name} buys {packs} packs of {per_pack} {_plural(item)}."
        each = work.step("Each friend gets", have, "/", friends, f" {_plural(item)}")
        return question + f" {name} shares them equally among {friends} friends. How many does each get?", work, each
    start = rng.randint(1, medium)
    have = work.step(f"Together with the ones {name} had, there are", start, "+", bought, f" {_plural(item)}")
    lost = rng.randint(0, have // 3)
    have = work.step(f"After losing {lost}, there are", have, "-", lost, f" {_plural(item)}")
    question = (
        f"{name} has {start} {_plural(item, start)}, buys {packs} packs of {per_pack} more, and then loses {lost}."
    )
    if level == 2:
        return question + f" How many {_plural(item)} does {name} have now?", work, have
    kept = have % friends
    shared = work.step(f"{name} keeps {kept} and shares", have, "-", kept, f" {_plural(item)}")
    each = work.step("Each friend gets", shared, "/", friends, f" {_plural(item)}")
    question += (
        f" {name} keeps the fewest needed so that the rest can be shared equally among {friends} "
        f"friends, and shares the rest. How many {_plural(item)} does each friend get?"
    )
    return question, work, each


def _travel(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, medium = _RANGES[level]
    name = rng.choice(_NAMES)
    vehicle = rng.choice(_VEHICLES)
    speed1, hours1 = rng.randint(20, 40 + medium // 50), rng.randint(1, min(small, 9))
    speed2, hours2 = rng.randint(20, 40 + medium // 50), rng.randint(1, min(small, 9))
    work = _Work()
    first = work.step("The first part of the trip is", speed1, "*", hours1, " miles")
    second = work.step("The second part is", speed2, "*", hours2, " miles")
    total = work.step("The whole trip is", first, "+", second, " miles")
    question = (
        f"{name} drives a {vehicle} at {speed1} miles per hour for {hours1} "
        f"hour{'s' if hours1 != 1 else ''}, then at {speed2} miles per hour for {hours2} "
        f"hour{'s' if hours2 != 1 else ''}."
    )
    if level == 1:
        return question + " How many miles does the trip cover?", work, total
    back = work.step("The way back doubles it:", total, "*", 2, " miles")
    question += " Then the same route is driven back."
    if level == 2:
        return question + " How many miles are driven in all?", work, back
    cost_per = rng.randint(2, 9)
    miles_per = 10 * rng.randint(1, 4)
    fuel = back + (-back) % miles_per
    if fuel != back:
        fuel = work.step("Rounded up to whole fuel units the distance is", back, "+", fuel - back, " miles")
    units = work.step("That takes", fuel, "/", miles_per, " units of fuel")
    cost = work.step("The fuel costs", units, "*", cost_per, money="b")
    question += (
        f" Fuel is bought in units that each last {miles_per} miles, whole units only, at ${cost_per} "
        f"a unit. How much does the fuel cost?"
    )
    return question, work, cost


def _inventory(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, medium = _RANGES[level]
    item = rng.choice(_ITEMS)
    crates, per_crate = rng.randint(2, small), rng.randint(5, 25)
    work = _Work()
    stock = work.step("The shop starts with", crates, "*", per_crate, f" {_plural(item)}")
    sold = rng.randint(1, stock - 1)
    left = work.step("After the morning sales, it has", stock, "-", sold, f" {_plural(item)}")
    question = (
        f"A shop receives {crates} crates with {per_crate} {_plural(item)} in each. It sells {sold} in the morning."
    )
    if level == 1:
        return question + f" How many {_plural(item)} are left?", work, left
    delivered = rng.randint(2, medium)
    left = work.step("After the delivery, it has", left, "+", delivered, f" {_plural(item)}")
    question += f" In the afternoon another {delivered} arrive."
    if level == 2:
        return question + f" How many {_plural(item)} does the shop have at closing?", work, left
    price = rng.randint(2, 15)
    sold_later = rng.randint(1, left)
    left = work.step("Next day it has", left, "-", sold_later, f" {_plural(item)} left")
    takings = work.step("The next day's sales bring in", sold_later, "*", price, money="b")
    question += (
        f" The next day it sells {sold_later} at ${price} each. How many dollars do the next day's sales bring in?"
    )
    return question, work, takings


def _ages(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, _ = _RANGES[level]
    first, second, third = rng.sample(_NAMES, 3)
    young = rng.randint(2, 12)
    factor = rng.randint(2, 4)
    work = _Work()
    older = work.step(f"{second} is", young, "*", factor, " years old")
    total = work.step("Together they are", young, "+", older, " years old")
    question = f"{first} is {young} years old and {second} is {factor} times as old as {first}."
    if level == 1:
        return question + f" How old are {first} and {second} together?", work, total
    gap = rng.randint(1, older - 1)
    third_age = work.step(f"{third} is", older, "-", gap, " years old")
    total = work.step("All three together are", total, "+", third_age, " years old")
    question += f" {third} is {gap} years younger than {second}."
    if level == 2:
        return question + " What is the sum of their three ages?", work, total
    years = rng.randint(2, small)
    growth = work.step(f"In {years} years each of the three is {years} years older, adding", 3, "*", years, " years")
    total = work.step("The sum then is", total, "+", growth, " years")
    return question + f" What will the sum of their ages be in {years} years?", work, total


def _discount(rng: random.Random, level: int) -> tuple[str, _Work, int]:
    small, medium = _RANGES[level]
    name = rng.choice(_NAMES)
    good = rng.choice(_GOODS)
    percent = rng.choice((10, 20, 25, 50)) if level < 3 else rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 75))
    # A price that makes the discount a whole number of dollars.
    step = 100 // math.gcd(percent, 100)
    price = step * rng.randint(1, max(1, (medium * 2) // step))
    work = _Work()
    off = price * percent // 100
    work.lines.append(
        f"The discount is {percent}% of ${price}: ${price} x {percent} / 100 = $<<{price}*{percent}/100={off}>>{off}."
    )
    sale = work.step("The sale price is", price, "-", off, money="ab")
    question = f"A {good} costs ${price}. It is on sale for {percent}% off."
    if level == 1:
        return question + " What is the sale price?", work, sale
    count = rng.randint(2, min(small, 6))
    total = work.step(f"{count} of them cost", count, "*", sale, money="b")
    question += f" {name} buys {count} of them at the sale price."
    if level == 2:
        return question + f" How much does {name} spend?", work, total
    shipping = rng.randint(3, 20)
    total = work.step("With shipping the order comes to", total, "+", shipping, money="ab")
    return question + f" Shipping costs ${shipping}. How much does {name} pay in total?", work, total


def _one_step(rng: random.Random) -> tuple[str, _Work, int]:
    """Level 0: one addition or subtraction of one-digit numbers, phrased as a short word problem."""
    name = rng.choice(_NAMES)
    item = rng.choice(_ITEMS)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    work = _Work()
    if rng.random() < 0.5:
        total = work.step("", a, "+", b)
        question = f"{name} has {a} {_plural(item, a)} and gets {b} more. How many {_plural(item)} now?"
    else:
        a, b = max(a, b), min(a, b)
        total = work.step("", a, "-", b)
        question = f"{name} has {a} {_plural(item, a)} and gives away {b}. How many {_plural(item)} are left?"
    work.lines[-1] = work.lines[-1].lstrip()
    return question, work, total


TEMPLATES = {
    "shopping": _shopping,
    "savings": _savings,
    "sharing": _sharing,
    "travel": _travel,
    "inventory": _inventory,
    "ages": _ages,
    "discount": _discount,
}


def generate(n: int, seed: int | str = 0, level: int | str | None = None) -> list[dict]:
    """n word problems as rows {question, answer_text, answer}, the same for the same (seed, level).

    level 0, 1, 2 or 3 fixes the difficulty; None is DEFAULT_LEVEL (0); "mixed" draws each problem's
    level from 1-3 with the seed. `answer_text`
    is the worked solution ending in "#### N"; `answer` is N as a string.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a whole number >= 0, got {n!r}")
    if level is not None and level != "mixed" and (isinstance(level, bool) or level not in LEVELS):
        raise ValueError(f"level must be one of {', '.join(map(str, LEVELS))}, 'mixed' or None, got {level!r}")
    level = DEFAULT_LEVEL if level is None else level
    # A string seed is hashed the same way on every run and every platform (unlike hash()).
    rng = random.Random(f"grpo-train arithmetic {seed}")
    names = list(TEMPLATES)
    rows = []
    for _ in range(n):
        if level == 0:
            question, work, final = _one_step(rng)
        else:
            problem_level = rng.choice(MIXED_LEVELS) if level == "mixed" else level
            question, work, final = TEMPLATES[rng.choice(names)](rng, problem_level)
        rows.append({"question": question, "answer_text": work.answer_text(final), "answer": str(final)})
    return rows
