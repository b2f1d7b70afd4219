"""HOW MANY training prompts a task has, known at plan time without loading it: what an epoch of the data is.

Known from metadata alone, offline, without reading a large file's rows:
- the shipped tasks: `gsm8k` (GSM8K's train split holds 7,473 problems, also under its hub name openai/gsm8k,
  in either configuration), `arithmetic` (tasks.ARITHMETIC_TRAIN_SIZE generated problems) and `programs`
  (tasks.PROGRAMS_TRAIN_SIZE);
- a local .jsonl or .csv file by its lines (bounded: a file past COUNT_BYTES is not counted), a .json file by
  its list's length, a .parquet file by the row count in its footer (pyarrow, imported only then);
- a folder: the files of the split as `datasets` picks them by name (data/train-00000-of-00002.parquet,
  train/, train.jsonl, ...; every file when none is named for a split), each counted as above and summed;
  the walk is bounded (MAX_FOLDER_ENTRIES entries, MAX_FOLDER_DEPTH levels, MAX_FOLDER_FILES files);
- a hub dataset: the split's num_examples in the `datasets` cache's dataset_info.json (left by a load), else
  in the dataset card (README.md's `dataset_info`) in the hub cache. The network is never asked.
Anything else is None with the reason. `train_samples` caps what is used, as the trainer caps it. A source
without a test split gives a held-out tenth of these rows to the test split when it loads (tasks.data_sources);
the figure here is the split's size before that.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tasks.data_spec import SUFFIX_BUILDERS

GSM8K_TRAIN_ROWS = 7473
# tasks.ARITHMETIC_TRAIN_SIZE, kept here so that planning imports nothing of the task loaders
ARITHMETIC_TRAIN_ROWS = 5000
PROGRAMS_TRAIN_ROWS = 2000  # tasks.PROGRAMS_TRAIN_SIZE, likewise
COUNT_BYTES = 256 << 20  # a local text file (or a folder's text files together) larger than this is not counted
MAX_FOLDER_ENTRIES = 10_000  # a folder walk past this many entries stops: the size is then known once it loads
MAX_FOLDER_DEPTH = 8
MAX_FOLDER_FILES = 1_000
MAX_INFO_BYTES = 4 << 20  # a dataset_info.json or dataset card larger than this is not read

# Hub datasets whose sizes are published and fixed: {hub id in lower case: (name, configurations, split rows)}
KNOWN_HUB_SPLITS = {
    "openai/gsm8k": ("GSM8K", ("main", "socratic"), {"train": GSM8K_TRAIN_ROWS, "test": 1319}),
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # as tasks.data_spec reads a hub id
# `datasets`' own naming of splits in a folder: a keyword with one of these characters (or nothing) either side
_SEP = r"[-._ 0-9]"
_SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_IN_FOLDER_NAME = {
    split: re.compile(rf"^(?:.*{_SEP})?(?:{'|'.join(words)})(?:{_SEP}.*)?$") for split, words in _SPLIT_KEYWORDS.items()
}
_IN_FILE_NAME = {
    split: re.compile(rf"^(?:.*{_SEP})?(?:{'|'.join(words)}){_SEP}.*$") for split, words in _SPLIT_KEYWORDS.items()
}
_SHARDED = re.compile(r"^data/(\w+(?:\.\w+)*)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*$")
_NOT_DATA = {"config.json", "dataset_info.json", "dataset_infos.json", "dataset_dict.json"}  # `datasets` skips


def train_rows(
    dataset: str, train_samples: int = 0, *, config: str | None = None, split: str = "train"
) -> tuple[int | None, str]:
    """(training prompts, where the figure comes from); (None, why) when not known before the data loads.

    config and split: the profile's dataset_config and train_split, for a hub dataset or a folder."""
    rows, source = _rows(str(dataset), config or None, split or "train")
    if train_samples and (rows is None or train_samples < rows):
        if rows is None:
            return None, f"{source}; train_samples {train_samples} caps it"
        return train_samples, f"train_samples {train_samples} of {rows:,}"
    return rows, source


