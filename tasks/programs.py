"""Generated tiny programming problems with stdin/stdout test cases, for offline code runs and tests.

Each problem asks for a Python program that reads two integers (named by two letters: "x and y") from one line
and prints one expression of them ("x * y", "the larger of x and y", ...). A row is {question, answer,
verification_info}:
`answer` is a reference program (the worked solution) and `verification_info` holds TEST_CASES stdin/stdout
cases in open-r1's layout, which the `code` and `binary_code` rewards run a completion's program against. The
same seed always gives the same rows, and a longer list starts with the shorter one.

The expressions are few enough for the offline tiny model to learn on a CPU, and the names many enough (4,200
distinct questions) that a fixed held-out split never shows training questions.
"""

from __future__ import annotations

import json
import random
import re

TEST_CASES = 3
READ_LINE = "a, b = map(int, input().split())"
# Shown with the question: the layout a completion's program must take (the code rewards read its last block).
INSTRUCTION = "Answer with the program in a ```python block."

# (question's wording, Python expression of a and b, renamed per problem). No constants: the tiny model did not
# learn to copy a digit from the question into the program in 600 warm-start steps (the constant it wrote was
# the same whatever the question said, 0.1 of check problems passing).
EXPRESSIONS = (
    ("a + b", "a + b"),
    ("a - b", "a - b"),
    ("b - a", "b - a"),
    ("a * b", "a * b"),
    ("the larger of a and b", "max(a, b)"),
    ("the smaller of a and b", "min(a, b)"),
    ("the absolute difference of a and b", "abs(a - b)"),
    ("the square of a plus b", "a * a + b"),
    ("the sum of a and b, times a", "(a + b) * a"),
    ("a times b minus a", "a * b - a"),
)
# The names the question gives the two integers (two different letters): they make the held-out questions new
# to the model. The reference programs name them a and b whatever the question says (the test cases see stdin
# and stdout only): a sampled answer that copied the names wrote them differently in its two lines. Not "a" in
# the question: it is also the article of its words.
LETTERS = "bcdefghkmnpqrstuvwxyz"
NAMES = tuple((first, second) for first in LETTERS for second in LETTERS if first != second)
# How many distinct questions the generator can ask: each wording with each pair of names.
QUESTIONS = len(NAMES) * len(EXPRESSIONS)


def program(expression: str) -> str:
    """The reference program for a Python expression of a and b."""
    return f"{READ_LINE}\nprint({expression})"


def fenced(code: str) -> str:
    """A program as the completion carries it: a ```python fenced block."""
    return f"```python\n{code}\n```"


def _cases(expression: str, rng: random.Random) -> list[dict]:
    cases = []
    for _ in range(TEST_CASES):
        a, b = rng.randint(-20, 20), rng.randint(-20, 20)
        # the expression is built here from the task's own templates, never from outside text
        value = eval(expression, {"__builtins__": {}, "max": max, "min": min, "abs": abs}, {"a": a, "b": b})  # noqa: S307
        cases.append({"type": "stdin_stdout", "input": f"{a} {b}\n", "output": f"{value}\n", "fn_name": None})
    return cases


def _named(text: str, names: tuple[str, str]) -> str:
    """The template's a and b renamed (the templates' other words hold no standalone a or b)."""
    return re.sub(r"\b[ab]\b", lambda found: names[found.group() == "b"], text)


def problem(rng: random.Random) -> dict:
    """One problem drawn with rng: {question, answer (the reference program), verification_info, expression}."""
    wording, expression = rng.choice(EXPRESSIONS)
    names = rng.choice(NAMES)
    wording = _named(wording, names)
    question = (
        f"Write a Python program that reads two integers {names[0]} and {names[1]} from one line and prints "
        f"{wording}. {INSTRUCTION}"
    )
    # the cases depend on the question alone, so a question repeated in another stream has the same tests
    cases = _cases(expression, random.Random(f"grpo-train programs cases {question}"))
    return {
        "question": question,
        "answer": program(expression),
        "expression": expression,
        "verification_info": json.dumps({"language": "python", "test_cases": cases}),
    }


def generate(n: int, seed: int | str = 0) -> list[dict]:
    """n problems, the same for the same seed; generate(10, s) == generate(100, s)[:10]."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a whole number >= 0, got {n!r}")
    rng = random.Random(f"grpo-train programs {seed}")
    return [problem(rng) for _ in range(n)]


def distinct(n: int, seed: int | str) -> list[dict]:
    """The first n problems of a seed's stream with no question repeated (the held-out split); n at most
    QUESTIONS."""
    if n > QUESTIONS:
        raise ValueError(f"only {QUESTIONS} distinct questions exist, asked for {n}")
    seen: set[str] = set()
    rows: list[dict] = []
    rng = random.Random(f"grpo-train programs {seed}")
    while len(rows) < n:
        row = problem(rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            rows.append(row)
    return rows


def without(rows_of, wanted: int, excluded: set[str]) -> list[dict]:
    """The first `wanted` rows of a prefix-stable stream `rows_of(count)` whose question is not in `excluded`."""
    drawn = wanted
    while True:
        drawn += drawn // 8 + 16
        rows = [row for row in rows_of(drawn) if row["question"] not in excluded]
        if len(rows) >= wanted:
            return rows[:wanted]
