"""Tasks: what is learned, and their registry. Each task gives rows {question, answer}; `load_task` turns them
into the trainer's rows {prompt, answer} (tasks.prompts).

A profile's `dataset` key names a registered task (TASKS), or is the user's own data: a hub id or a local
file or folder, read by tasks.user_data with the profile's column mapping (the data keys in tasks.data_spec,
reading in tasks.data_sources, the refusals in tasks.data_checks). `check_data` reads it all once,
before any model loads, so that bad data is refused as bad input. Importing this package is cheap: the
launcher checks profiles against `task_names()` without loading torch or `datasets` (both loaders import
`datasets` only when they load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.errors import UsageError
from tasks import arithmetic, gsm8k, programs
from tasks.data_spec import TESTS_FIELD, DataSpec
from tasks.prompts import to_prompt_rows

SPLITS = ("train", "test")

# Generated problems: how many make "all" of a split, and the fixed seed of the held-out stream. The test
# set is the same for every training seed, and training rows never repeat a test question.
ARITHMETIC_TRAIN_SIZE = 5000
ARITHMETIC_TEST_SIZE = 500
ARITHMETIC_TEST_SEED = "held-out"
PROGRAMS_TRAIN_SIZE = 2000
PROGRAMS_TEST_SIZE = 100  # distinct questions, of the generator's 4,200 (tasks.programs.QUESTIONS)
PROGRAMS_TEST_SEED = "held-out"


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


def _load_programs(split: str, limit: int, seed: int) -> list[dict]:
    held_out = programs.distinct(PROGRAMS_TEST_SIZE, seed=PROGRAMS_TEST_SEED)
    if split == "test":
        return held_out[:limit] if limit else held_out
    excluded = {row["question"] for row in held_out}
    return programs.without(lambda count: programs.generate(count, seed=seed), limit or PROGRAMS_TRAIN_SIZE, excluded)


# Stable names: profiles refer to them in `dataset`.
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            "gsm8k", "grade-school maths word problems (openai/gsm8k: the hub, or its local cache offline)", _load_gsm8k
        ),
        Task("arithmetic", "generated multi-step word problems in GSM8K's shape (offline, seeded)", _load_arithmetic),
        Task("programs", "generated tiny stdin/stdout programs with test cases (offline, seeded)", _load_programs),
    )
}


def task_names() -> tuple[str, ...]:
    return tuple(TASKS)


def describe() -> dict[str, str]:
    """One line per task, for --help and reports."""
    return {name: task.description for name, task in TASKS.items()}


# The data keys last given for each of the user's sources in this process: a caller that knows only the
# dataset's name (the tiny model's tokenizer reads the task's text) gets the same columns as the attempt.
_KEYS_FOR: dict[str, DataSpec] = {}
# Each source read once per process: {spec key: (splits as datasets.Dataset, file positions, scans)}; rows are
# mapped only for the rows asked for (train_samples of a million-row file maps train_samples rows)
_SOURCES: dict[tuple, tuple] = {}


def _spec_of(dataset) -> DataSpec:
    if isinstance(dataset, (str, Path)) and str(dataset).strip():
        return _KEYS_FOR.get(str(dataset)) or DataSpec(dataset=str(dataset))
    if hasattr(dataset, "dataset") and isinstance(dataset.dataset, str):
        spec = dataset if isinstance(dataset, DataSpec) else DataSpec.of(dataset)
        if spec.dataset not in TASKS:  # a task's name alone means its defaults
            _KEYS_FOR[spec.dataset] = spec
        return spec
    raise UsageError(
        f"unknown dataset {dataset!r}; use {', '.join(TASKS)}, a hub id org/name, or the path of a "
        ".jsonl/.json/.csv/.parquet file or folder"
    )


def _user_source(spec: DataSpec) -> tuple:
    from tasks import user_data

    key = tuple(sorted(vars(spec).items()))
    if key not in _SOURCES:
        numbers: dict = {}
        data = user_data.load_splits(spec, numbers, as_datasets=True)
        scans = {split: user_data.scan(data[split], spec, split, numbers[split]) for split in SPLITS}
        if numbers["held_out"]:
            # judged over the file: a held-out test split is part of the training file, and its few rows alone
            # would make one empty cell look like a tenth of the data
            _usable, _unusable, question, answer, _empty = scans["train"]
            user_data.check_unreadable(
                spec,
                "",
                scans["train"][1] + scans["test"][1],
                len(data["train"]) + len(data["test"]),
                question,
                answer,
                no_question=scans["train"][4] + scans["test"][4],
            )
        else:
            for split in SPLITS:
                usable, unusable, question, answer, empty = scans[split]
                user_data.check_unreadable(
                    spec, f" ({split})", unusable, len(data[split]), question, answer, no_question=empty
                )
        _SOURCES[key] = (data, numbers, scans)
    return _SOURCES[key]


def _user_rows(spec: DataSpec, split: str, limit: int) -> list[dict]:
    """The first `limit` usable rows of a split (all when 0), mapped to the trainer's rows."""
    from tasks import user_data
    from tasks.prompts import SYSTEM_PROMPT

    data, numbers, scans = _user_source(spec)
    usable = scans[split][0]
    chosen = list(usable[:limit] if limit else usable)
    if not chosen:
        raise UsageError(
            f"dataset {spec.dataset}: no usable row in the {split} split (fix: fill the question and answer cells)"
        )
    system = SYSTEM_PROMPT if spec.system_prompt is None else spec.system_prompt
    records = data[split].select(chosen).to_list()
    rows, _dropped = user_data.to_rows(
        records, spec, system, split, row_numbers=[numbers[split][i] for i in chosen], judge=False
    )
    return rows