def _rows(dataset: str, config: str | None, split: str) -> tuple[int | None, str]:
    if dataset == "gsm8k":
        return GSM8K_TRAIN_ROWS, "GSM8K's train split"
    if dataset == "arithmetic":
        return ARITHMETIC_TRAIN_ROWS, "the generated arithmetic problems"
    if dataset == "programs":
        return PROGRAMS_TRAIN_ROWS, "the generated programming problems"
    path = Path(dataset).expanduser()
    try:
        if path.is_dir():
            return _folder_rows(path, dataset, split)
        if path.is_file():
            return _file_split_rows(path, dataset, split)
        if os.path.lexists(path):  # a broken link, or a loop of links
            return None, f"{dataset}: cannot be read at plan time (a link that leads nowhere)"
    except OSError:
        return None, f"{dataset}: cannot be read at plan time"
    if _HUB_ID.match(dataset):
        return _hub_rows(dataset, config, split)
    return None, f"{dataset}: its size is known once it loads"


# --- local files -----------------------------------------------------------------------------------------------


def _file_split_rows(path: Path, dataset: str, split: str) -> tuple[int | None, str]:
    """A single file is the train split; train.<ext> with test.<ext> beside it holds the test split too."""
    if split == "train":
        return _file_rows(path, dataset)
    sibling = path.with_name("test" + path.suffix)
    if split == "test" and path.stem == "train" and sibling.is_file():
        return _file_rows(sibling, str(sibling))
    return None, f"{dataset}: a single file holds the train split only, not '{split}'"


def _file_rows(path: Path, shown: str) -> tuple[int | None, str]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(path, shown)
    try:
        size = path.stat().st_size
    except OSError:
        return None, f"{shown}: cannot be read at plan time"
    if size > COUNT_BYTES:
        return None, f"{shown}: too large to count at plan time"
    try:
        if suffix == ".jsonl":
            with open(path, "rb") as handle:
                return sum(1 for line in handle if line.strip()), f"{path.name}'s lines"
        if suffix == ".csv":
            import csv

            from tasks.csv_delimiter import delimiter

            with open(path, encoding="utf-8", newline="") as handle:
                rows = csv.reader(handle, delimiter=delimiter(path))
                return max(0, sum(1 for _ in rows) - 1), f"{path.name}'s rows"
        if suffix == ".json":
            import json

            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):  # {"train": [...], "test": [...]} or {"data": [...]}
                data = data.get("train", data.get("data"))
            if isinstance(data, list):
                return len(data), f"{path.name}'s rows"
    except (OSError, UnicodeDecodeError, ValueError):
        return None, f"{shown}: cannot be counted at plan time"
    return None, f"{shown}: its size is known once it loads"


def _parquet_rows(path: Path, shown: str) -> tuple[int | None, str]:
    """The row count the footer states; the row groups themselves are not read."""
    try:
        import pyarrow.parquet as parquet  # a dependency of `datasets`; imported here so that planning stays light
    except ImportError:
        return None, f"{shown}: a parquet file is counted from its footer, which needs pyarrow (pip install pyarrow)"
    try:
        rows = parquet.read_metadata(path).num_rows
    except Exception:  # pyarrow's own errors for a file that is not parquet, or one cut short
        return None, f"{shown}: its parquet footer cannot be read (not a parquet file, or cut short)"
    return int(rows), f"{path.name}'s parquet footer"


# --- folders ---------------------------------------------------------------------------------------------------


def _folder_rows(folder: Path, shown: str, split: str) -> tuple[int | None, str]:
    files, problem = _data_files(folder, shown)
    if files is None:
        return None, problem
    if not files:
        return None, f"{shown}: the folder holds no {', '.join(SUFFIX_BUILDERS)} files"
    splits = _splits(files)
    chosen = splits.get(split)
    if not chosen:
        return None, f"{shown}: no file of a '{split}' split (splits there: {', '.join(splits)})"
    if len({SUFFIX_BUILDERS[Path(f).suffix.lower()] for f in chosen}) > 1:
        return None, f"{shown}: the {split} split is in more than one format (it is refused when it loads)"
    if len(chosen) > MAX_FOLDER_FILES:
        return None, f"{shown}: {len(chosen):,} {split} files, more than are counted at plan time"
    total, text_bytes = 0, 0
    for name in chosen:
        path = folder / name
        if path.suffix.lower() != ".parquet":
            try:
                text_bytes += path.stat().st_size
            except OSError:
                return None, f"{shown}: {name} cannot be read at plan time"
            if text_bytes > COUNT_BYTES:
                return None, f"{shown}: too large to count at plan time"
        rows, why = _file_rows(path, f"{shown}/{name}")
        if rows is None:
            return None, why
        total += rows
    count = f"{len(chosen)} {split} file{'s' if len(chosen) > 1 else ''}"
    return total, f"{Path(shown).name}: {count} ({_what_counted(chosen)})"


