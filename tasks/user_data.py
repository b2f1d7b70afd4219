"""The user's own data: a hub dataset id, or a local .jsonl / .json / .csv / .parquet file or folder, read
through `datasets`' own loaders and mapped to the rows the trainer and the rewards use.

Splits come from explicit names only: the profile's `train_split` / `test_split`, or the files a folder holds
(`train.*`, `test.*`, as `datasets` names them). A source without the test split holds out a seeded tenth of
its training rows (at most HELD_OUT_MAX), the same rows whatever the training seed.

A row becomes {prompt: [system, user messages], answer: gold, **other columns}; the other columns reach the
reward functions as keyword arguments, as TRL passes them. A row whose `prompt` already is a list of chat
messages passes through unchanged. Every refusal is a UsageError naming the source, the row or line, the
column and the fix; `datasets` is imported only here, never by the planner's dry run.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from contract.errors import UsageError

SUFFIX_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
QUESTION_FIELDS = ("question", "prompt", "problem")
ANSWER_FIELDS = ("answer", "solution", "label")
HELD_OUT_SHARE = 0.1
HELD_OUT_MAX = 500
HELD_OUT_SEED = 0  # fixed: the test rows stay the same when the training seed changes
# More unreadable answers than this share and the data is refused (fewer are dropped and counted).
MAX_UNREADABLE_SHARE = 0.1
# Columns TRL passes under these names itself: a dataset column of the same name would be shadowed.
RESERVED = {"prompt", "completion", "completions", "completion_ids", "prompts", "trainer_state", "log_extra",
            "log_metric", "environments"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class DataSpec:
    """The profile's data keys (defaults when a profile does not set them)."""

    dataset: str
    dataset_config: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    question_field: str | None = None
    answer_field: str | None = None
    answer_pattern: str | None = None
    system_prompt: str | None = None

    @classmethod
    def of(cls, profile) -> "DataSpec":
        keys = [f for f in cls.__dataclass_fields__ if f != "dataset"]
        values = {k: getattr(profile, k) for k in keys if getattr(profile, k, None) not in (None, "")}
        if getattr(profile, "system_prompt", None) == "":
            values["system_prompt"] = ""
        return cls(dataset=str(profile.dataset), **values)


def source_kind(dataset: str) -> str:
    """"file", "folder" or "hub" for a dataset that is not a registered task name; UsageError otherwise."""
    path = Path(dataset).expanduser()
    if path.is_dir():
        return "folder"
    if path.exists():
        if not path.is_file():
            raise UsageError(f"dataset {dataset}: not a regular file")
        if path.suffix.lower() not in SUFFIX_BUILDERS:
            raise UsageError(f"dataset {dataset}: unknown file type '{path.suffix}' (fix: give a "
                             f"{', '.join(SUFFIX_BUILDERS)} file, a folder of them, or a hub id org/name)")
        return "file"
    if _HUB_ID.match(dataset) and not dataset.endswith(tuple(SUFFIX_BUILDERS)):
        return "hub"
    raise UsageError(f"dataset {dataset!r}: no such file or folder, and not a hub id of the form org/name "
                     "(fix: check the path, or give gsm8k or arithmetic)")


# ---------------------------------------------------------------------------------------------------
# Reading

