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
from contract.shell import quoted

SUFFIX_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
QUESTION_FIELDS = ("question", "prompt", "problem")
ANSWER_FIELDS = ("answer", "solution", "label")
HELD_OUT_SHARE = 0.1
HELD_OUT_MAX = 500
HELD_OUT_SEED = 0  # fixed: the test rows stay the same when the training seed changes
# More unreadable answers than this share and the data is refused (fewer are dropped and counted).
MAX_UNREADABLE_SHARE = 0.1
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
    def of(cls, profile) -> DataSpec:
        keys = [f for f in cls.__dataclass_fields__ if f != "dataset"]
        values = {k: getattr(profile, k) for k in keys if getattr(profile, k, None) not in (None, "")}
        if getattr(profile, "system_prompt", None) == "":
            values["system_prompt"] = ""
        return cls(dataset=str(profile.dataset), **values)


def source_kind(dataset: str) -> str:
    """ "file", "folder" or "hub" for a dataset that is not a registered task name; UsageError otherwise."""
    path = Path(dataset).expanduser()
    if path.is_dir():
        return "folder"
    if path.exists():
        if not path.is_file():
            raise UsageError(f"dataset {dataset}: not a regular file")
        if path.suffix.lower() not in SUFFIX_BUILDERS:
            raise UsageError(
                f"dataset {dataset}: unknown file type '{path.suffix}' (fix: give a "
                f"{', '.join(SUFFIX_BUILDERS)} file, a folder of them, or a hub id org/name)"
            )
        return "file"
    if _HUB_ID.match(dataset) and not dataset.endswith(tuple(SUFFIX_BUILDERS)):
        return "hub"
    raise UsageError(
        f"dataset {dataset!r}: no such file or folder, and not a hub id of the form org/name "
        "(fix: check the path, or give gsm8k or arithmetic)"
    )


# ---------------------------------------------------------------------------------------------------
# Reading


