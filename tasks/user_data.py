"""The user's own data, and HOW its rows become the trainer's: a hub dataset id, or a local .jsonl / .json / .csv /
.parquet file or folder (tasks.data_spec), read into its splits (tasks.data_sources), its columns mapped here to
the rows the trainer and the rewards use, refused with the fix where it cannot be used (tasks.data_checks).

A row becomes {**every column, prompt: [system, user messages], answer: gold}; a `prompt` column of text stays
text (TRL's standard format: no chat template, no system turn, completions as text); the columns reach the reward
functions (and an environment's reset) as keyword arguments under their own names, as TRL passes them, the
question and gold columns as written; `answer` is the gold's final answer, which the shipped rewards read. A
row whose `prompt` already is a list of chat messages passes through unchanged. Every refusal is a UsageError
naming the source, the row or line, the column and the fix; `datasets` is imported only where data is read,
never by the planner's dry run. The tree reads the user's data through this module: DataSpec, source_kind and
load_splits are importable from here.
"""

from __future__ import annotations

import json
import re

from contract.errors import UsageError
from tasks.data_checks import WORKED_CHARS, WORKED_LINES, check_unreadable
from tasks.data_sources import load_splits  # noqa: F401 - re-exported: the tree reads the user's data from here
from tasks.data_spec import ANSWER_FIELDS, QUESTION_FIELDS, TESTS_FIELD, DataSpec, source_kind  # noqa: F401 - source_kind too

# Columns TRL passes under these names itself: a dataset column of the same name would be shadowed.
RESERVED = {
    "prompt",
    "completion",
    "completions",
    "completion_ids",
    "prompts",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
}


def _pick(columns: list[str], wanted: str | None, defaults: tuple[str, ...], role: str, spec: DataSpec) -> str:
    key = f"{role}_field"
    if wanted:
        if wanted not in columns:
            raise UsageError(
                f"dataset {spec.dataset}: no column '{wanted}' (columns: {', '.join(columns)}) "
                f"(fix: set {key} to one of them)"
            )
        return wanted
    for name in defaults:
        if name in columns:
            return name
    raise UsageError(
        f"dataset {spec.dataset}: no {role} column: none of {', '.join(defaults)} (columns: "
        f"{', '.join(columns)}) (fix: set {key})"
    )


def _is_chat(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)
    )


def _cell_text(value) -> str | None:
    """A cell as text: None and NaN (an empty cell of a number column) are nothing; a whole number that a
    number column holds as a float (12.0) is written as the whole number it is."""
    if value is None:
        return None
    if isinstance(value, float):
        if value != value:  # NaN
            return None
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
    text = str(value).strip()
    return text or None


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_GSM8K_FINAL = re.compile(r"^####\s*(.+?)\s*$", re.MULTILINE)


