"""HOW the user's data is read: a local .jsonl / .json / .csv / .parquet file or folder through `datasets`' own
loaders, or a hub dataset (its local cache when there is no network), into its splits.

Splits come from explicit names only: the profile's `train_split` / `test_split`, or the files a folder holds
(`train.*`, `test.*`, as `datasets` names them). A source without the test split holds out a seeded tenth of
its training rows (at most HELD_OUT_MAX), the same rows whatever the training seed. Every refusal is a
UsageError naming the source and the fix (tasks.data_checks words them); `datasets` is imported only when
data is read, never by the planner's dry run.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

from contract.errors import UsageError
from contract.shell import quoted
from tasks.csv_delimiter import delimiter
from tasks.data_checks import MAX_COLUMNS, column_count, first_line, read_error, text_problem
from tasks.data_spec import SUFFIX_BUILDERS, DataSpec, source_kind

HELD_OUT_SHARE = 0.1
HELD_OUT_MAX = 500
HELD_OUT_SEED = 0  # fixed: the test rows stay the same when the training seed changes


def _offline() -> bool:
    return any(
        os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _quiet_datasets():
    import datasets

    # A bar per split read, and the parser's own log line on a bad file, are noise beside the one line
    # this module says (a refusal names the file, the line and the fix itself).
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    return datasets


_WRAPPED_JSON = re.compile(rb'^\s*\{\s*"((?:[^"\\]|\\.){1,200})"\s*:\s*\[')


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
        problem = text_problem(file) if file.suffix.lower() in (".csv", ".json", ".jsonl") else None
        if problem:
            raise UsageError(f"dataset {file}: {problem}")
        columns = column_count(file)
        if columns is not None and columns > MAX_COLUMNS:
            separator = delimiter(file) if file.suffix.lower() == ".csv" else ","
            cut = "cut -f1-20" if separator == "\t" else f"cut -d{quoted(separator)} -f1-20"  # cut splits at tabs
            raise UsageError(
                f"dataset {file}: {columns:,} columns; reading a table that wide takes `datasets` "
                f"minutes (its time grows with the square of the columns) (fix: keep the question, "
                f"the answer and the columns your rewards read, at most {MAX_COLUMNS}, e.g. "
                f"`{cut} {quoted(file.name)} > narrow.csv`)"
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
            return datasets.load_dataset(builder, data_files=files, **_csv_options([path]))
        return _load_folder(datasets, path)
    except UsageError:
        raise
    except Exception as error:
        raise UsageError(f"dataset {path}: {read_error(path, kind, error)}") from None


def _load_folder(datasets, path: Path):
    """A folder's splits as `datasets` finds them (train.*, test.*, ...). `datasets` reads a folder in one format
    only; splits in different formats (train.jsonl beside test.csv) are read each with its own reader."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    try:
        splits = DataFilesDict.from_patterns(get_data_patterns(str(path)), base_path=str(path))
    except Exception:  # no split names among the files: `datasets` takes them all as one split
        return datasets.load_dataset(str(path), **_csv_options(sorted(path.iterdir())))
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
        return datasets.load_dataset(
            str(path), **_csv_options([Path(f) for _b, files in builders.values() for f in files])
        )
    parts = {}
    for split, (builder, files) in builders.items():
        options = _csv_options([Path(f) for f in files])
        parts[split] = datasets.load_dataset(builder, data_files={split: files}, **options)[split]
    return datasets.DatasetDict(parts)


def _csv_options(files) -> dict:
    """`datasets`' csv reader's delimiter for these files, when the first .csv among them is not separated by
    commas (a spreadsheet saved with `;`, a tab-separated export); the reader takes one for all of them."""
    first = next((Path(f) for f in files if str(f).lower().endswith(".csv")), None)
    found = delimiter(first) if first is not None else ","
    return {} if found == "," else {"sep": found}


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
                f"dataset {spec.dataset}: not in the local Hugging Face cache, and {why} ({first_line(error)}) "
                f'(fix: download it once where there is network, e.g. `python -c "import datasets; '
                f"datasets.load_dataset('{spec.dataset}')\"`, then run with HF_DATASETS_OFFLINE=1; or give a local "
                ".jsonl/.csv/.parquet file)"
            ) from None
        raise UsageError(
            f"dataset {spec.dataset}: cannot be loaded ({first_line(error)}) (fix: check the id and dataset_config)"
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