def _offline() -> bool:
    return any(
        os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


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


# How much of a text file is read to tell its encoding and shape before `datasets` parses it all.
SNIFF_BYTES = 1 << 20
_WRAPPED_JSON = re.compile(rb'^\s*\{\s*"((?:[^"\\]|\\.){1,200})"\s*:\s*\[')


def _text_problem(path: Path) -> str | None:
    """What makes a .csv / .json / .jsonl file unreadable as UTF-8 rows, from its first SNIFF_BYTES: empty,
    UTF-16, NUL bytes, or another encoding (Latin-1, Windows-1252), with the line; None when it looks right."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        return f"cannot be opened ({exc.strerror or exc})"
    if not head.strip():
        return (
            "the file is empty: no rows (fix: add a header line and rows)"
            if path.suffix.lower() == ".csv"
            else "the file is empty: no rows (fix: add rows, one JSON object per line)"
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head[:4096]:
        return (
            "the file is UTF-16 text (or holds NUL bytes), not UTF-8 (fix: save it as UTF-8, e.g. `iconv -f "
            f"utf-16 -t utf-8 {path.name} > utf8-{path.name}`, or 'CSV UTF-8' in a spreadsheet's Save As)"
        )
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut in two by the sniff's end
            line = head[: exc.start].count(b"\n") + 1
            return (
                f"the file is not UTF-8 text (byte 0x{head[exc.start]:02x} on line {line}: Latin-1 or "
                f"Windows-1252?) (fix: save it as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > "
                f"utf8-{path.name}`)"
            )
    return None


# `datasets` handles a table's column list in time that grows with its square (its Features are rebuilt
# column by column): a hundred-row file of 2,000 columns took minutes. Past this, the file is refused at once.
MAX_COLUMNS = 256


def _column_count(path: Path) -> int | None:
    """How many columns a local file has, from its header (CSV), its first object (JSON Lines) or its schema
    (Parquet); None when that cannot be told cheaply (a .json list, an unreadable head)."""
    import csv
    import io

    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return len(pq.read_schema(path).names)
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES).decode("utf-8", errors="replace")
        first = head.split("\n", 1)[0]
        if suffix == ".csv":
            return len(next(csv.reader(io.StringIO(first)), []))
        if suffix == ".jsonl" and "\n" in head:
            row = json.loads(first)
            return len(row) if isinstance(row, dict) else None
    except Exception:  # noqa: BLE001 - the reader proper says what is wrong with the file
        return None
    return None


def _json_field(path: Path) -> str | None:
    """The key of a .json file shaped {"data": [rows...]}: its rows are that list."""
    if path.suffix.lower() != ".json":
        return None
    try:
        with open(path, "rb") as handle:
            found = _WRAPPED_JSON.match(handle.read(4096))
    except OSError:
        return None
    return json.loads(b'"' + found.group(1) + b'"') if found else None


def _load_local(spec: DataSpec, kind: str):
    datasets = _quiet_datasets()

    path = Path(spec.dataset).expanduser()
    files = [path] if kind == "file" else sorted(f for f in path.iterdir() if f.suffix.lower() in SUFFIX_BUILDERS)
    for file in files:
        problem = _text_problem(file) if file.suffix.lower() in (".csv", ".json", ".jsonl") else None
        if problem:
            raise UsageError(f"dataset {file}: {problem}")
        columns = _column_count(file)
        if columns is not None and columns > MAX_COLUMNS:
            raise UsageError(
                f"dataset {file}: {columns:,} columns; reading a table that wide takes `datasets` "
                f"minutes (its time grows with the square of the columns) (fix: keep the question, "
                f"the answer and the columns your rewards read, at most {MAX_COLUMNS}, e.g. "
                f"`cut -d, -f1-20 {quoted(file.name)} > narrow.csv`)"
            )
    try:
        if kind == "file":
            builder = SUFFIX_BUILDERS[path.suffix.lower()]
            files = {"train": str(path)}
            sibling = path.with_name("test" + path.suffix)
            if path.stem == "train" and sibling.is_file():  # train.csv with test.csv beside it: the two splits
                files["test"] = str(sibling)
            field = _json_field(path)
            if field is not None:  # {"data": [rows...]}: the rows are under that key
                return datasets.load_dataset(builder, data_files=files, field=field)
            return datasets.load_dataset(builder, data_files=files)
        return _load_folder(datasets, path)
    except UsageError:
        raise
    except Exception as error:
        raise UsageError(f"dataset {path}: {_read_error(path, kind, error)}") from None


def _load_folder(datasets, path: Path):
    """A folder's splits as `datasets` finds them (train.*, test.*, ...). `datasets` reads a folder in one format
    only; splits in different formats (train.jsonl beside test.csv) are read each with its own reader."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    try:
        splits = DataFilesDict.from_patterns(get_data_patterns(str(path)), base_path=str(path))
    except Exception:  # no split names among the files: `datasets` takes them all as one split
        return datasets.load_dataset(str(path))
    builders = {}
    for split, files in splits.items():
        kinds = {SUFFIX_BUILDERS.get(Path(f).suffix.lower()) for f in files} - {None}
        if len(kinds) > 1:
            names = ", ".join(sorted(Path(f).name for f in files))
            raise UsageError(
                f"dataset {path}: the {split} split is in more than one format ({names}) (fix: keep "
                f"the {split} rows in files of one type, e.g. all .jsonl)"
            )
        if kinds:
            builders[str(split)] = (kinds.pop(), [str(f) for f in files if Path(f).suffix.lower() in SUFFIX_BUILDERS])
    if len({builder for builder, _files in builders.values()}) <= 1:
        return datasets.load_dataset(str(path))
    parts = {}
    for split, (builder, files) in builders.items():
        parts[split] = datasets.load_dataset(builder, data_files={split: files})[split]
    return datasets.DatasetDict(parts)


def _read_error(path: Path, kind: str, error: BaseException) -> str:
    """Why `datasets` could not read a local file, with the fix that fits the cause."""
    text = _first_line(error)
    suffix = path.suffix.lower() if kind == "file" else ""
    if "corresponds to no data" in text or "StopIteration" in text:
        return (
            "it holds no rows (fix: add rows below the header line)"
            if suffix == ".csv"
            else "it holds no rows (fix: add rows)"
        )
    if "Invalid UTF8" in text or "UnicodeDecodeError" in text:
        return (
            f"cannot be read ({text}): the file is not UTF-8 text past its first megabyte (fix: save it as "
            "UTF-8, e.g. `iconv -f latin1 -t utf-8`)"
        )
    if suffix == ".jsonl":
        return f"cannot be read ({_bad_json_line(path) or text}) (fix: one JSON object per line)"
    if suffix == ".json":
        return (
            f"cannot be read ({text}) (fix: a list of objects [{{...}}, ...], one object per line, or "
            '{"data": [{...}, ...]})'
        )
    if suffix == ".csv":
        return f"cannot be read ({text}) (fix: a header line naming the columns, then one row per line)"
    return f"cannot be read ({text})"


_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub's host answers on its port within timeout_s (True behind a proxy: not ours to judge)."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return True
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection(
            (endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)),
            timeout_s,
        ):
            return True
    except OSError:
        return False