def _offline() -> bool:
    return any(os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _first_line(error: BaseException) -> str:
    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:  # datasets wraps the parser's error
        cause = cause.__cause__ or cause.__context__
    text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"{type(cause).__name__}: {text}"[:300]


def _bad_json_line(path: Path) -> str | None:
    """The first line of a JSON Lines file that does not parse, for the error message."""
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except ValueError as exc:
                        return f"line {number}: {exc}"
    except (OSError, UnicodeDecodeError) as exc:
        return str(exc)
    return None


def _quiet_datasets():
    import datasets

    # A bar per split read, and the parser's own log line on a bad file, are noise beside the one line
    # this module says (a refusal names the file, the line and the fix itself).
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    return datasets


def _load_local(spec: DataSpec, kind: str):
    datasets = _quiet_datasets()

    path = Path(spec.dataset).expanduser()
    try:
        if kind == "file":
            builder = SUFFIX_BUILDERS[path.suffix.lower()]
            files = {"train": str(path)}
            sibling = path.with_name("test" + path.suffix)
            if path.stem == "train" and sibling.is_file():  # train.csv with test.csv beside it: the two splits
                files["test"] = str(sibling)
            return datasets.load_dataset(builder, data_files=files)
        return datasets.load_dataset(str(path))
    except Exception as error:
        where = ""
        if kind == "file" and path.suffix.lower() == ".jsonl":
            where = _bad_json_line(path) or ""
        raise UsageError(f"dataset {path}: cannot be read ({where or _first_line(error)}) (fix: one JSON object "
                         "per line for .jsonl; a header row for .csv)") from None


def _load_hub(spec: DataSpec):
    datasets = _quiet_datasets()

    try:
        return datasets.load_dataset(spec.dataset, spec.dataset_config)
    except Exception as error:
        if _offline() or "offline" in str(error).lower() or "connect" in str(error).lower():
            raise UsageError(
                f"dataset {spec.dataset}: not in the local Hugging Face cache and the hub cannot be reached "
                f"({_first_line(error)}) (fix: download it once where there is network, e.g. `python -c \"import "
                f"datasets; datasets.load_dataset('{spec.dataset}')\"`, then run with HF_DATASETS_OFFLINE=1; or "
                "give a local .jsonl/.csv/.parquet file)") from None
        raise UsageError(f"dataset {spec.dataset}: cannot be loaded ({_first_line(error)}) (fix: check the id and "
                         "dataset_config)") from None


def load_splits(spec: DataSpec) -> dict:
    """{"train": rows, "test": rows} as plain dicts, with the held-out tenth when there is no test split."""
    kind = source_kind(spec.dataset)
    data = _load_hub(spec) if kind == "hub" else _load_local(spec, kind)
    names = list(data.keys())
    if spec.train_split not in data:
        raise UsageError(f"dataset {spec.dataset}: no split '{spec.train_split}' (splits there: "
                         f"{', '.join(names)}) (fix: set train_split)")
    train = data[spec.train_split]
    if spec.test_split in data and spec.test_split != spec.train_split:
        test = data[spec.test_split]
    else:
        if len(train) < 2:
            raise UsageError(f"dataset {spec.dataset}: {len(train)} row(s): too few to hold out a test split "
                             "(fix: add rows, or a test file)")
        held = max(1, min(int(len(train) * HELD_OUT_SHARE), HELD_OUT_MAX))
        # Seeded choice of the held-out rows; both parts keep the file's order (train_samples takes the first)
        chosen = set(random.Random(HELD_OUT_SEED).sample(range(len(train)), held))
        test = train.select(sorted(chosen))
        train = train.select([i for i in range(len(train)) if i not in chosen])
    return {"train": train.to_list(), "test": test.to_list()}


# ---------------------------------------------------------------------------------------------------
# Mapping columns to rows

def _pick(columns: list[str], wanted: str | None, defaults: tuple[str, ...], role: str, spec: DataSpec) -> str:
    key = f"{role}_field"
    if wanted:
        if wanted not in columns:
            raise UsageError(f"dataset {spec.dataset}: no column '{wanted}' (columns: {', '.join(columns)}) "
                             f"(fix: set {key} to one of them)")
        return wanted
    for name in defaults:
        if name in columns:
            return name
    raise UsageError(f"dataset {spec.dataset}: no {role} column: none of {', '.join(defaults)} (columns: "
                     f"{', '.join(columns)}) (fix: set {key})")


def _is_chat(value) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, dict) and "role" in m and "content" in m for m in value))


def gold_reader(spec: DataSpec, default_pattern: str | None = None):
    """A function from an answer field to the gold answer (None when the pattern cannot read it)."""
    text = spec.answer_pattern or default_pattern
    if not text:
        return lambda value: str(value).strip() or None
    try:
        pattern = re.compile(text, re.DOTALL)
    except re.error as exc:
        raise UsageError(f"answer_pattern {text!r}: not a regular expression ({exc})") from None
    if pattern.groups < 1:
        raise UsageError(f"answer_pattern {text!r}: needs a group around the gold answer, e.g. '#### (.+)'")

    def read(value) -> str | None:
        found = pattern.findall(str(value))
        if not found:
            return None
        last = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
        return last.replace(",", "").strip() or None
    return read


def to_rows(records: list[dict], spec: DataSpec, system_prompt: str, split: str,
            default_pattern: str | None = None) -> tuple[list[dict], int]:
    """(rows for the trainer, rows dropped because their answer could not be read)."""
    if not records:
        raise UsageError(f"dataset {spec.dataset}: the {split} split is empty (fix: add rows)")
    columns = list(records[0].keys())
    chat = "prompt" in columns and _is_chat(records[0].get("prompt")) and not spec.question_field
    question = None if chat else _pick(columns, spec.question_field, QUESTION_FIELDS, "question", spec)
    answer = _pick(columns, spec.answer_field, ANSWER_FIELDS, "answer", spec)
    read_gold = gold_reader(spec, default_pattern)
    rows, unreadable = [], []
    for index, record in enumerate(records):
        gold = read_gold(record.get(answer)) if record.get(answer) is not None else None
        if gold is None:
            unreadable.append(index)
            continue
        if chat:
            prompt = record["prompt"]
        else:
            text = record.get(question)
            if not isinstance(text, (str, int, float)) or not str(text).strip():
                raise UsageError(f"dataset {spec.dataset} ({split}) row {index}: column '{question}' is empty or "
                                 f"not text ({text!r})")
            prompt = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
                [{"role": "user", "content": str(text).strip()}]
        extra = {k: v for k, v in record.items() if k not in RESERVED and k not in (question, answer)}
        rows.append({**extra, "prompt": prompt, "answer": gold})
    share = len(unreadable) / len(records)
    if share > MAX_UNREADABLE_SHARE:
        shown = ", ".join(map(str, unreadable[:5]))
        raise UsageError(f"dataset {spec.dataset} ({split}): the answer of {len(unreadable)} of {len(records)} rows "
                         f"({share:.0%}; rows {shown}{', ...' if len(unreadable) > 5 else ''}) cannot be read from "
                         f"column '{answer}' with answer_pattern {spec.answer_pattern or default_pattern!r} (more than "
                         f"{MAX_UNREADABLE_SHARE:.0%} is refused) (fix: set answer_pattern, a regex whose first "
                         "group is the gold answer, or answer_field)")
    return rows, len(unreadable)
