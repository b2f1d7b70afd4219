"""Tasks: what is learned, and their registry. Each task gives rows {question, answer}; `load_task` turns them
into the trainer's rows {prompt, answer} (tasks.prompts).

A profile's `dataset` key names a registered task (TASKS) or is the path of a JSONL file (or a folder of
`<split>.jsonl`) with `question` and `answer`. Importing this package is cheap: the launcher checks profiles
against `task_names()` without loading torch or `datasets` (gsm8k imports `datasets` only when it loads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UsageError
from tasks import arithmetic, gsm8k
from tasks.prompts import to_prompt_rows

SPLITS = ("train", "test")

# Generated problems: how many make "all" of a split, and the fixed seed of the held-out stream. The test
# set is the same for every training seed, and training rows never repeat a test question.
ARITHMETIC_TRAIN_SIZE = 5000
ARITHMETIC_TEST_SIZE = 500
ARITHMETIC_TEST_SEED = "held-out"


@dataclass(frozen=True)
class Task:
    name: str
    description: str  # one line, for --help and error messages
    # load(split, limit, seed) -> rows {question, answer_text, answer}; limit 0 means all
    load: Callable[[str, int, int], list[dict]]


def _load_gsm8k(split: str, limit: int, seed: int) -> list[dict]:
    rows = gsm8k.load_gsm8k(split)
    return rows[:limit] if limit else rows


def _load_arithmetic(split: str, limit: int, seed: int) -> list[dict]:
    held_out = arithmetic.generate(ARITHMETIC_TEST_SIZE, seed=ARITHMETIC_TEST_SEED)
    if split == "test":
        return held_out[:limit] if limit else held_out
    wanted = limit or ARITHMETIC_TRAIN_SIZE
    test_questions = {row["question"] for row in held_out}
    rows: list[dict] = []
    drawn = wanted
    # Draw a little more than needed and drop any question the test split holds; the stream is prefix-stable,
    # so a bigger draw only adds rows at the end.
    while len(rows) < wanted:
        drawn = drawn + drawn // 10 + 16
        rows = [row for row in arithmetic.generate(drawn, seed=seed) if row["question"] not in test_questions]
    return rows[:wanted]


# Stable names: profiles refer to them in `dataset`.
TASKS: dict[str, Task] = {task.name: task for task in (
    Task("gsm8k", "grade-school maths word problems (openai/gsm8k: the hub, or its local cache offline)",
         _load_gsm8k),
    Task("arithmetic", "generated multi-step word problems in GSM8K's shape (offline, seeded)", _load_arithmetic),
)}


def task_names() -> tuple[str, ...]:
    return tuple(TASKS)


def describe() -> dict[str, str]:
    """One line per task, for --help and reports."""
    return {name: task.description for name, task in TASKS.items()}


def load_task(dataset: str, split: str = "train", limit: int = 0, seed: int = 0) -> list[dict]:
    """Rows {prompt: [system, user messages], answer: "72"} for a dataset and split ("train" or "test").

    dataset: a name in TASKS, or a JSONL path (a file serves both splits; a folder gives `<split>.jsonl`).
    limit > 0 keeps the first limit rows, in file order. seed picks the generated training problems for
    "arithmetic"; the arithmetic test split is fixed and disjoint from training.
    Raises UsageError for an unknown dataset, a bad path or a file without the needed fields.
    """
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"limit must be a whole number >= 0 (0 = all), got {limit!r}")
    if isinstance(dataset, str) and dataset in TASKS:
        rows = TASKS[dataset].load(split, limit, seed)
    elif isinstance(dataset, (str, Path)) and str(dataset).strip():
        rows = gsm8k.load_gsm8k(split, path=dataset)
    else:
        raise UsageError(f"unknown dataset {dataset!r}; use {', '.join(TASKS)} or the path of a JSONL file "
                         "with \"question\" and \"answer\"")
    return to_prompt_rows(rows[:limit] if limit else rows)