def _last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} of a text, its braces balanced; None when it is not closed."""
    found = list(_BOXED.finditer(text))
    if not found:
        return None
    start = found[-1].end()
    depth = 1
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[start:position].strip() or None
    return None


def final_answer(value) -> str | None:
    """The gold of a cell given without answer_pattern: a worked solution's final answer (its last \\boxed{},
    MATH's and open-r1's data; its `#### N` line, GSM8K's), else the cell as it is; None for an empty cell and
    for a worked solution with neither (WORKED_CHARS, WORKED_LINES), which is refused with the fix."""
    text = _cell_text(value)
    if text is None or not isinstance(value, str):
        return text
    if _BOXED.search(text):
        return _last_boxed(text)
    marked = _GSM8K_FINAL.findall(text)
    if marked:
        return marked[-1].replace(",", "").strip() or None
    if len(text) > WORKED_CHARS or text.count("\n") + 1 >= WORKED_LINES:
        return None
    return text


def test_cases(value) -> str | None:
    """A verification_info cell (open-r1's code data: a mapping, or its JSON, with a list of test_cases) as the
    row's gold, `N test cases`; None when it holds none. The code rewards read the cell itself."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    cases = value.get("test_cases") if isinstance(value, dict) else None
    if isinstance(cases, str):
        try:
            cases = json.loads(cases)
        except ValueError:
            return None
    return f"{len(cases)} test cases" if isinstance(cases, list) and cases else None


def gold_reader(spec: DataSpec, default_pattern: str | None = None, column: str | None = None):
    """A function from an answer field to the gold answer (None when it cannot be read): the pattern's first
    group, or without one the cell's final answer (final_answer); a column of test cases, their count."""
    if column == TESTS_FIELD and not spec.answer_pattern:
        return test_cases
    text = spec.answer_pattern or default_pattern
    if not text:
        return final_answer
    try:
        pattern = re.compile(text, re.DOTALL)
    except re.error as exc:
        raise UsageError(f"answer_pattern {text!r}: not a regular expression ({exc})") from None
    if pattern.groups < 1:
        raise UsageError(f"answer_pattern {text!r}: needs a group around the gold answer, e.g. '#### (.+)'")

    def read(value) -> str | None:
        value = _cell_text(value)
        if value is None:
            return None
        found = pattern.findall(value)
        if not found:
            return None
        last = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
        return last.replace(",", "").strip() or None

    return read


def to_rows(
    records: list[dict],
    spec: DataSpec,
    system_prompt: str,
    split: str,
    default_pattern: str | None = None,
    row_numbers: list[int] | None = None,
    judge: bool = True,
    unreadable_out: list | None = None,
) -> tuple[list[dict], int]:
    """(rows for the trainer, rows dropped because their answer or question could not be read).

    row_numbers: each record's position in its file (default: its position in records), for the messages.
    judge: refuse when more than MAX_UNREADABLE_SHARE are unreadable (the caller may judge the whole file
    instead, see check_unreadable); unreadable_out receives the file positions of the dropped rows."""
    if not records:
        raise UsageError(f"dataset {spec.dataset}: the {split} split is empty (fix: add rows)")
    numbers = row_numbers if row_numbers is not None else range(len(records))
    chat, question, answer = _columns(spec, list(records[0].keys()), records[0])
    read_gold = gold_reader(spec, default_pattern, answer)
    rows, unreadable, no_question = [], [], []
    as_text = text_prompts(spec, question)
    for index, record in enumerate(records):
        gold = read_gold(record.get(answer))
        if chat:
            prompt = record["prompt"]
        elif as_text:  # TRL's standard format: the text is the prompt, no chat template or system turn
            prompt = record["prompt"] if isinstance(record.get("prompt"), str) and record["prompt"].strip() else None
        else:
            text = _cell_text(record.get(question)) if isinstance(record.get(question), (str, int, float)) else None
            prompt = (
                None
                if text is None
                else ([{"role": "system", "content": system_prompt}] if system_prompt else [])
                + [{"role": "user", "content": text}]
            )
        if gold is None or prompt is None:  # an empty cell on either side: dropped and counted
            unreadable.append(numbers[index])
            if prompt is None:
                no_question.append(numbers[index])
            continue
        # Every column under its own name, as TRL passes it (open-r1's accuracy reads `solution`, an environment's
        # reset its own column), the question and gold columns too; `answer` is the gold the shipped rewards read.
        extra = {k: v for k, v in record.items() if k not in RESERVED}
        rows.append({**extra, "prompt": prompt, "answer": gold})
    if unreadable_out is not None:
        unreadable_out.extend(unreadable)
    if judge:
        check_unreadable(spec, f" ({split})", unreadable, len(records), question, answer, default_pattern, no_question)
    return rows, len(unreadable)


SCAN_BATCH = 8192


def text_prompts(spec: DataSpec, question: str | None) -> bool:
    """Whether a split's prompts stay text, as TRL's standard format keeps them: a `prompt` column of text that
    no question_field names, with no system prompt of the profile's own (either makes a conversation with the
    system prompt, as open-r1 does), in a run without tools or an environment (their turns are a conversation's)."""
    from tasks.prompts import SYSTEM_PROMPT

    own_system = spec.system_prompt not in (None, SYSTEM_PROMPT)
    return question == "prompt" and not spec.question_field and not own_system and not spec.conversation


def _columns(spec: DataSpec, columns: list[str], first: dict) -> tuple[bool, str | None, str]:
    """(chat prompts, question column or None, answer column) of a split, refused as to_rows refuses them."""
    chat = "prompt" in columns and _is_chat(first.get("prompt")) and not spec.question_field
    question = None if chat else _pick(columns, spec.question_field, QUESTION_FIELDS, "question", spec)
    answer = _pick(columns, spec.answer_field, ANSWER_FIELDS, "answer", spec)
    if question is not None and question == answer:
        raise UsageError(
            f"dataset {spec.dataset}: column '{question}' is both the question and the answer (fix: "
            "set question_field and answer_field to two different columns)"
        )
    return chat, question, answer


def scan(
    data, spec: DataSpec, split: str, row_numbers: list[int] | None = None, default_pattern: str | None = None
) -> tuple:
    """Which rows of a split (a `datasets.Dataset`) can be used, reading only its question and answer columns
    in batches, so that a file of millions of rows is never held whole as Python objects.

    Returns (positions of the usable rows in `data`, as an array; file positions of the unusable ones,
    the question column or None, the answer column, file positions of the rows whose question is empty)."""
    from array import array

    if len(data) == 0:
        raise UsageError(f"dataset {spec.dataset}: the {split} split is empty (fix: add rows)")
    chat, question, answer = _columns(spec, list(data.column_names), data[0])
    read_gold = gold_reader(spec, default_pattern, answer)
    numbers = row_numbers if row_numbers is not None else range(len(data))
    usable, unusable, no_question = array("q"), [], []
    position = 0
    for batch in data.select_columns([c for c in (question, answer) if c]).iter(batch_size=SCAN_BATCH):
        golds = batch[answer]
        questions = batch[question] if question else [None] * len(golds)
        for gold, text in zip(golds, questions):
            asked = chat or (isinstance(text, (str, int, float)) and _cell_text(text) is not None)
            if asked and read_gold(gold) is not None:
                usable.append(position)
            else:
                unusable.append(numbers[position])
                if not asked:
                    no_question.append(numbers[position])
            position += 1
    return usable, unusable, question, answer, no_question