def _what_counted(files: list[str]) -> str:
    kinds = {Path(f).suffix.lower() for f in files}
    words = [
        w for s, w in ((".jsonl", "lines"), (".csv", "rows"), (".json", "lists"), (".parquet", "footers")) if s in kinds
    ]
    return ("its " if len(files) == 1 else "their ") + " and ".join(words)


def _data_files(folder: Path, shown: str) -> tuple[list[str] | None, str]:
    """The data files under folder (paths relative to it, '/'-separated, sorted), or (None, why). Hidden and
    __special__ names are skipped as `datasets` skips them; a folder reached twice (a loop of links) is walked once.
    """
    found: list[str] = []
    seen: set[tuple[int, int]] = set()
    stack = [(folder, "", 0)]
    entries = 0
    while stack:
        directory, prefix, depth = stack.pop()
        try:
            info = directory.stat()
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            with os.scandir(directory) as listing:
                for entry in listing:
                    entries += 1
                    if entries > MAX_FOLDER_ENTRIES:
                        return (
                            None,
                            f"{shown}: more than {MAX_FOLDER_ENTRIES:,} entries, more than are walked at plan time",
                        )
                    name = entry.name
                    if name.startswith((".", "__")):
                        continue
                    try:
                        if entry.is_dir():
                            if depth >= MAX_FOLDER_DEPTH:
                                return (
                                    None,
                                    f"{shown}: nested more than {MAX_FOLDER_DEPTH} folders deep, deeper than is walked at plan time",
                                )
                            stack.append((Path(entry.path), f"{prefix}{name}/", depth + 1))
                        elif entry.is_file() and Path(name).suffix.lower() in SUFFIX_BUILDERS and name not in _NOT_DATA:
                            found.append(prefix + name)
                    except OSError:  # a link in a loop or to nowhere: not a file `datasets` would read
                        continue
        except OSError:
            return None, f"{shown}: {directory} cannot be read at plan time"
    return sorted(found), ""


def _splits(files: list[str]) -> dict[str, list[str]]:
    """{split: files} as `datasets` names a folder's splits: sharded data/<split>-00000-of-00002.* files; else
    folders named for a split (train/, eval-2024/); else files named for one (train.jsonl, my_test.csv); else
    every file is the train split."""
    sharded: dict[str, list[str]] = {}
    for name in files:
        found = _SHARDED.match(name)
        if found:
            sharded.setdefault(found.group(1), []).append(name)
    if sharded:
        return sharded
    by_folder = {
        split: [f for f in files if any(pattern.match(part) for part in f.split("/")[:-1])]
        for split, pattern in _IN_FOLDER_NAME.items()
    }
    if any(by_folder.values()):
        return {split: named for split, named in by_folder.items() if named}
    by_name = {
        split: [f for f in files if pattern.match(f.rsplit("/", 1)[-1])] for split, pattern in _IN_FILE_NAME.items()
    }
    if any(by_name.values()):
        return {split: named for split, named in by_name.items() if named}
    return {"train": files}


# --- hub datasets ----------------------------------------------------------------------------------------------


def _hub_rows(dataset: str, config: str | None, split: str) -> tuple[int | None, str]:
    known = KNOWN_HUB_SPLITS.get(dataset.lower())
    if known is not None:
        name, configs, splits = known
        if config and config not in configs:
            return None, f"{dataset}: no configuration '{config}' (it has {', '.join(configs)})"
        if split not in splits:
            return None, f"{dataset}: no split '{split}' (it has {', '.join(splits)})"
        return splits[split], f"{dataset}: {name}'s {split} split"
    problems = []
    for read in (_datasets_cache_rows, _hub_card_rows):
        rows, why = read(dataset, config, split)
        if rows is not None:
            return rows, why
        if why:
            problems.append(why)
    if problems:
        return None, f"{dataset}: {'; '.join(problems)}"
    return None, f"{dataset}: not in the local Hugging Face caches"


def _cache_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface"


def _datasets_cache() -> Path:
    named = os.environ.get("HF_DATASETS_CACHE")
    return Path(named).expanduser() if named else _cache_home() / "datasets"


def _hub_cache() -> Path:
    named = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(named).expanduser() if named else _cache_home() / "hub"