def _load_hub(spec: DataSpec):
    import sys

    offline = _offline()
    unreachable = not offline and not _hub_reachable()
    if unreachable and "datasets" not in sys.modules:
        # No network: read the cache at once instead of retrying the hub for half a minute. datasets and
        # huggingface_hub read these at import; they are put back after it so that no child inherits them.
        saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
        os.environ.update({name: "1" for name in saved})
        try:
            datasets = _quiet_datasets()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    else:
        datasets = _quiet_datasets()
    try:
        return datasets.load_dataset(spec.dataset, spec.dataset_config)
    except Exception as error:
        text = str(error).lower()
        if offline or unreachable or "offline" in text or "connect" in text or "not cached" in text:
            why = (
                "HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set"
                if offline
                else "the hub cannot be reached from here (no network)"
                if unreachable
                else "the hub cannot be reached"
            )
            raise UsageError(
                f"dataset {spec.dataset}: not in the local Hugging Face cache, and {why} ({_first_line(error)}) "
                f'(fix: download it once where there is network, e.g. `python -c "import datasets; '
                f"datasets.load_dataset('{spec.dataset}')\"`, then run with HF_DATASETS_OFFLINE=1; or give a local "
                ".jsonl/.csv/.parquet file)"
            ) from None
        raise UsageError(
            f"dataset {spec.dataset}: cannot be loaded ({_first_line(error)}) (fix: check the id and dataset_config)"
        ) from None


def load_splits(spec: DataSpec, row_numbers: dict | None = None, as_datasets: bool = False) -> dict:
    """{"train": rows, "test": rows} as plain dicts, with the held-out tenth when there is no test split.

    row_numbers, when given, receives each split's rows' positions in their file ({"train": [0, 1, 3, ...],
    "test": [2, ...]}) and "held_out": whether the test rows came out of the training file, so that errors
    name the file's rows and judge the file as a whole. as_datasets: the splits as `datasets.Dataset`s (on
    disk, memory-mapped) instead of lists, for a caller that reads only some of the rows."""
    kind = source_kind(spec.dataset)
    data = _load_hub(spec) if kind == "hub" else _load_local(spec, kind)
    names = list(data.keys())
    if spec.train_split not in data:
        raise UsageError(
            f"dataset {spec.dataset}: no split '{spec.train_split}' (splits there: "
            f"{', '.join(names)}) (fix: set train_split)"
        )
    train = data[spec.train_split]
    numbers = {"train": list(range(len(train))), "test": [], "held_out": False}
    if spec.test_split in data and spec.test_split != spec.train_split:
        test = data[spec.test_split]
        numbers["test"] = list(range(len(test)))
    else:
        if len(train) == 0:
            raise UsageError(f"dataset {spec.dataset}: it holds no rows (fix: add rows)")
        if len(train) < 2:
            raise UsageError(
                f"dataset {spec.dataset}: {len(train)} row(s): too few to hold out a test split "
                "(fix: add rows, or a test file)"
            )
        held = max(1, min(int(len(train) * HELD_OUT_SHARE), HELD_OUT_MAX))
        # Seeded choice of the held-out rows; both parts keep the file's order (train_samples takes the first)
        chosen = set(random.Random(HELD_OUT_SEED).sample(range(len(train)), held))
        numbers["test"] = sorted(chosen)
        numbers["train"] = [i for i in range(len(train)) if i not in chosen]
        numbers["held_out"] = True
        test = train.select(numbers["test"])
        train = train.select(numbers["train"])
    if row_numbers is not None:
        row_numbers.update(numbers)
    if as_datasets:
        return {"train": train, "test": test}
    return {"train": train.to_list(), "test": test.to_list()}