def load_task(dataset, split: str = "train", limit: int = 0, seed: int = 0) -> list[dict]:
    """Rows {prompt: [system, user messages], answer: "72", **every column} for a split ("train" or "test").

    dataset: a profile (or a DataSpec): its `dataset` and data keys (columns, splits, system_prompt); or the
    dataset's name alone (a task name, a hub id, a path), read with the keys last given for it, else the
    defaults. limit > 0 keeps the first limit rows, in file order. seed picks the generated training problems
    for "arithmetic"; the arithmetic test split is fixed and disjoint from training.
    Raises UsageError for an unknown dataset, a bad path, or data that cannot be read or mapped.
    """
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"limit must be a whole number >= 0 (0 = all), got {limit!r}")
    spec = _spec_of(dataset)
    if spec.dataset in TASKS:
        rows = TASKS[spec.dataset].load(split, limit, seed)
        rows = rows[:limit] if limit else rows
        prompted = to_prompt_rows(rows, spec.system_prompt)
        # a generated task's test cases reach the code rewards as the column they read
        return [{**p, TESTS_FIELD: row[TESTS_FIELD]} if TESTS_FIELD in row else p for p, row in zip(prompted, rows)]
    return _user_rows(spec, split, limit)


def check_data(profile) -> str:
    """Read the profile's training and test rows as the attempt will (before any model loads), and say what
    was found in one line, e.g. "1,234 training rows, 120 test rows, 3 answers unreadable (dropped)".
    Raises UsageError naming the source, the row or column, and the fix."""
    spec = _spec_of(profile)
    train = load_task(profile, "train", limit=profile.train_samples, seed=profile.seed)
    test = load_task(profile, "test", limit=profile.eval_samples, seed=profile.seed) if profile.eval_samples else []
    text = f"{len(train):,} training rows, {len(test):,} test rows"
    if spec.dataset not in TASKS:
        scans = _user_source(spec)[2]
        available = len(scans["train"][0])
        if len(train) < available:
            text = f"{len(train):,} of {available:,} training rows (train_samples), {len(test):,} test rows"
        unreadable = len(scans["train"][1]) + len(scans["test"][1])
        empty = len(scans["train"][4]) + len(scans["test"][4])
        if unreadable - empty:
            text += f", {unreadable - empty:,} answer{'s' if unreadable - empty > 1 else ''} unreadable (dropped)"
        if empty:
            text += f", {empty:,} question{'s' if empty > 1 else ''} empty (dropped)"
        text += _gold_read_from(spec, scans["train"]) + _columns_said(spec, scans["train"])
    return text


def _columns_said(spec: DataSpec, scan: tuple) -> str:
    """What the rewards get that the data does not say by itself: prompts kept as text (TRL's standard format),
    and an `answer` column replaced by the gold read from another column."""
    from tasks import user_data

    question, answer = scan[2], scan[3]
    columns = _user_source(spec)[0]["train"].column_names
    text = ""
    if user_data.text_prompts(spec, question):
        text += (
            ", prompts: 'prompt' as text, as TRL's standard format (no chat template or system prompt; completions "
            "reach the rewards as text; question_field: prompt makes each a conversation)"
        )
    if answer != "answer" and "answer" in columns:
        text += (
            f", warning: column 'answer' reaches the rewards as the gold read from '{answer}' (its own values are "
            "replaced: rename the column to keep them)"
        )
    return text


def _gold_read_from(spec: DataSpec, scan: tuple) -> str:
    """`, gold answers: the final answer of each worked solution in 'solution'` when the answer cells are worked
    solutions read without answer_pattern (their \\boxed{} or `#### N`), judged by the first usable row."""
    from tasks import user_data

    usable, answer = scan[0], scan[3]
    if spec.answer_pattern or not len(usable):
        return ""
    if answer == TESTS_FIELD:
        return f", gold: the test cases in '{answer}' (the code rewards run each completion's program on them)"
    data = _user_source(spec)[0]["train"]
    cell = data[int(usable[0])][answer]
    if not isinstance(cell, str) or user_data.final_answer(cell) == cell.strip():
        return ""
    return f", gold answers: the final answer of each worked solution in '{answer}' (its last \\boxed{{}} or #### line)"