def _snake_case(name: str) -> str:
    """A hub name as the `datasets` cache spells its folder: OpenR1-Math -> open_r1-math."""
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _pick_config(available: list[str], config: str | None, where: str) -> tuple[str | None, str]:
    if config:
        return (config, "") if config in available else (None, f"{where} holds no configuration '{config}'")
    if "default" in available or len(available) == 1:
        return ("default" if "default" in available else available[0]), ""
    return None, f"{where} holds several configurations ({', '.join(available)}) and dataset_config names none"


def _split_size(splits, split: str, where: str) -> tuple[int | None, str]:
    """num_examples of `split` in a {name: {num_examples}} mapping or a [{name, num_examples}] list."""
    if isinstance(splits, list):
        splits = {s.get("name"): s for s in splits if isinstance(s, dict)}
    if not isinstance(splits, dict) or not splits:
        return None, f"{where} lists no splits"
    entry = splits.get(split)
    rows = entry.get("num_examples") if isinstance(entry, dict) else None
    if entry is None:
        return None, f"{where} has no '{split}' split (it has {', '.join(map(str, splits))})"
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        return None, f"{where} gives no row count for the '{split}' split"
    return rows, ""


def _read_small(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_INFO_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _datasets_cache_rows(dataset: str, config: str | None, split: str) -> tuple[int | None, str]:
    """The split's size in dataset_info.json of the `datasets` cache: <org>___<name>/<config>/<version>/<hash>/."""
    import json

    org, name = dataset.split("/", 1)
    root = _datasets_cache() / f"{org}___{_snake_case(name)}"
    where = "the datasets cache"
    try:
        if not root.is_dir():
            return None, ""
        available = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        chosen, why = _pick_config(available, config, where)
        if chosen is None:
            return None, why
        infos = sorted(
            (p for p in (root / chosen).glob("*/*/dataset_info.json") if ".incomplete" not in str(p)),
            key=lambda p: p.stat().st_mtime,
        )
    except OSError:
        return None, f"{where} cannot be read at plan time"
    if not infos:
        return None, f"{where} holds no dataset_info.json for {chosen}"
    text = _read_small(infos[-1])
    try:
        info = json.loads(text) if text is not None else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return None, f"{where}'s dataset_info.json ({chosen}) is not readable JSON"
    rows, why = _split_size(info.get("splits"), split, f"{where}'s dataset_info.json ({chosen})")
    if rows is None:
        return None, why
    return rows, f"{dataset}'s {split} split ({chosen}), from the datasets cache"


def _hub_card_rows(dataset: str, config: str | None, split: str) -> tuple[int | None, str]:
    """The split's size in the dataset card's `dataset_info` (README.md's YAML header) in the hub cache."""
    repo = _hub_cache() / f"datasets--{dataset.replace('/', '--')}"
    where = "the hub cache's dataset card"
    try:
        if not repo.is_dir():
            return None, ""
        snapshots = repo / "snapshots"
        main = _read_small(repo / "refs" / "main")
        snapshot = snapshots / main.strip() if main and main.strip() else None
        if snapshot is None or not snapshot.is_dir():
            candidates = sorted((d for d in snapshots.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
            snapshot = candidates[-1] if candidates else None
        card = snapshot / "README.md" if snapshot is not None else None
        if card is None or not card.is_file():
            return None, ""
    except OSError:
        return None, f"{where} cannot be read at plan time"
    header = _card_header(_read_small(card))
    if header is None:
        return None, f"{where} has no readable YAML header"
    info = header.get("dataset_info")
    entries = info if isinstance(info, list) else [info] if isinstance(info, dict) else []
    entries = [e for e in entries if isinstance(e, dict)]
    if not entries:
        return None, f"{where} gives no dataset_info"
    by_config = {str(e.get("config_name") or "default"): e for e in entries}
    chosen, why = _pick_config(sorted(by_config), config, where)
    if chosen is None:
        return None, why
    rows, why = _split_size(by_config[chosen].get("splits"), split, f"{where} ({chosen})")
    if rows is None:
        return None, why
    return rows, f"{dataset}'s {split} split ({chosen}), from its dataset card in the hub cache"


def _card_header(text: str | None) -> dict | None:
    """The YAML between a dataset card's opening `---` lines, as a mapping; None when there is none."""
    if not text or not text.startswith("---"):
        return None
    end = re.search(r"^---\s*$", text[3:], re.MULTILINE)
    if end is None:
        return None
    import yaml

    try:
        header = yaml.safe_load(text[3 : 3 + end.start()])
    except yaml.YAMLError:
        return None
    return header if isinstance(header, dict) else None