# ---------------------------------------------------------------------------------------------------
# Mapping columns to rows


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


def gold_reader(spec: DataSpec, default_pattern: str | None = None):
    """A function from an answer field to the gold answer (None when the pattern cannot read it)."""
    text = spec.answer_pattern or default_pattern
    if not text:
        return _cell_text
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


def shown_rows(numbers: list[int]) -> str:
    """File positions as people count rows: from 1, the first data row after any header being row 1."""
    shown = ", ".join(str(n + 1) for n in numbers[:5])
    return f"{shown}{', ...' if len(numbers) > 5 else ''}"


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
    read_gold = gold_reader(spec, default_pattern)
    rows, unreadable, no_question = [], [], []
    for index, record in enumerate(records):
        gold = read_gold(record.get(answer))
        if chat:
            prompt = record["prompt"]
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
        extra = {k: v for k, v in record.items() if k not in RESERVED and k not in (question, answer)}
        rows.append({**extra, "prompt": prompt, "answer": gold})
    if unreadable_out is not None:
        unreadable_out.extend(unreadable)
    if judge:
        check_unreadable(spec, f" ({split})", unreadable, len(records), question, answer, default_pattern, no_question)
    return rows, len(unreadable)


SCAN_BATCH = 8192


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
    read_gold = gold_reader(spec, default_pattern)
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


def check_unreadable(
    spec: DataSpec,
    where: str,
    unreadable: list[int],
    total: int,
    question: str | None,
    answer: str,
    default_pattern: str | None = None,
    no_question: list[int] = (),
) -> None:
    """Refuse data of which more than MAX_UNREADABLE_SHARE of the rows have no readable answer or an empty
    question, saying which of the two it is; the rows named are the file's."""
    share = len(unreadable) / total if total else 0.0
    if share <= MAX_UNREADABLE_SHARE:
        return
    empty = set(no_question)
    no_answer = sorted(n for n in unreadable if n not in empty)
    both = bool(empty) and bool(no_answer)  # each part then names its own rows
    pattern = spec.answer_pattern or default_pattern
    parts, fixes = [], []
    if empty:
        parts.append(
            f"{len(empty)} have an empty '{question}' cell" + (f" (rows {shown_rows(sorted(empty))})" if both else "")
        )
        fixes.append(f"fill the '{question}' cells, or set question_field to the column holding the questions")
    if no_answer:
        read_from = f"column '{answer}'" + (f" with answer_pattern {pattern!r}" if pattern else "")
        parts.append(
            f"the answer of {len(no_answer)} cannot be read from {read_from}"
            + (f" (rows {shown_rows(no_answer)})" if both else "")
        )
        fixes.append(
            "fill those answer cells, or set answer_pattern (a regex whose first group is the gold "
            "answer) or answer_field"
        )
    raise UsageError(
        f"dataset {spec.dataset}{where}: {len(unreadable)} of {total} rows ({share:.0%}; rows "
        f"{shown_rows(sorted(unreadable))} of the file, counted from 1 after any header) cannot be "
        f"used: {'; '.join(parts)} (more than {MAX_UNREADABLE_SHARE:.0%} is refused) (fix: "
        f"{'; '.join(fixes)})"
    )
