"""HOW MANY training prompts a task has, known at plan time without loading it: what an epoch of the data is.

The shipped tasks' sizes are constants (GSM8K's train split holds 7,473 problems; `arithmetic` generates
tasks.ARITHMETIC_TRAIN_SIZE). A user's local .jsonl or .csv file is counted by its lines (bounded: a file past
COUNT_BYTES is not counted), a .json file by its list's length; a hub dataset, a parquet file or a folder is not
known before it loads (None). `train_samples` caps what is used, as the trainer caps it.
"""

from __future__ import annotations

from pathlib import Path

GSM8K_TRAIN_ROWS = 7473
# tasks.ARITHMETIC_TRAIN_SIZE, kept here so that planning imports nothing of the task loaders
ARITHMETIC_TRAIN_ROWS = 5000
COUNT_BYTES = 256 << 20  # a local file larger than this is not counted at plan time


def train_rows(dataset: str, train_samples: int = 0) -> tuple[int | None, str]:
    """(training prompts, where the figure comes from); (None, why) when not known before the data loads."""
    rows, source = _rows(str(dataset))
    if train_samples and (rows is None or train_samples < rows):
        if rows is None:
            return None, f"{source}; train_samples {train_samples} caps it"
        return train_samples, f"train_samples {train_samples} of {rows:,}"
    return rows, source


def _rows(dataset: str) -> tuple[int | None, str]:
    if dataset == "gsm8k":
        return GSM8K_TRAIN_ROWS, "GSM8K's train split"
    if dataset == "arithmetic":
        return ARITHMETIC_TRAIN_ROWS, "the generated arithmetic problems"
    path = Path(dataset).expanduser()
    try:
        if not path.is_file():
            return None, f"{dataset}: its size is known once it loads"
        size = path.stat().st_size
    except OSError:
        return None, f"{dataset}: cannot be read at plan time"
    if size > COUNT_BYTES:
        return None, f"{dataset}: too large to count at plan time"
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            with open(path, "rb") as handle:
                return sum(1 for line in handle if line.strip()), f"{path.name}'s lines"
        if suffix == ".csv":
            import csv

            with open(path, encoding="utf-8", newline="") as handle:
                return max(0, sum(1 for _ in csv.reader(handle)) - 1), f"{path.name}'s rows"
        if suffix == ".json":
            import json

            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):  # {"train": [...], "test": [...]} or {"data": [...]}
                data = data.get("train", data.get("data"))
            if isinstance(data, list):
                return len(data), f"{path.name}'s rows"
    except (OSError, UnicodeDecodeError, ValueError):
        return None, f"{dataset}: cannot be counted at plan time"
    return None, f"{dataset}: its size is known once it loads"
