"""Tasks: what is learned. Each gives rows {prompt, answer} for the trainer and the rewards.

`load_task(dataset, split)` dispatches on the profile's `dataset` key: "gsm8k" (hub or its cache),
"arithmetic" (generated offline), or the path of a JSONL file with `question` and `answer`.
"""

from __future__ import annotations

from pathlib import Path

from launcher.errors import UsageError
from tasks import arithmetic, gsm8k

SPLITS = ("train", "test")

# Generated problems: how many make "all" of a split, and the fixed seed of the held-out stream. The test
# set is the same for every training seed, and training rows never repeat a test question.
ARITHMETIC_TRAIN_SIZE = 5000
ARITHMETIC_TEST_SIZE = 500
ARITHMETIC_TEST_SEED = "held-out"


def load_task(dataset: str, split: str = "train", limit: int = 0, seed: int = 0) -> list[dict]:
    """Rows {prompt: [system, user messages], answer: "72"} for a dataset and split ("train" or "test").

    dataset: "gsm8k", "arithmetic", or a JSONL path (a file serves both splits; a folder gives
    `<split>.jsonl`). limit > 0 keeps the first limit rows, in file order. seed picks the generated
    training problems for "arithmetic"; the arithmetic test split is fixed and disjoint from training.
    Raises UsageError for an unknown dataset, a bad path or a file without the needed fields.
    """
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"limit must be a whole number >= 0 (0 = all), got {limit!r}")
    if dataset == "gsm8k":
        rows = gsm8k.load_gsm8k(split)
    elif dataset == "arithmetic":
        rows = _arithmetic(split, limit, seed)
    elif isinstance(dataset, (str, Path)) and str(dataset).strip():
        rows = gsm8k.load_gsm8k(split, path=dataset)
    else:
        raise UsageError(f"unknown dataset {dataset!r}; use gsm8k, arithmetic or the path of a JSONL file "
                         "with \"question\" and \"answer\"")
    if limit:
        rows = rows[:limit]
    return gsm8k.to_prompt_rows(rows)


def _arithmetic(split: str, limit: int, seed: int) -> list[dict]:
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
